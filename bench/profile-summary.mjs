#!/usr/bin/env node
// node bench/profile-summary.mjs DIR [--last-ms MS] [--top N] [--json FILE]
// Sums up the V8 CPU profiles that `NODE_PROF=DIR node bench/attached.mjs ...` writes (one
// subdirectory per process: <mode>-<size>-<role>), per process: where its busy time went, by
// kind (system calls and copies in Node's native bindings, garbage collection, Node's own
// JavaScript, each part of rds-socket, the bench's application loop) and its top functions by self
// time. Only the last --last-ms of each profile's busy samples count (default 2000: the counted
// part of a run, after its warm-up); idle samples never do. Several profiles of one process kind
// (runs) are added together. V8 samples wall time: a process preempted while busy counts as busy,
// so on a loaded machine the shares are of its running-or-runnable time.
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
if (!dir || dir.startsWith('--')) {
  console.error('usage: node bench/profile-summary.mjs DIR [--last-ms MS] [--top N] [--json FILE]');
  process.exit(2);
}
const arg = (n, d) => {
  const i = process.argv.indexOf(n);
  return i >= 0 ? process.argv[i + 1] : d;
};
const lastMs = Number(arg('--last-ms', 2000));
const topN = Number(arg('--top', 6));

/** The kind a profile node's self time belongs to. */
function kindOf(cf) {
  const f = cf.functionName;
  const u = cf.url;
  if (f === '(garbage collector)') return 'garbage collection';
  if (f === '(program)' || f === '(root)') return 'V8 and libuv (no JS frame)';
  if (u === '') return 'native bindings (system calls, copies)';
  if (u.startsWith('node:')) return "Node's JavaScript (net, streams, events)";
  const m = /\/dist\/([a-z-]+)\//.exec(u);
  if (m) return `rds-socket ${m[1]}/`;
  if (/\/dist\/[^/]+\.js$/.test(u)) return 'rds-socket (top level)';
  if (u.includes('/bench/')) return 'the application loop (bench)';
  return 'other';
}

/** Self time per kind and per function, busy samples in the last `lastMs` only. */
function summarize(profile, kinds, fns) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const times = [];
  let t = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i];
    times.push(t);
  }
  let lastBusy = -1;
  for (let i = profile.samples.length - 1; i >= 0 && lastBusy < 0; i--)
    if (byId.get(profile.samples[i]).callFrame.functionName !== '(idle)') lastBusy = i;
  if (lastBusy < 0) return 0;
  const from = times[lastBusy] - lastMs * 1000;
  let total = 0;
  for (let i = 1; i <= lastBusy; i++) {
    if (times[i] < from) continue;
    const cf = byId.get(profile.samples[i]).callFrame;
    if (cf.functionName === '(idle)') continue;
    // A sample stands for the time since the one before it.
    const dt = times[i] - times[i - 1];
    total += dt;
    const k = kindOf(cf);
    kinds.set(k, (kinds.get(k) ?? 0) + dt);
    const name = `${cf.functionName || '(anonymous)'} ${cf.url.replace(/^.*\/(dist|bench)\//, '$1/')}`.trim();
    fns.set(name, (fns.get(name) ?? 0) + dt);
  }
  return total;
}

const result = [];
for (const sub of readdirSync(dir).sort()) {
  const p = join(dir, sub);
  if (!statSync(p).isDirectory()) continue;
  const kinds = new Map();
  const fns = new Map();
  let total = 0;
  let files = 0;
  for (const f of readdirSync(p)) {
    if (!f.endsWith('.cpuprofile')) continue;
    total += summarize(JSON.parse(readFileSync(join(p, f), 'utf8')), kinds, fns);
    files++;
  }
  if (total === 0) continue;
  const share = (m) => [...m].sort((a, b) => b[1] - a[1]).map(([name, us]) => ({ name, share: us / total }));
  result.push({
    process: sub,
    profiles: files,
    busyMs: total / 1000,
    kinds: share(kinds),
    top: share(fns).slice(0, topN),
  });
}
const pct = (x) => `${(x * 100).toFixed(0)}%`.padStart(4);
for (const r of result) {
  console.log(
    `\n${r.process} (${r.profiles} profile(s), ${r.busyMs.toFixed(0)} ms busy in the last ${lastMs} ms of each)`,
  );
  for (const k of r.kinds) if (k.share >= 0.01) console.log(`  ${pct(k.share)}  ${k.name}`);
  console.log('  top functions by self time:');
  for (const f of r.top) console.log(`  ${pct(f.share)}  ${f.name}`);
}
const ji = process.argv.indexOf('--json');
if (ji >= 0) writeFileSync(process.argv[ji + 1], JSON.stringify(result, null, 1));
