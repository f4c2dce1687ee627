// Attack: idle TCP connections to a TLS node that never start a handshake, kept at 300 open
// (each one the node closes is replaced). Before issue 18 TLS applied no limit before the
// handshake and Node held each pending one for 120 s, until file descriptors ran out.
import { connect } from 'node:net';
import { attackReport, forMs, nextStats, sleep, startGoodPeer, startVictim, tlsMaterial } from './admission-lib.mjs';

export const name = 'tls-idle-flood';

const TCP_PORT = 27102;
const VICTIM = '127.107.1.200';
const GOOD = '127.107.1.1';
/** Idle connections kept open, and new ones opened per 20 ms tick at most (the accept queue is 64). */
const OPEN = 300;
const PER_TICK = 40;
/** Connections in all, at most. */
const MAX_OPENED = 50000;

export async function run({ seconds = 3 } = {}) {
  const pki = tlsMaterial(['victim', 'good']);
  const victim = await startVictim({
    address: VICTIM,
    tcpPort: TCP_PORT,
    tls: pki.files('victim'),
    stack: { maxUnidentifiedConnections: 16, maxConnections: 256, headerTimeoutMs: 1000 },
  });
  const good = await startGoodPeer({
    address: GOOD,
    victimAddress: VICTIM,
    tcpPort: TCP_PORT,
    tls: pki.buffers('good'),
  });
  const open = new Set();
  let opened = 0;
  let closedByVictim = 0;
  try {
    await good.roundTrip();
    await good.measureIdle();
    good.start();
    await forMs(seconds * 1000, async () => {
      for (let i = 0; i < PER_TICK && open.size < OPEN && opened < MAX_OPENED; i++) {
        const n = opened++;
        const s = connect({
          host: VICTIM,
          port: TCP_PORT,
          localAddress: `127.107.${2 + ((n >> 8) % 8)}.${1 + (n % 250)}`,
        });
        s.on('error', () => {});
        open.add(s);
        s.once('close', () => {
          if (open.delete(s)) closedByVictim++;
        });
      }
      await sleep(20);
    });
    await good.stop();
    const stats = await nextStats(victim);
    return attackReport(victim, good, { opened, closedByVictim, stillOpen: open.size, victim: stats?.counters });
  } finally {
    for (const s of open) s.destroy();
    open.clear();
    await good.close().catch(() => {});
    await victim.stop();
    pki.remove();
  }
}
