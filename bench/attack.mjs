#!/usr/bin/env node
// npm run attack [-- --seconds N] [--only TEXT] [--json FILE]: runs every attack in
// bench/attacks/*.mjs (not *lib.mjs) against a victim node in a child process, for N seconds each
// (default 3), while a good peer in another process does round trips to the victim. Prints per
// attack the victim's peak RSS, the good peer's p99 round trip during the attack and whether the
// victim stayed up, then a summary line. Exits 1 if a victim died or a bound was exceeded (an
// attack may also check bounds of its own and return what went over them as `failures`).
// Loopback addresses 127.110-119.x.y, RDS/TCP port 27110. Build first (npm run build).
import { readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const arg = (n, d) => {
  const i = process.argv.indexOf(n);
  return i >= 0 ? process.argv[i + 1] : d;
};
const seconds = Number(arg('--seconds', 3));
const only = arg('--only', '');
const jsonOut = arg('--json', '');
if (!(seconds > 0)) {
  console.error('--seconds must be a positive number');
  process.exit(2);
}

const dir = join(dirname(fileURLToPath(import.meta.url)), 'attacks');
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.mjs') && !f.endsWith('lib.mjs'))
  .sort();
/** An attack without bounds of its own is held to these. */
const DEFAULT_BOUNDS = { peakRssMiB: 300, goodP99Ms: 1000 };

const results = [];
for (const f of files) {
  const mod = await import(pathToFileURL(join(dir, f)).href);
  const name = mod.name ?? f.replace(/\.mjs$/, '');
  if (only && !name.includes(only) && !f.includes(only)) continue;
  if (typeof mod.run !== 'function') {
    console.error(`${f}: no run() export, skipped`);
    continue;
  }
  const bounds = { ...DEFAULT_BOUNDS, ...(mod.bounds ?? {}) };
  const t0 = Date.now();
  let r;
  try {
    r = await mod.run({ seconds });
  } catch (e) {
    r = { peakRssMiB: NaN, goodP99Ms: NaN, victimUp: false, detail: `attack failed to run: ${e?.stack ?? e}` };
  }
  const problems = [];
  if (!r.victimUp) problems.push('victim died');
  if (!(r.peakRssMiB <= bounds.peakRssMiB)) problems.push(`peak RSS over ${bounds.peakRssMiB} MiB`);
  // A good peer that completed nothing has no p99: that is a failure, not a pass.
  if (!(Number.isFinite(r.goodP99Ms) && r.goodP99Ms <= bounds.goodP99Ms))
    problems.push(`good peer p99 over ${bounds.goodP99Ms} ms`);
  if (r.goodRoundTrips === 0) problems.push('the good peer completed no round trip');
  if (r.goodTimeouts > 0) problems.push(`${r.goodTimeouts} good round trips timed out`);
  // Bounds an attack checks itself (memory held, recovery time, ...), each failure as a sentence.
  if (Array.isArray(r.failures)) problems.push(...r.failures);
  const ok = problems.length === 0;
  results.push({ name, ok, problems, seconds: (Date.now() - t0) / 1000, bounds, ...r });
  const fmt = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : String(x));
  console.log(
    `${ok ? 'ok  ' : 'FAIL'} ${name.padEnd(24)} peak RSS ${fmt(r.peakRssMiB).padStart(7)} MiB (<= ${bounds.peakRssMiB})` +
      `  good p99 ${fmt(r.goodP99Ms).padStart(7)} ms (<= ${bounds.goodP99Ms}, ${r.goodRoundTrips ?? 0} round trips)` +
      `  victim ${r.victimUp ? 'up' : 'DOWN'}${problems.length ? `  [${problems.join('; ')}]` : ''}`,
  );
  if (r.detail) console.log(`     ${typeof r.detail === 'string' ? r.detail : JSON.stringify(r.detail)}`);
}

const passed = results.filter((r) => r.ok).length;
const failed = results.length - passed;
console.log(`attacks: ${passed} passed, ${failed} failed (${seconds} s each)`);
if (jsonOut) {
  // The shape of vitest's JSON report, so CI adds attacks to its "N passed, N failed" line.
  writeFileSync(
    jsonOut,
    JSON.stringify({ numPassedTests: passed, numFailedTests: failed, numPendingTests: 0, attacks: results }, null, 2),
  );
}
process.exit(failed === 0 && results.length > 0 ? 0 : 1);
