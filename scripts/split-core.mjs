#!/usr/bin/env node
// Splits lib/core into what mirrors the kernel's net/rds (stays in lib/core/) and rds-socket's own
// features (moved to lib/core/ext/), then rewrites every reference to a moved file: relative
// imports and exports (static, dynamic, vi.mock, require) in lib/, test/, bench/, nemesis/, fuzz/,
// examples/, scripts/, and `lib/core/<file>` / `dist/core/<file>` paths in those and in docs/,
// man/ and README.md (code blocks and file references alike).
//
//   node scripts/split-core.mjs          move and rewrite (git mv inside a git work tree)
//   node scripts/split-core.mjs --check  change nothing; exit 1 if a move or a rewrite is pending
//
// Idempotent: a file already in ext/ is not moved again, and an import that resolves is left as
// it is, so running it twice changes nothing the second time. Robust to files added by others: a
// file in lib/core that neither list names stays in lib/core and is listed at the end (add it to
// one of the lists), and imports of moved files from anywhere, new files included, are rewritten.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const CORE = join(ROOT, 'lib/core');
const EXT = join(CORE, 'ext');
const check = process.argv.includes('--check');

/** rds-socket's own features: no counterpart in net/rds. Moved to lib/core/ext/. */
const EXTENSIONS = [
  'ack-pacing', // acknowledgement pacing (spec §5), with rx-ack's receipt tracking
  'rx-ack',
  'heartbeat',
  'failover',
  'rail', // rails: paths over other local/peer address pairs
  'path-policy',
  'path-control', // the operator's per-path controls
  'path-stats',
  'peer-state',
  'stack-events', // the stack's path and peer events
  'rx-limit',
  'send-confirm', // read confirmations
  'send-report',
  'own-budget',
  'reclaim',
  'reconnect-rule',
  'control', // the control socket
  'control-commands',
  'host-hooks',
  'local-confirm', // send({ confirm }): the wait for a read confirmation
];

/** What mirrors net/rds (af_rds.c, bind.c, cong.c, connection.c, message.c, recv.c, send.c, ...). Stays. */
const KERNEL = [
  'address',
  'bind',
  'carrier',
  'cong',
  'cong-map',
  'conn-table',
  'connection',
  'credits',
  'defer',
  'fifo',
  'handshake',
  'info',
  'message',
  'options',
  'path',
  'rdma',
  'rdma-ops',
  'recv',
  'rx-seq',
  'send-flags',
  'send-queue',
  'send-timeout',
  'socket',
  'socket-options',
  'socket-types',
  'stack',
  'stats',
  'transport',
  'transport-registry',
  'transport-path',
  'types',
  'wire-slab',
  // af_rds.c's socket calls over a backend (the in-process one mirrors rds_sock's queues)
  'socket-backend',
  'socket-actions',
  'socket-send-checks',
  'socket-recv-flags',
  'socket-waiters',
  'socket-blocking',
  'socket-poll',
  'local-backend',
  'local-rx',
  // info.c's getsockopt, af_rds.c's ioctl and scope rules, recv.c's receive-path trace
  'info-sockopt',
  'info-records',
  'info-result',
  'tos',
  'scope',
  'rx-trace',
];

const CODE_DIRS = ['lib', 'test', 'bench', 'nemesis', 'fuzz', 'examples', 'scripts'];
const TEXT_DIRS = ['docs', 'man'];
const CODE_EXT = /\.(ts|mts|cts|js|mjs|cjs)$/;
const SKIP_DIRS = new Set(['node_modules', 'dist', '.git', 'results', 'crashes']);

function walk(dir, out = []) {
  if (!existsSync(dir)) return out;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (SKIP_DIRS.has(e.name)) continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) walk(p, out);
    else out.push(p);
  }
  return out;
}

