import { describe, expect, it } from 'vitest';
import { constants } from '../lib/index.js';
import { bigBufferSocket, cleanupsPerTest, payload, railedStacks, sendUntilCongested, until } from './helpers.js';

// Issue #35, the nemesis (seed 5, 2026-11-28): after a partition healed, an embedded node of the
// rail pair never sent to its peer's slow port again. It held the peer's map with that port
// congested; the peer had drained it and queued the update, but updates went only on path 0,
// which an rds-socket peer does not redial while another path (the rail) carries its traffic and
// nothing waits: the update never left, and every send to that port said ENOBUFS or waited for
// ever. A congestion update now goes on path 0 if it is up, else on any path that is (the kernel
// too sends its map from whichever path's send worker runs first: c_map_queued is per connection).

const { SOL_SOCKET, SO_RCVBUF } = constants;
const cleanups = cleanupsPerTest();

const RAIL = 8;

describe('a congestion update while path 0 is down', () => {
  it('goes over the rail: the sender learns the port cleared and its waiting send() completes', async () => {
    const { A, B, a1, b1, pathOf } = railedStacks('127.29.11', '127.29.12', (c) => cleanups.push(c));
    const state = (i: number) => pathOf(A, i)?.state;
    const stateB = (i: number) => pathOf(B, i)?.state;

    const slow = await bigBufferSocket(B, b1, 4000);
    slow.setsockopt(SOL_SOCKET, SO_RCVBUF, 8192);
    const a = await bigBufferSocket(A, a1, 5000);
    // Path 0 and the rail both up.
    a.sendmsg(payload(0, 64), { address: b1, port: 4000 });
    await until(() => state(0) === 'UP' && state(RAIL) === 'UP', 'path 0 and the rail up');

    const { congested } = await sendUntilCongested(a, slow.address(), 10_000);
    expect(congested).toBe(true);
    expect(A.congMap(b1).test(4000)).toBe(true);

    // Path 0 goes down and stays down (A, its dialler, holds it down); the rail carries on.
    A.disconnectPath(b1, 0);
    await until(() => state(0) !== 'UP' && stateB(0) !== 'UP', 'path 0 down on both sides');
    expect(state(RAIL)).toBe('UP');

    // The slow reader drains its port: B's map clears the bit and must reach A over the rail.
    const waiting = a.send(payload(1, 64), slow.address(), { timeout: 5000 });
    for (let m = slow.recvmsg(); m !== null; m = slow.recvmsg());
    await until(() => !B.congMap(b1).test(4000), 'B cleared its bit');
    await expect(waiting).resolves.toBe(64);
    expect(A.congMap(b1).test(4000)).toBe(false);
    // And the message itself arrives (over the rail).
    let got: Buffer | null = null;
    for (let i = 0; i < 200 && got === null; i++) {
      const m = await slow.recv({ timeout: 5000 });
      if (m.data.length === 64 && m.data.readUInt32BE(0) === 1) got = m.data;
    }
    expect(got).not.toBeNull();
  });
});
