import { afterEach, describe, expect, it } from 'vitest';
import { median, NodeProc, restartRounds } from './restart-lib.js';

// Issue 33: a peer SIGKILLed and started again on the same address and port is reached again by
// its old peers, whichever address is the smaller. Addresses 127.170.x.
const procs: NodeProc[] = [];
afterEach(async () => {
  for (const p of procs.splice(0)) await p.kill();
});

describe('a restarted peer is reached again by the nodes that knew it', () => {
  for (const [order, restarted, sender] of [
    ['on the smaller address', '127.170.1.3', '127.170.1.4'],
    ['on the larger address', '127.170.2.4', '127.170.2.3'],
  ] as const) {
    it(`restarted ${order}: the old peer's confirmed sends (queued while it was gone, or sent after) reach the new process, median < 1 s after it is back`, async () => {
      const s = await NodeProc.start({ address: sender, port: 4000 });
      procs.push(s);
      const { delays } = await restartRounds(
        s,
        () => NodeProc.start({ address: restarted, port: 4000 }),
        6,
        (n) => procs.push(n),
      );
      expect(median(delays), `delays ${delays.join(', ')} ms`).toBeLessThan(1000);
    }, 90_000);
  }
});
