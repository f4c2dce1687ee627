import { describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, wire as w } from '../lib/index.js';
import { type Frame, type RawConn, isProbe, kernelMap, rawConnectLane } from './raw-peer.js';
import { cleanupsPerTest, TEST_TCP_PORT } from './helpers.js';

// Issue #35, the nemesis with Linux 7.2 on the smallest address (seed 2029): 581 messages of our
// restarted nodes read twice or more by the kernel. A 7.x kernel that ran 8 lanes to the old life
// redials each of them at once; the new life, which has not yet read the kernel's SPORT_IDX (its
// first pong), took each carrier for path 0 and sent path 0's queue on it. At the kernel each
// carrier is its own lane, with its own sequence space (all reset to 0 by our new GEN_NUM), so it
// took every copy. Now the accepting side sends nothing but its probe on path 0 until the
// handshake is known; the pong on a lane's carrier says so and the carrier is dropped unused.
// A raw peer plays the 7.x kernel. Addresses: 127.148.x.y (this file only).

const cleanups = cleanupsPerTest();
const KERNEL = '127.148.1.1';
const NODE = '127.148.1.2';

/** A 7.x kernel's pong: NPATHS 8, its generation, SPORT_IDX (it pairs carriers by source port). */
const pong = (c: RawConn, seq: number): void =>
  c.send({
    sequence: seq,
    sport: 0,
    dport: 1,
    exthdr: w.packExtensions([w.npathsExtension(8), w.genNumExtension(99), w.sportIdxExtension()]),
  });

/** Every frame the node sends on `c` until it closes it (or 3 s pass), each probe answered. */
async function framesUntilClosed(c: RawConn, seq: number): Promise<Frame[]> {
  const out: Frame[] = [];
  for (;;) {
    let f: Frame;
    try {
      f = await c.next(3000);
    } catch {
      return out;
    }
    out.push(f);
    if (isProbe(f)) pong(c, seq++);
  }
}

describe('a kernel that redials its lanes to a node that restarted (this node, larger address)', () => {
  it('gets nothing but the probe on a lane taken for path 0 before its handshake; the messages go once, on path 0', async () => {
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0 });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: NODE, port: 5000 });
    b.sendmsg(Buffer.from('m1'), { address: KERNEL, port: 7000 });
    b.sendmsg(Buffer.from('m2'), { address: KERNEL, port: 7000 });

    // Lane 3's carrier comes first: the node takes it for path 0 (it knows nothing of the kernel).
    const lane = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 3, false);
    cleanups.push(() => void lane.sock.destroy());
    kernelMap(lane);
    const onLane = await framesUntilClosed(lane, 1);
    expect(onLane.some(isProbe)).toBe(true);
    expect(onLane.filter((f) => f.header.dport === 7000).map((f) => f.payload.toString())).toEqual([]);
    expect(lane.closed).toBe(true);
    expect(B.counters.get('accept_lane_misplaced')).toBe(1);

    // Path 0's carrier: the probe, its pong, then the messages.
    const p0 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 0, false);
    cleanups.push(() => void p0.sock.destroy());
    kernelMap(p0);
    await p0.nextProbe();
    pong(p0, 1);
    expect((await p0.nextUser()).payload.toString()).toBe('m1');
    expect((await p0.nextUser()).payload.toString()).toBe('m2');
  });
});
