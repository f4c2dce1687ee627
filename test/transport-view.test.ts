// The transports see a path only through TransportPath (lib/core/transport-path.ts): checked with
// the TypeScript compiler over lib/transports, so a new use of the core's own classes fails here.
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const transportsDir = join(root, 'lib', 'transports');
/** The core's classes behind the transport views; a transport that holds one reaches past them. */
const CORE_CLASSES = new Set([
  'RdsConnPath',
  'RdsConnection',
  'RdsStack',
  'Handshake',
  'PathSend',
  'AckPacer',
  'Heartbeat',
]);
/** Core modules that hold those classes: a transport imports none of them. */
const CORE_MODULES = [
  'core/path.js',
  'core/connection.js',
  'core/stack.js',
  'core/handshake.js',
  'core/send-queue.js',
  'ext/heartbeat.js',
  'ext/ack-pacing.js',
];

function program(): ts.Program {
  const cfgPath = join(root, 'tsconfig.json');
  const cfg = ts.readConfigFile(cfgPath, (p) => ts.sys.readFile(p));
  const parsed = ts.parseJsonConfigFileContent(cfg.config, ts.sys, root);
  // The transports and what they import: not the rest of lib (host node, tools).
  const rootNames = parsed.fileNames.filter((f) => f.startsWith(transportsDir));
  return ts.createProgram({ rootNames, options: { ...parsed.options, noEmit: true } });
}

/** Names of the classes a type is or holds at its top level (unions, arrays, Promise-free). */
function classNames(t: ts.Type): string[] {
  if (t.isUnion() || t.isIntersection()) return t.types.flatMap(classNames);
  const sym = t.getSymbol() ?? t.aliasSymbol;
  return sym ? [sym.getName()] : [];
}

describe('transports use only the transport views of the core', () => {
  it('no expression in lib/transports has the type of a core class, and no core class module is imported', () => {
    const prog = program();
    const checker = prog.getTypeChecker();
    const found: string[] = [];
    const files = prog.getSourceFiles().filter((f) => f.fileName.startsWith(transportsDir));
    expect(files.length).toBeGreaterThan(10);
    for (const sf of files) {
      const where = (n: ts.Node) =>
        `${relative(root, sf.fileName)}:${sf.getLineAndCharacterOfPosition(n.getStart()).line + 1}`;
      const visit = (n: ts.Node): void => {
        if (ts.isImportDeclaration(n) && ts.isStringLiteral(n.moduleSpecifier)) {
          const spec = n.moduleSpecifier.text;
          if (CORE_MODULES.some((m) => spec.endsWith(m))) found.push(`${where(n)} imports ${spec}`);
          return;
        }
        if (ts.isIdentifier(n) || ts.isPropertyAccessExpression(n) || ts.isCallExpression(n)) {
          for (const name of classNames(checker.getTypeAtLocation(n)))
            if (CORE_CLASSES.has(name)) found.push(`${where(n)} ${n.getText(sf)}: ${name}`);
        }
        ts.forEachChild(n, visit);
      };
      visit(sf);
    }
    expect(found).toEqual([]);
  }, 120_000);
});
