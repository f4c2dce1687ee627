// Pings that are never acknowledged, and pings from a peer that never reads. Every ping asks for
// a sequenced pong; the victim may keep at most maxOwnQueued of them per path (default 256).
import { frame, helloClaimingAcks, pour, rawConnect, runAttack } from './lib.mjs';

export const name = 'pong-flood';
export const description = 'pings claiming rds-socket acks and never acknowledging, and pings never read';
/** A Node process with the library idles at ~60 MiB; the pongs it may hold are a few MiB (unbounded, ~170 MiB after 2 s). */
export const bounds = { peakRssMiB: 120, goodP99Ms: 500 };

const VICTIM = '127.119.1.1';
const BATCH = 512;

export async function run({ seconds }) {
  return runAttack({
    seconds,
    victimAddress: VICTIM,
    goodAddress: '127.118.1.1',
    async attack({ seconds: s }) {
      const acker = await rawConnect('127.110.1.1', VICTIM);
      acker.on('data', () => {}); // reads every pong, acknowledges none
      acker.write(helloClaimingAcks());
      const deaf = await rawConnect('127.110.1.2', VICTIM);
      deaf.pause(); // never reads: pongs back up into the victim
      const end = Date.now() + s * 1000;
      const go = () => Date.now() < end;
      const pings = (i) =>
        Buffer.concat(
          Array.from({ length: BATCH }, (_, k) => frame({ sequence: i * BATCH + k + 1, sport: 5000, dport: 0 })),
        );
      const [a, b] = await Promise.all([pour(acker, go, pings), pour(deaf, go, pings)]);
      acker.destroy();
      deaf.destroy();
      return (c) =>
        `${(a + b) * BATCH} pings sent; victim answered ${c?.send_pong ?? '?'}, dropped ${c?.recv_drop_ping_budget ?? '?'} (recv_drop_ping_budget)`;
    },
  });
}