const inGit = (() => {
  try {
    execFileSync('git', ['-C', ROOT, 'rev-parse', '--is-inside-work-tree'], { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
})();

// ---- 1. the moves ----
const moved = new Map(); // old absolute path -> new absolute path (this run's and earlier runs')
const pending = [];
for (const name of EXTENSIONS) {
  const from = join(CORE, `${name}.ts`);
  const to = join(EXT, `${name}.ts`);
  moved.set(from, to);
  if (existsSync(from) && !existsSync(to)) pending.push([from, to]);
  else if (existsSync(from) && existsSync(to)) throw new Error(`both ${rel(from)} and ${rel(to)} exist: merge them first`);
}
if (!check && pending.length > 0) {
  mkdirSync(EXT, { recursive: true });
  for (const [from, to] of pending) {
    if (inGit) execFileSync('git', ['-C', ROOT, 'mv', from, to]);
    else renameSync(from, to);
  }
}

/** Where a file was before the split, given where it is now. */
const before = new Map([...moved].map(([a, b]) => [b, a]));
/** Files this run moved: their specifiers are still relative to lib/core. */
const movedNow = new Set(check ? [] : pending.map(([, to]) => to));

// ---- 2. relative specifiers ----
const SPEC = /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\brequire\s*\(\s*|\bvi\.mock\s*\(\s*|\bvi\.importActual\s*(?:<[^>]*>)?\(\s*)(['"])(\.{1,2}\/[^'"\n]+)\2/g;

/** The source file a specifier names, looked for in lib/ for dist/ paths; null if none exists. */
function target(abs) {
  const cands = [];
  const add = (p) => {
    cands.push(p, p.replace(/\.js$/, '.ts'), p.replace(/\.mjs$/, '.mts'));
  };
  add(abs);
  const distRel = relative(join(ROOT, 'dist'), abs);
  if (!distRel.startsWith('..')) add(join(ROOT, 'lib', distRel.replace(/\.d\.ts$/, '.ts')));
  for (const c of cands) if (existsSync(c) && statSync(c).isFile()) return c;
  return null;
}

/** The absolute path a dist/ or lib/ specifier names after the target moved from `oldSrc` to `newSrc`. */
function retarget(abs, oldSrc, newSrc) {
  const inDist = !relative(join(ROOT, 'dist'), abs).startsWith('..');
  const base = (p) => (inDist ? join(ROOT, 'dist', relative(join(ROOT, 'lib'), p)) : p);
  const oldBase = base(oldSrc).replace(/\.ts$/, '');
  const newBase = base(newSrc).replace(/\.ts$/, '');
  const suffix = abs.startsWith(oldBase) ? abs.slice(oldBase.length) : abs.slice(abs.lastIndexOf('.'));
  return newBase + suffix;
}

/** The lib/ source a dist/ or lib/ path names, if that source is one the split moves. */
function movedSource(abs) {
  const distRel = relative(join(ROOT, 'dist'), abs);
  const lib = distRel.startsWith('..') ? abs : join(ROOT, 'lib', distRel);
  const ts = lib.replace(/\.(d\.ts|js|ts)$/, '.ts');
  return moved.has(ts) ? ts : null;
}

function rewriteSpecs(file, text) {
  const fresh = movedNow.has(file);
  const dir = dirname(fresh ? before.get(file) : file);
  return text.replace(SPEC, (all, lead, q, spec) => {
    const abs = resolve(dir, spec);
    // Already right (an import between files that did not move, or fixed by an earlier run).
    if (!fresh && target(abs) !== null) return all;
    const src = movedSource(abs);
    let dest;
    if (src !== null) dest = retarget(abs, src, moved.get(src));
    else if (fresh && target(abs) !== null) dest = abs; // the importer moved, its target did not
    else {
      unresolved.push(`${rel(file)}: ${spec}`);
      return all;
    }
    let out = relative(dirname(file), dest).split(sep).join('/');
    if (!out.startsWith('.')) out = `./${out}`;
    return `${lead}${q}${out}${q}`;
  });
}

// ---- 3. lib/core/<name> and dist/core/<name> in text (comments, docs, code blocks) ----
const names = EXTENSIONS.map((n) => n.replace(/[-]/g, '\\-')).join('|');
const PATHS = new RegExp(`\\b((?:lib|dist)/core/)(${names})(\\.(?:d\\.ts|ts|js))`, 'g');
const rewritePaths = (text) => text.replace(PATHS, (_, dir, name, ext) => `${dir}ext/${name}${ext}`);

const unresolved = [];
const changed = [];
const files = [
  ...CODE_DIRS.flatMap((d) => walk(join(ROOT, d)).filter((f) => CODE_EXT.test(f))),
  ...TEXT_DIRS.flatMap((d) => walk(join(ROOT, d)).filter((f) => /\.(md|\d)$/.test(f))),
  join(ROOT, 'README.md'),
].filter((f) => existsSync(f) && f !== fileURLToPath(import.meta.url));
for (const f of files) {
  const text = readFileSync(f, 'utf8');
  let out = rewritePaths(text);
  if (CODE_EXT.test(f)) out = rewriteSpecs(f, out);
  if (out !== text) {
    changed.push(rel(f));
    if (!check) writeFileSync(f, out);
  }
}

function rel(p) {
  return relative(ROOT, p);
}

// ---- report ----
const known = new Set([...EXTENSIONS, ...KERNEL]);
const unknown = readdirSync(CORE, { withFileTypes: true })
  .filter((e) => e.isFile() && e.name.endsWith('.ts') && !known.has(e.name.slice(0, -3)))
  .map((e) => `lib/core/${e.name}`);
const missing = KERNEL.filter((n) => !existsSync(join(CORE, `${n}.ts`)));
console.log(`${check ? 'would move' : 'moved'} ${pending.length} file(s) to lib/core/ext/`);
for (const [a, b] of pending) console.log(`  ${rel(a)} -> ${rel(b)}`);
console.log(`${check ? 'would rewrite' : 'rewrote'} ${changed.length} file(s)`);
for (const f of changed) console.log(`  ${f}`);
if (unknown.length > 0) {
  console.log(`left in lib/core (in neither list of scripts/split-core.mjs; add them to one):`);
  for (const f of unknown) console.log(`  ${f}`);
}
if (missing.length > 0) console.log(`named as kernel mirrors but absent: ${missing.join(', ')}`);
if (!check && unresolved.length > 0) {
  console.log('relative specifiers that resolve neither before nor after the split (left as they were):');
  for (const u of unresolved) console.log(`  ${u}`);
}
if (check && (pending.length > 0 || changed.length > 0)) process.exit(1);
