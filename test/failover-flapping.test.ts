import { describe, expect, it } from 'vitest';
import { bigBufferSocket, cleanupsPerTest, payload, railedStacks, until } from './helpers.js';

// A path whose peer takes each connection and drops it at once (here: the peer's operator holds
// the path down; also a peer still shutting the previous connection down, or one that refuses a
// misplaced lane) comes UP for a moment on every redial. Every such moment ended the failover
// grace period, and a new one began at the next drop, so the path's messages never moved to the
// rail that was up all along: they waited as long as the peer refused (found while testing the
// congestion-map fix for issue #35). The grace period now runs from the first drop, across brief
// UPs; it ends only if the path is still up when it runs out.

const cleanups = cleanupsPerTest();

const RAIL = 8;

describe('failover from a path that keeps coming up for a moment', () => {
  it('the peer holds path 0 down (accepting and dropping each redial): its messages move to the rail and arrive', async () => {
    const { A, B, a1, b1, pathOf } = railedStacks('127.29.13', '127.29.14', (c) => cleanups.push(c));
    const path = (i: number) => pathOf(A, i);
    const b = await bigBufferSocket(B, b1, 4000);
    const a = await bigBufferSocket(A, a1, 5000);
    a.sendmsg(payload(0, 64), b.address());
    expect((await b.recv({ timeout: 5000 })).data.readUInt32BE(0)).toBe(0);
    await until(() => path(0)?.state === 'UP' && path(RAIL)?.state === 'UP', 'path 0 and the rail up');

    B.disconnectPath(a1, 0);
    // The socket's path is path 0 (one lane; the rail is a failover target only while path 0 is
    // down), so these wait there until they move.
    for (let i = 1; i <= 5; i++) a.sendmsg(payload(i, 64), b.address());
    const got: number[] = [];
    while (got.length < 5) got.push((await b.recv({ timeout: 5000 })).data.readUInt32BE(0));
    expect(got).toEqual([1, 2, 3, 4, 5]);
    expect(path(0)!.movedByFailover).toBeGreaterThan(0);
    expect(path(0)!.upCount).toBeGreaterThan(1); // it did come up again in between
  });
});
