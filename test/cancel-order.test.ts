import { describe, expect, it } from 'vitest';
import { portHash } from '../lib/core/ext/path-policy.js';
import { bigBufferSocket, cleanupsPerTest, payload, proxiedRailStacks, until } from './helpers.js';

// A message whose send() timed out after it went out is cancelled, but it is still in the carrier
// and may yet be delivered ("timed out and delivered anyway", docs/nemesis.md). Its socket must
// not move to another path while it is unacknowledged there, or its next message overtakes it
// (issue #35: the nemesis's reorders to a restarted peer on the rail pair, where the rail's
// return changed the 'hash' choice while such a message waited on a lane).

const cleanups = cleanupsPerTest();

const LANES = 2;
const RAIL = 8;

/** A port on path 0 over the lanes alone (the kernel's way too), and on the rail once it is up. */
function portLane0ThenRail(from: number): number {
  for (let p = from; p < from + 1000; p++) {
    const h = portHash(p);
    if (h % LANES === 0 && h % (LANES + 1) === LANES) return p;
  }
  throw new Error('no such port');
}

describe('a cancelled message still in its carrier keeps its socket on its path', () => {
  it('a send() that timed out on a stalled lane: the next message waits behind it, not on the returned rail', async () => {
    const { A, B, proxy, b, a1, conn, path, up } = await proxiedRailStacks(9, LANES, cleanups.push);
    const s = await bigBufferSocket(A, a1, portLane0ThenRail(5000));
    s.sendmsg(payload(900, 64), b.address());
    expect((await b.recv({ timeout: 5000 })).data.readUInt32BE(0)).toBe(900);
    await until(() => conn().npaths === LANES && up(RAIL), 'lanes settled and the rail up');
    // The rail goes down (B keeps it down; nothing of ours is on it, so nothing moves).
    B.disconnectPath(a1, RAIL);
    await until(() => !up(RAIL), 'the rail down');

    // From here B gets nothing over path 0: #1 goes out there and stays unacknowledged.
    proxy.stall('forward');
    const sent0 = path(0)!.sentMessages;
    const first = s.send(payload(1, 64), b.address(), { confirm: true, timeout: 300 });
    await until(() => path(0)!.sentMessages > sent0, '#1 sent on path 0');
    await expect(first).rejects.toMatchObject({ code: 'ETIMEDOUT' });

    // The rail is back: over the lanes and the rail, the socket's port hashes to the rail.
    B.reconnectPath(a1, RAIL);
    await until(() => up(RAIL), 'the rail back');
    s.sendmsg(payload(2, 64), b.address());
    await new Promise<void>((r) => setImmediate(r));
    proxy.resume('forward');
    const got: number[] = [];
    while (got.length < 2) {
      const v = (await b.recv({ timeout: 5000 })).data.readUInt32BE(0);
      if (v < 10) got.push(v);
    }
    expect(got).toEqual([1, 2]);
  });
});
