// Issue 39, stalled payloads from many addresses: each address sends one complete small frame
// (so it is no longer a stranger to the admission limits), then a header announcing 1 MiB and
// all of that payload but its last byte, then nothing. With default options but a short
// frameTimeoutMs (so that the run stays short), the victim must hold no more memory for the
// incomplete frames than maxPartialFrameBytes plus a small allowance at every moment, give it
// back afterwards (RSS too), drop them all within a time that does not grow with the number of
// addresses, and keep serving a known peer: its small round trips, and its large messages (a
// frame in progress that keeps making progress) are neither dropped nor kept waiting.
import { frame, rawConnect, sleep, startGoodPeer, startVictim } from './lib.mjs';

/** The victim's frameTimeoutMs: short, so the attack's recovery fits a CI run. */
const FRAME_TIMEOUT_MS = 4000;
/** The default maxPartialFrameBytes (the victim runs with it). */
const CAP = 64 << 20;
const BIG = 1 << 20;
/** Connections opened at once (the victim admits 64 unidentified ones at a time). */
const BATCH = 60;
/** Nobody is bound there: the small frame identifies its connection and is dropped (recv_drop_no_sock). */
const NO_PORT = 4099;
/** The good peer's large messages: every 10th round trip carries 256 KiB (a frame the budget charges). */
const GOOD_BIG = 256 * 1024;
const GOOD_BIG_EVERY = 10;
/**
 * Memory is sampled (after a full GC in the victim) this often, idle and under attack alike. A
 * forced full GC stops the victim (tens of ms on a loaded machine): more often, the samples
 * would be what the good peer measures.
 */
const SAMPLE_MS = 1000;
/** After recovery, the victim's memory settles this long (V8 gives back heap pages it no longer uses) before the last sample. */
const SETTLE_MS = 3000;
/** The good peer runs this long before the attack: its idle p99, and its large messages make its connection a proven one. */
const IDLE_MS = 2500;
const MiB = 1 << 20;

/**
 * The bounds (docs/security.md; docs/partial-frames.md): what the victim holds in array buffers
 * beyond its idle baseline stays under the cap plus ALLOWANCE (read buffers of the connections
 * that wait for room and of the good peer, messages in flight); afterwards it is back within
 * ALLOWANCE of the baseline and RSS outside the JS heap within RSS_MARGIN (what glibc keeps of the
 * freed buffers: its mmap threshold rises to the largest buffer freed, so later frames come from
 * its heap, where freed memory stays resident; with MALLOC_MMAP_THRESHOLD_=131072 RSS came back to
 * idle); every stalled connection is dropped within frameTimeoutMs (plus RECOVERY_SLACK_MS of
 * scheduling on a loaded machine) of the last header, however many addresses; the good peer's p99
 * stays within P99_RATIO times its idle p99, or its idle p99 plus P99_SLACK_MS, whichever is larger
 * (a ratio of a few-ms idle p99 is scheduling noise on a shared 2-core machine: 50 ms was seen with
 * another process busy; what the bound is for, a good peer waiting behind strangers' frames, costs
 * it seconds: its large messages timed out before the fix).
 */
export const ALLOWANCE = 8 * MiB;
export const RSS_MARGIN = 80 * MiB;
export const RECOVERY_SLACK_MS = 3000;
export const P99_RATIO = 5;
export const P99_SLACK_MS = 100;

