// Attack: CA-signed TLS peers the victim must refuse, from outside allowPeers and beyond
// maxUnidentifiedConnections, all finishing their handshakes at once, over and over (a cluster
// restart, or a stolen certificate on the wrong host). Before issue 18 the first refusal threw
// ERR_INVALID_HANDLE_TYPE inside the TLS server's handler and the victim process exited.
import * as tls from 'node:tls';
import { attackReport, forMs, nextStats, sleep, startGoodPeer, startVictim, tlsMaterial } from './admission-lib.mjs';

export const name = 'tls-refusal-crash';

const TCP_PORT = 27101;
const VICTIM = '127.106.1.200';
const GOOD = '127.106.1.1';
/** CA-signed clients per burst, and bursts at most every 50 ms: bounded. */
const BURST = 24;

export async function run({ seconds = 3 } = {}) {
  const pki = tlsMaterial(['victim', 'good', 'intruder']);
  const victim = await startVictim({
    address: VICTIM,
    tcpPort: TCP_PORT,
    tls: pki.files('victim'),
    stack: { allowPeers: ['127.106.1.0/25'], maxUnidentifiedConnections: 4, headerTimeoutMs: 2000 },
  });
  const good = await startGoodPeer({
    address: GOOD,
    victimAddress: VICTIM,
    tcpPort: TCP_PORT,
    tls: pki.buffers('good'),
  });
  const intruder = pki.buffers('intruder');
  /** refused: connections the victim closed (before or after a handshake) within 0.5 s. */
  const outcome = { attempts: 0, handshakes: 0, refused: 0 };
  try {
    await good.roundTrip(); // first contact before the attack
    await good.measureIdle();
    good.start();
    let host = 0;
    await forMs(seconds * 1000, async () => {
      const burst = [];
      for (let i = 0; i < BURST; i++) {
        // Half from outside the allowlist (.130-.249), half from inside (.10-.119), all CA-signed.
        const from = i % 2 === 0 ? `127.106.1.${130 + (host % 120)}` : `127.106.1.${10 + (host % 110)}`;
        host++;
        burst.push(
          new Promise((res) => {
            outcome.attempts++;
            // A real peer keeps its connection after the handshake: the victim has to refuse it.
            const s = tls.connect({
              host: VICTIM,
              port: TCP_PORT,
              localAddress: from,
              ...intruder,
              checkServerIdentity: () => undefined,
            });
            let settled = false;
            const done = () => {
              if (settled) return;
              settled = true;
              clearTimeout(t);
              s.destroy();
              res();
            };
            const t = setTimeout(done, 500);
            s.once('secureConnect', () => {
              outcome.handshakes++;
            });
            s.once('close', () => {
              outcome.refused++;
              done();
            });
            s.on('error', () => {});
          }),
        );
      }
      await Promise.all(burst);
      await sleep(50);
    });
    await good.stop();
    const stats = await nextStats(victim);
    return attackReport(victim, good, {
      ...outcome,
      victim: stats?.counters,
      victimExit: victim.exit(),
      victimStderr: victim.alive() ? undefined : victim.stderr().slice(-600),
    });
  } finally {
    await good.close().catch(() => {});
    await victim.stop();
    pki.remove();
  }
}
