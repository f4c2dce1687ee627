import { afterEach, describe, expect, it } from 'vitest';
import type { RdsSocket } from '../lib/index.js';
import { portHash } from '../lib/core/ext/path-policy.js';
import { bigBufferSocket, payload, proxiedRailStacks, until } from './helpers.js';

// Failover holds chained over three paths (issue #35, the nemesis's reorders to a restarted peer):
// path 0 waits behind lane 1, the rail waits behind path 0, and then lane 1 fails over to path 0.
// Lane 1's messages go ahead of what path 0 holds, which is renumbered after them; the rail's hold
// on path 0 was a sequence number of path 0, so it must follow that renumbering, or the rail's
// socket sends its next message before the one it left on path 0.

let cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

const LANES = 2;
const RAIL = 8;

/**
 * A port whose socket the 'hash' policy places on path `want`: over the lanes and the live rail
 * (the rail is slot LANES), and for a lane also by the kernel's way (port hash mod lanes), which a
 * socket takes while messages from before placements began are in flight.
 */
function portFor(want: number, from: number): number {
  for (let p = from; p < from + 1000; p++) {
    const h = portHash(p);
    if (want === RAIL ? h % (LANES + 1) === LANES : h % (LANES + 1) === want && h % LANES === want) return p;
  }
  throw new Error(`no port for path ${want}`);
}

describe('failover holds chained over three paths', () => {
  it('the rail waits behind path 0, path 0 behind lane 1; lane 1 fails over to path 0: the rail socket stays in order', async () => {
    // Path 0 and lane 1 go through the proxy (stalled, cut by lane); the rail dials directly.
    const { A, B, proxy, b, a1, conn, path, up } = await proxiedRailStacks(7, LANES, (c) => cleanups.push(c));
    /** The socket's messages go on path `want` (placements follow the policy once nothing is in flight). */
    const onPath = async (s: RdsSocket, want: number) => {
      for (let i = 0; i < 20; i++) {
        const before = path(want)?.sentMessages ?? 0;
        s.sendmsg(payload(900, 64), b.address());
        expect((await b.recv({ timeout: 5000 })).data.readUInt32BE(0)).toBe(900);
        if ((path(want)?.sentMessages ?? 0) > before) return;
      }
      throw new Error(
        `the socket never used path ${want}: ${JSON.stringify(conn()?.paths.map((p) => [p.index, p.state, p.sentMessages]))}`,
      );
    };

    const s0 = await bigBufferSocket(A, a1, portFor(0, 5000));
    const s1 = await bigBufferSocket(A, a1, portFor(1, 5000));
    const sr = await bigBufferSocket(A, a1, portFor(RAIL, 5000));
    await onPath(s0, 0);
    await until(() => conn().npaths === LANES && up(RAIL), 'lanes settled and the rail up');
    await onPath(s1, 1);
    await onPath(sr, RAIL);
    await onPath(s0, 0);

    // From here B gets nothing over path 0 or lane 1: what they carry stays unacknowledged.
    proxy.stall('forward');
    // Path 0 goes down with a message and fails over to lane 1; it comes back behind lane 1.
    s0.sendmsg(payload(10, 64), b.address());
    await until(() => path(0)!.sentMessages > 1, 'path 0 sent its message');
    proxy.cutLane(0);
    await until(() => path(0)!.failedOverTo === 1, 'path 0 failed over to lane 1');
    proxy.cutLane(0, false);
    await until(() => up(0) && path(0)!.failedOverTo === null, 'path 0 back, waiting behind lane 1');

    // The rail goes down with #1 of its socket on it (B holds it down), and fails over to path 0,
    // the lowest path up, where #1 waits; back, the rail waits behind path 0.
    sr.sendmsg(payload(1, 64), b.address());
    B.disconnectPath(a1, RAIL);
    await until(() => path(RAIL)!.failedOverTo === 0, 'the rail failed over to path 0');
    B.reconnectPath(a1, RAIL);
    await until(() => up(RAIL) && path(RAIL)!.failedOverTo === null, 'the rail back');
    const railSent = path(RAIL)!.sentMessages;
    sr.sendmsg(payload(2, 64), b.address()); // #2: on the rail, held behind #1 on path 0
    await new Promise<void>((r) => setTimeout(r, 20));
    expect(path(RAIL)!.sentMessages).toBe(railSent);

    // Lane 1 dies: its messages (path 0's) go ahead of what path 0 holds (#1, renumbered).
    proxy.cutLane(1);
    await until(() => path(1)!.failedOverTo === 0, 'lane 1 failed over to path 0');
    sr.sendmsg(payload(3, 64), b.address()); // #3: the rail's pump runs again
    // #1 is not acknowledged (path 0 is stalled): the rail must still wait. The rail is not
    // stalled, so whatever it sent now would reach B before #1.
    await new Promise<void>((r) => setImmediate(r));
    expect(path(RAIL)!.sentMessages).toBe(railSent);

    proxy.resume('forward');
    const got: number[] = [];
    while (got.length < 3) {
      const v = (await b.recv({ timeout: 5000 })).data.readUInt32BE(0);
      if (v < 10) got.push(v);
    }
    expect(got).toEqual([1, 2, 3]);
  });
});
