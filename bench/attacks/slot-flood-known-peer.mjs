// Attack: strangers hold every unidentified slot (and take each freed one again) while a known
// peer keeps restarting. Before issue 18 "known" meant "path 0 is up now", so after each drop the
// peer queued behind the strangers and got back only after 8-17 s (headerTimeoutMs).
import { connect } from 'node:net';
import { attackReport, forMs, nextStats, percentile, sleep, startGoodPeer, startVictim } from './admission-lib.mjs';

export const name = 'slot-flood-known-peer';

const TCP_PORT = 27103;
const VICTIM = '127.108.1.200';
const GOOD = '127.108.1.1';
const SLOTS = 16;
/** Strangers' connections kept open (all smaller addresses: real connections, not pokes). */
const FLOOD = 64;
/** Strangers' connections in all, at most. */
const MAX_OPENED = 50000;

export async function run({ seconds = 3 } = {}) {
  const victim = await startVictim({
    address: VICTIM,
    tcpPort: TCP_PORT,
    stack: { maxUnidentifiedConnections: SLOTS, headerTimeoutMs: 10000 },
  });
  const good = await startGoodPeer({ address: GOOD, victimAddress: VICTIM, tcpPort: TCP_PORT, timeoutMs: 5000 });
  const open = new Set();
  let opened = 0;
  let flooding = true;
  const refill = () => {
    while (flooding && open.size < FLOOD && opened < MAX_OPENED) {
      const n = opened++;
      const s = connect({ host: VICTIM, port: TCP_PORT, localAddress: `127.108.0.${1 + (n % 250)}` });
      s.on('error', () => {});
      open.add(s);
      s.once('close', () => {
        open.delete(s);
        setTimeout(refill, 1);
      });
    }
  };
  const reconnects = [];
  /** The round trips between restarts: the peer's service while strangers hold the slots. */
  const steady = [];
  try {
    await good.roundTrip(); // the peer is known from here on
    const idleP99Ms = await good.measureIdle();
    refill();
    await sleep(200);
    await forMs(seconds * 1000, async (end) => {
      // The peer restarts; its first round trip after the restart is its time to get back in
      // (at most 5 s are counted: the attack ends at most one round trip after its time).
      await good.restart();
      reconnects.push(await good.roundTrip());
      for (let i = 0; i < 20 && Date.now() < end; i++) {
        steady.push(await good.roundTrip());
        await sleep(5);
      }
    });
    flooding = false;
    const stats = await nextStats(victim);
    return attackReport(victim, good, {
      restarts: reconnects.length,
      reconnectMaxMs: +Math.max(...reconnects).toFixed(1),
      idleP99Ms,
      steadyP99Ms: percentile(steady, 99),
      strangersOpened: opened,
      victim: stats?.counters,
    });
  } finally {
    flooding = false;
    for (const s of open) s.destroy();
    await good.close().catch(() => {});
    await victim.stop();
  }
}