export async function stalledDrain({ addresses, victimAddress, goodAddress, attackerAddress }) {
  // peerIdleTimeoutMs short: the attackers' connection records (what a node keeps of each peer, not
  // of its frames) are reclaimed before the last sample, which then shows what the frames left.
  const victim = await startVictim(
    victimAddress,
    { frameTimeoutMs: FRAME_TIMEOUT_MS, peerIdleTimeoutMs: 1000 },
    { echoSndbuf: 4 * GOOD_BIG },
  );
  const good = await startGoodPeer(goodAddress, victimAddress, { bigBytes: GOOD_BIG, bigEvery: GOOD_BIG_EVERY });
  const samples = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const m = await victim.memory({ gc: true });
      if (m !== null) samples.push({ at: Date.now(), ...m });
      await sleep(SAMPLE_MS);
    }
  })();
  const socks = [];
  try {
    await sleep(IDLE_MS);
    const idle = await good.lap();
    const base = samples.at(-1);
    const t0 = Date.now();
    const attackFrom = samples.length;
    const almost = Buffer.concat([
      frame({ sequence: 2, sport: 7000, dport: NO_PORT, len: BIG }),
      Buffer.alloc(BIG - 1, 0x33),
    ]);
    const closed = [];
    let refused = 0;
    // Every address connects, a batch at a time (the victim admits 64 unidentified connections,
    // and its accept backlog is 64), and sends its small frame and the stalled one at once.
    for (let k = 0; k < addresses; k += BATCH) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(BATCH, addresses - k) }, (_, j) =>
          rawConnect(attackerAddress(k + j), victimAddress).catch((e) => {
            if (process.env.ATTACK_DEBUG) console.error(`attacker ${k + j}: ${e.message}`);
            return null;
          }),
        ),
      );
      for (const sock of batch) {
        if (sock === null) {
          refused++;
          continue;
        }
        sock.on('data', () => {});
        sock.once('close', () => closed.push(Date.now()));
        sock.write(frame({ sequence: 1, sport: 7000, dport: NO_PORT }, Buffer.from('hi')));
        sock.write(almost);
        socks.push(sock);
      }
      // The next batch once these have identified themselves (their small frame was dropped).
      const want = socks.length;
      for (let i = 0; i < 500; i++) {
        const c = await victim.stats();
        if (c === null || c.recv_drop_no_sock >= want) break;
        await sleep(10);
      }
    }
    const connectMs = Date.now() - t0;
    const lastHeaderAt = Date.now();
    // Recovery: every stalled connection dropped and nothing held (bounded: twice the bound).
    const giveUp = lastHeaderAt + 2 * (FRAME_TIMEOUT_MS + RECOVERY_SLACK_MS);
    while (Date.now() < giveUp && !(closed.length === socks.length && samples.at(-1)?.partialFrameBytes === 0))
      await sleep(50);
    const recovered = closed.length === socks.length;
    const recoveryMs = recovered ? Math.max(...closed) - lastHeaderAt : Infinity;
    const during = await good.lap();
    await sleep(SETTLE_MS);
    sampling = false;
    await sampler;
    const after = await victim.memory({ gc: true });
    const counters = await victim.stats();
    const victimUp = await victim.alive();
    const attackSamples = samples.slice(attackFrom);
    const peakAb = Math.max(...attackSamples.map((s) => s.arrayBuffers));
    const peakHeld = Math.max(...attackSamples.map((s) => s.partialFrameBytes ?? 0));
    const overAb = peakAb - base.arrayBuffers;
    // The forced collections of the memory samples stop the victim: round trips they overlapped
    // measure this attack's own instrument, not the victim, and are left out (idle and attack alike).
    const gcs = samples.map((x) => [x.gcAt, x.gcAt + x.gcMs]);
    const undisturbed = (each) => each.filter(([at, ms]) => !gcs.some(([a, b]) => at < b && at + ms > a));
    const clean = (lap) => {
      const kept = undisturbed(lap.each).map(([, ms]) => ms);
      kept.sort((a, b) => a - b);
      return kept.length === 0 ? Infinity : kept[Math.min(kept.length - 1, Math.floor(0.99 * kept.length))];
    };
    idle.p99Ms = clean(idle);
    during.p99Ms = clean(during);
    const p99Bound = Math.max(P99_RATIO * idle.p99Ms, idle.p99Ms + P99_SLACK_MS);
    const failures = [];
    if (socks.length !== addresses) failures.push(`${addresses - socks.length} attackers could not connect`);
    if (!(overAb <= CAP + ALLOWANCE))
      failures.push(`array buffers ${fmtMiB(overAb)} MiB over idle, past the cap + ${ALLOWANCE / MiB} MiB`);
    if (after === null || !(after.arrayBuffers - base.arrayBuffers <= ALLOWANCE))
      failures.push(`array buffers not given back (${fmtMiB(after?.arrayBuffers - base.arrayBuffers)} MiB over idle)`);
    // RSS outside the JS heap: frames live there; the heap holds what the node remembers of the
    // attackers as peers (bounded by maxConnections), and V8 gives its pages back when it likes.
    const offHeap = (m) => m.rss - m.heapTotal;
    const rssOver = after === null ? NaN : offHeap(after) - offHeap(base);
    if (!(rssOver <= RSS_MARGIN))
      failures.push(
        `RSS outside the JS heap ${fmtMiB(rssOver)} MiB over idle after the attack (margin ${RSS_MARGIN / MiB})`,
      );
    if (!(recoveryMs <= FRAME_TIMEOUT_MS + RECOVERY_SLACK_MS))
      failures.push(
        `recovery ${recovered ? `${recoveryMs} ms` : `incomplete (${closed.length}/${socks.length} dropped)`}, bound ${FRAME_TIMEOUT_MS + RECOVERY_SLACK_MS} ms`,
      );
    if (!(during.p99Ms <= p99Bound))
      failures.push(
        `good p99 ${during.p99Ms.toFixed(1)} ms > ${p99Bound.toFixed(1)} ms (idle p99 ${idle.p99Ms.toFixed(1)})`,
      );
    // A large message that timed out (2 s) is a failure unless a forced collection stopped the victim meanwhile.
    const bigLate = undisturbed(during.bigEach).filter(([, ms]) => ms >= 2000).length;
    if (during.bigCount === 0 || bigLate > 0)
      failures.push(`good peer's large messages: ${during.bigCount} round trips, ${bigLate} timed out`);
    const detail =
      `${addresses} addresses (${refused} refused), all in place after ${connectMs} ms; ` +
      `array buffers idle ${fmtMiB(base.arrayBuffers)} MiB, peak +${fmtMiB(overAb)} MiB (held ${fmtMiB(peakHeld)} MiB), after +${fmtMiB(after?.arrayBuffers - base.arrayBuffers)} MiB; ` +
      `RSS idle ${fmtMiB(base.rss)}, after ${fmtMiB(after?.rss)} MiB (outside the heap +${fmtMiB(rssOver)}); recovery ${recoveryMs} ms (bound ${FRAME_TIMEOUT_MS + RECOVERY_SLACK_MS}); ` +
      `good p99 idle ${idle.p99Ms.toFixed(1)} ms, attack ${during.p99Ms.toFixed(1)} ms (bound ${p99Bound.toFixed(1)}), ` +
      `large ${during.bigCount} (max ${during.bigMaxMs.toFixed(1)} ms); ` +
      `heap ${fmtMiB(base.heapUsed)} -> ${fmtMiB(after?.heapUsed)} MiB (total ${fmtMiB(base.heapTotal)} -> ${fmtMiB(after?.heapTotal)}), GC ${Math.max(...samples.map((x) => x.gcMs)).toFixed(0)} ms at most; ` +
      `victim waited ${counters?.recv_pause_partial_limit ?? '?'}, dropped ${counters?.recv_drop_frame_timeout ?? '?'} (frame timeout)` +
      `, ${counters?.recv_drop_frame_stalled ?? '?'} (stalled at the cap)`;
    return {
      peakRssMiB: victim.peakRssMiB(),
      goodP99Ms: during.p99Ms,
      goodRoundTrips: during.count,
      goodTimeouts: undisturbed(during.each).filter(([, ms]) => ms >= 2000).length,
      victimUp,
      failures,
      detail,
    };
  } finally {
    sampling = false;
    for (const s of socks) s.destroy();
    await good.stop().catch(() => {});
    await victim.stop();
  }
}

function fmtMiB(b) {
  return Number.isFinite(b) ? (b / MiB).toFixed(1) : String(b);
}
