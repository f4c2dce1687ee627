#!/usr/bin/env node
// npm run lint's size check: every lib/**/*.ts file stays at or under MAX_LINES lines. A file past
// it holds more than one thing a reader can keep in mind at once: split it along meaning (the
// kernel's file map, docs/architecture.md) rather than raise the limit.
//
//   node scripts/check-sizes.mjs   exit 1 and name every file over the limit, with its length
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const MAX_LINES = 450;
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Every .ts file under `dir`, recursively. */
function tsFiles(dir) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...tsFiles(p));
    else if (e.name.endsWith('.ts')) out.push(p);
  }
  return out;
}

/** Lines as `wc -l` and an editor count them: a last line without a newline still counts. */
function lineCount(text) {
  if (text === '') return 0;
  const n = text.split('\n').length;
  return text.endsWith('\n') ? n - 1 : n;
}

const over = [];
for (const f of tsFiles(join(ROOT, 'lib')).sort()) {
  const n = lineCount(readFileSync(f, 'utf8'));
  if (n > MAX_LINES) over.push(`${relative(ROOT, f)}: ${n} lines`);
}
if (over.length > 0) {
  console.error(`lint: files over ${MAX_LINES} lines (split them along meaning, see docs/architecture.md):`);
  for (const o of over) console.error(`  ${o}`);
  process.exit(1);
}
