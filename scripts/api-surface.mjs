#!/usr/bin/env node
// The published API's names: every export of each entry point in package.json "exports" (from
// its .d.ts in dist/), and for an exported class or interface its public members (`Name.member`
// for instance members, `Name::member` for static ones). test/api-surface.test.ts compares this
// list with test/api-surface.txt, so a rename or removal fails the tests (the API is a contract:
// extend it, do not rename it) and an addition is written down on purpose.
//   node scripts/api-surface.mjs            print the list (after npm run build)
//   node scripts/api-surface.mjs --write    rewrite test/api-surface.txt with it
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** The sorted names of the package's published API, read from the declarations in dist/. */
export function apiSurface() {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  const entries = Object.entries(pkg.exports)
    .filter(([, v]) => typeof v === 'object' && v.types)
    .map(([k, v]) => [k === '.' ? '' : `${k.slice(2)}:`, join(root, v.types)]);
  const prog = ts.createProgram(
    entries.map(([, f]) => f),
    { strict: true },
  );
  const checker = prog.getTypeChecker();
  const out = new Set();
  const dist = join(root, 'dist');
  for (const [prefix, file] of entries) {
    const sf = prog.getSourceFile(file);
    if (sf === undefined) throw new Error(`${file} is missing: run npm run build first`);
    const mod = checker.getSymbolAtLocation(sf);
    for (const ex of checker.getExportsOfModule(mod)) {
      const name = `${prefix}${ex.name}`;
      out.add(name);
      const s = ex.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(ex) : ex;
      const decl = s.declarations?.[0];
      if (decl === undefined) continue;
      const members = (type, sep) => {
        for (const p of checker.getPropertiesOfType(type)) {
          const d = p.declarations?.[0];
          const flags = d === undefined ? 0 : ts.getCombinedModifierFlags(d);
          if (flags & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) continue;
          if (p.name.startsWith('#') || p.name.startsWith('__')) continue;
          // Members inherited from Node's or the language's declarations (Error's statics, ...)
          // are theirs, not ours: they change with @types/node, not with this package.
          if (d !== undefined && !d.getSourceFile().fileName.startsWith(dist)) continue;
          out.add(`${name}${sep}${p.name}`);
        }
      };
      if (s.flags & (ts.SymbolFlags.Class | ts.SymbolFlags.Interface)) members(checker.getDeclaredTypeOfSymbol(s), '.');
      if (s.flags & ts.SymbolFlags.Class) members(checker.getTypeOfSymbolAtLocation(s, decl), '::');
    }
  }
  return [...out].sort();
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const names = apiSurface();
  if (process.argv.includes('--write')) {
    writeFileSync(join(root, 'test/api-surface.txt'), `${names.join('\n')}\n`);
    console.log(`test/api-surface.txt: ${names.length} names`);
  } else console.log(names.join('\n'));
}
