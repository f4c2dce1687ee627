// Attack: one-shot strangers from distinct addresses (below and above the victim's, so both
// real connections and pokes) connect once and leave. Before issue 18 each left an RdsConnection
// for good and the victim kept dialling every one about twice a second (3,000 strangers: 6,068
// connection attempts per second long after they left).
import { connect } from 'node:net';
import { attackReport, forMs, nextStats, sleep, startGoodPeer, startVictim } from './admission-lib.mjs';

export const name = 'stranger-churn';

const TCP_PORT = 27104;
const VICTIM = '127.109.4.1';
const GOOD = '127.109.4.2';
/** At most this many strangers in all, 32 at a time (under the accept queue of 64). */
const MAX_STRANGERS = 3000;
const IDLE_MS = 1000;

export async function run({ seconds = 3 } = {}) {
  const victim = await startVictim({ address: VICTIM, tcpPort: TCP_PORT, stack: { peerIdleTimeoutMs: IDLE_MS } });
  const good = await startGoodPeer({ address: GOOD, victimAddress: VICTIM, tcpPort: TCP_PORT });
  let strangers = 0;
  try {
    await good.roundTrip();
    await good.measureIdle();
    good.start();
    await forMs(seconds * 1000, async () => {
      if (strangers >= MAX_STRANGERS) return sleep(50);
      const wave = [];
      for (let i = 0; i < 32 && strangers < MAX_STRANGERS; i++) {
        const n = strangers++;
        // 127.109.0-7.x: below the victim (connections) for 0-3, above it (pokes) for 5-8.
        const third = (n % 2 === 0 ? 0 : 5) + ((n >> 9) % 4);
        const s = connect({ host: VICTIM, port: TCP_PORT, localAddress: `127.109.${third}.${1 + ((n >> 1) % 250)}` });
        s.on('error', () => {});
        wave.push(
          new Promise((res) => {
            s.once('close', res);
            s.once('connect', () => s.destroy());
          }),
        );
      }
      await Promise.all(wave);
    });
    await good.stop();
    const atEnd = await nextStats(victim);
    // Twice the idle time later every stranger should be forgotten and nobody dialled.
    await sleep(2 * IDLE_MS + 500);
    const before = await nextStats(victim);
    await sleep(1000);
    const after = await nextStats(victim);
    return attackReport(victim, good, {
      strangers,
      connsAtEnd: atEnd?.conns,
      connsAfterIdle: after?.conns,
      dialsPerSecAfterIdle:
        after && before ? Math.round(((after.dials - before.dials) * 1000) / (after.t - before.t)) : null,
      victim: after?.counters,
    });
  } finally {
    await good.close().catch(() => {});
    await victim.stop();
  }
}
