import { afterEach, describe, expect, it } from 'vitest';
import type { ConnectionInfo, RdsSocket, RdsStack } from '../lib/index.js';
import { bigBufferSocket, payload, proxiedStacks, until } from './helpers.js';

// A socket's messages stay in order when failover moves them twice: from its lane to path 0, and,
// after the lane came back (its later messages waiting behind path 0), from path 0 back to the
// lane (the nemesis's "a message on lane k and a later one on lane 0", issue #35).

let cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

const conn = (s: RdsStack): ConnectionInfo => s.connections().find((c) => c.transport === 'tcp')!;

/** The path the socket's next message leaves on (it sends one and looks which path counted it). */
async function laneOf(A: RdsStack, s: RdsSocket, b: RdsSocket): Promise<number> {
  const before = conn(A).paths.map((p) => p.sentMessages);
  await s.send(payload(0, 64), b.address());
  await until(() => conn(A).paths.some((p, k) => p.sentMessages > before[k]!), 'the message to leave');
  return conn(A).paths.findIndex((p, k) => p.sentMessages > before[k]!);
}

describe('failover keeps a socket in order', () => {
  it('moved to path 0, then path 0 fails over to the lane that waits behind it: the moved message goes first', async () => {
    const base = '127.29.1';
    const { A, B, proxy } = await proxiedStacks(base, { failoverGraceMs: 100 }, { failoverGraceMs: 100 }, true, (c) =>
      cleanups.push(c),
    );
    const b = await bigBufferSocket(B, `${base}.2`, 4000);
    const a0 = await bigBufferSocket(A, `${base}.1`, 4100);
    await a0.send(payload(0, 64), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => conn(A).npaths === 8, 'npaths 8');
    // A socket on a lane > 0 (lanes open on demand: its first message brings its lane up).
    let s: RdsSocket | null = null;
    let lane = 0;
    for (let port = 4200; port < 4264 && lane === 0; port++) {
      s = await bigBufferSocket(A, `${base}.1`, port);
      lane = await laneOf(A, s, b);
      await b.recv({ timeout: 5000 });
    }
    expect(lane).toBeGreaterThan(0);
    const path = (i: number) => conn(A).paths[i]!;
    await until(() => path(lane).state === 'UP', 'the lane up');

    // Nothing reaches B from here until resume: what A sends stays unacknowledged.
    proxy!.stall('forward');
    proxy!.cutLane(lane);
    await until(() => path(lane).state !== 'UP', 'the lane down');
    s!.sendmsg(payload(1, 100), b.address()); // #1: waits on the dead lane, moves to path 0
    await until(() => path(lane).failedOverTo === 0 && path(0).sentMessages > 0, '#1 moved to path 0');
    // The lane comes back: its sockets return to it, behind what went ahead on path 0 (#1).
    proxy!.cutLane(lane, false);
    await until(() => path(lane).state === 'UP' && path(lane).failedOverTo === null, 'the lane back');
    s!.sendmsg(payload(2, 100), b.address()); // #2: on the lane, held behind #1
    // Path 0 dies and stays down past its grace period: its messages (#1) move to the lane.
    proxy!.cutLane(0);
    await until(() => path(0).failedOverTo === lane, 'path 0 failed over to the lane');
    proxy!.resume('forward');
    const got: number[] = [];
    for (let i = 0; i < 2; i++) got.push((await b.recv({ timeout: 5000 })).data.readUInt32BE(0));
    expect(got).toEqual([1, 2]);
    proxy!.cutLane(0, false);
  });
});
