#!/usr/bin/env node
// A coverage-guided fuzzer for the JavaScript protocol code, on V8's precise block coverage
// (node:inspector): inputs are mutated from a seed corpus, and an input that reaches a block not
// reached before joins the corpus. A target that throws anything but its declared errors fails the
// run and the input is written to fuzz/crashes/.
//   node fuzz/run.mjs [--seconds N] [--target frames|hostControl|extensions|all] [--seed S]
import { Session } from 'node:inspector/promises';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const arg = (n, d) => {
  const i = process.argv.indexOf(n);
  return i >= 0 ? process.argv[i + 1] : d;
};
const SECONDS = Number(arg('--seconds', 600));
const which = arg('--target', 'all');
let seed = Number(arg('--seed', Date.now() % 2 ** 31));
const rnd = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
const int = (n) => Math.floor(rnd() * n);
const HERE = fileURLToPath(new URL('.', import.meta.url));

const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: true });
const { targets } = await import('./targets.mjs');

const seen = new Set();
async function newCoverage() {
  const { result } = await session.post('Profiler.takePreciseCoverage');
  let fresh = 0;
  for (const script of result) {
    if (!script.url.includes('/dist/')) continue;
    for (const fn of script.functions) {
      for (const r of fn.ranges) {
        if (r.count === 0) continue;
        const key = `${script.url}:${r.startOffset}:${r.endOffset}`;
        if (!seen.has(key)) {
          seen.add(key);
          fresh++;
        }
      }
    }
  }
  return fresh;
}

const INTERESTING = [0, 1, 2, 4, 5, 6, 7, 8, 0x10, 0x20, 0x52, 0x7f, 0x80, 0xff];
function mutate(input, corpus) {
  const b = Buffer.from(input);
  const out = [...b];
  const n = 1 + int(4);
  for (let k = 0; k < n; k++) {
    const op = int(7);
    const at = out.length ? int(out.length) : 0;
    if (op === 0 && out.length) out[at] ^= 1 << int(8);
    else if (op === 1 && out.length) out[at] = INTERESTING[int(INTERESTING.length)];
    else if (op === 2) out.splice(at, 0, ...Buffer.alloc(1 + int(8), int(256)));
    else if (op === 3 && out.length) out.splice(at, 1 + int(Math.min(8, out.length - at)));
    else if (op === 4 && out.length >= 20) {
      const v = [0, 1, 48, 8192, 0x100000, 0x100001, 0xffffffff][int(7)];
      const o = 16;
      out[o] = v >>> 24;
      out[o + 1] = (v >>> 16) & 255;
      out[o + 2] = (v >>> 8) & 255;
      out[o + 3] = v & 255;
    } else if (op === 5) {
      const other = corpus[int(corpus.length)];
      out.push(...other.subarray(0, int(other.length + 1)));
    } else if (out.length) out[at] = int(256);
  }
  return Buffer.from(out.slice(0, 20000));
}

let failures = 0;
const t0 = Date.now();
for (const name of which === 'all' ? Object.keys(targets) : [which]) {
  const dir = join(HERE, 'corpus', name);
  const corpus = readdirSync(dir).map((f) => readFileSync(join(dir, f)));
  for (const c of corpus) targets[name](c);
  await newCoverage();
  const budget = (SECONDS * 1000) / (which === 'all' ? Object.keys(targets).length : 1);
  const start = Date.now();
  let execs = 0;
  let added = 0;
  while (Date.now() - start < budget) {
    const input = mutate(corpus[int(corpus.length)], corpus);
    try {
      targets[name](input);
    } catch (e) {
      failures++;
      mkdirSync(join(HERE, 'crashes'), { recursive: true });
      const f = join(HERE, 'crashes', `${name}-${Date.now()}.bin`);
      writeFileSync(f, input);
      console.error(`${name}: ${e?.stack ?? e}\n  input saved to ${f}`);
      if (failures > 5) break;
    }
    execs++;
    // Coverage costs a round trip to V8; sample it every few inputs.
    if (execs % 8 === 0 && (await newCoverage()) > 0) {
      corpus.push(input);
      added++;
    }
  }
  console.log(
    `${name}: ${execs} inputs in ${((Date.now() - start) / 1000).toFixed(0)} s, corpus ${corpus.length} (+${added}), ${seen.size} blocks covered, ${failures} failures`,
  );
}
console.log(
  failures === 0
    ? `fuzz: nothing found in ${((Date.now() - t0) / 1000).toFixed(0)} s`
    : `fuzz: ${failures} failing inputs`,
);
process.exit(failures === 0 ? 0 : 1);
