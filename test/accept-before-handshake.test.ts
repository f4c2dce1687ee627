import { describe, expect, it } from 'vitest';
import { constants, RdsSocket, RdsStack, wire as w } from '../lib/index.js';
import { type Frame, type RawConn, isProbe, kernelMap, rawConnectLane } from './raw-peer.js';
import { cleanupsPerTest, TEST_TCP_PORT, until } from './helpers.js';

// Issue #35, the nemesis with Linux 7.2 on the smallest address (seed 2029): 581 messages of our
// restarted nodes read twice or more by the kernel. A 7.x kernel that ran 8 lanes to the old life
// redials each of them at once; the new life, which has not yet read the kernel's SPORT_IDX (its
// first pong), took each carrier for path 0 and sent path 0's queue on it. At the kernel each
// carrier is its own lane, with its own sequence space (all reset to 0 by our new GEN_NUM), so it
// took every copy. Now the accepting side sends nothing but its probe on path 0 until the
// handshake is known; the pong on a lane's carrier says so and the carrier moves, unclosed, to the
// lane it is (it was dropped until seed 7079 showed that lost what came after the pong).
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

/** Every frame the node sends on `c` until it closes it or sends nothing for 1.5 s, each probe answered. */
async function framesUntilQuiet(c: RawConn, seq: number): Promise<Frame[]> {
  const out: Frame[] = [];
  for (;;) {
    let f: Frame;
    try {
      f = await c.next(1500);
    } catch {
      return out;
    }
    out.push(f);
    if (isProbe(f)) pong(c, seq++);
  }
}

/** The payloads of the node's messages to the kernel's port 7000 on `c`, each probe answered, until `done(got)`. */
async function userMessages(c: RawConn, done: (got: string[]) => boolean): Promise<string[]> {
  const got: string[] = [];
  for (let seq = 1; !done(got); ) {
    const f = await c.next(5000);
    if (isProbe(f)) pong(c, seq++);
    else if (f.header.dport === 7000) got.push(f.payload.toString());
  }
  return got;
}

describe('a kernel that redials its lanes to a node that restarted (this node, larger address)', () => {
  it('gets nothing but the probe on a lane taken for path 0 before its handshake; the carrier moves to its lane; the messages go once, on path 0', async () => {
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0 });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: NODE, port: 5000 });
    b.sendmsg(Buffer.from('m1'), { address: KERNEL, port: 7000 });
    b.sendmsg(Buffer.from('m2'), { address: KERNEL, port: 7000 });
    const conn = () => B.connections().find((c) => c.peerAddress === KERNEL)!;

    // Lane 3's carrier comes first: the node takes it for path 0 (it knows nothing of the kernel).
    const lane = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 3, false);
    cleanups.push(() => void lane.sock.destroy());
    kernelMap(lane);
    const onLane = await framesUntilQuiet(lane, 1);
    // The probe, and no hello once it is lane 3 (its NPATHS 1 would tell a 7.x kernel one path).
    expect(onLane.filter(isProbe).map((f) => f.header.sequence > 0)).toEqual([true]);
    expect(onLane.filter((f) => f.header.dport === 7000).map((f) => f.payload.toString())).toEqual([]);
    // Its pong showed it lane 3: it goes on as lane 3, and path 0 waits for its own carrier.
    expect(lane.closed).toBe(false);
    expect(B.counters.get('accept_lane_misplaced')).toBe(1);
    expect(B.counters.get('accept_lane_moved')).toBe(1);
    expect(conn().paths[3]!.state).toBe('UP');
    expect(conn().paths[0]!.state).not.toBe('UP');

    // Path 0's carrier: the probe, its pong, then the messages, once.
    const p0 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 0, false);
    cleanups.push(() => void p0.sock.destroy());
    kernelMap(p0);
    expect(await userMessages(p0, (got) => got.length === 2)).toEqual(['m1', 'm2']);
    expect((await framesUntilQuiet(lane, 10)).filter((f) => f.header.dport === 7000)).toEqual([]);
  });

  // The 1200 s replay of seed 2029 (session 25): the kernel redialled lane after lane, each taken
  // for path 0 and dropped once its pong showed it a lane, for over 3 s; the handshake timeout
  // then took the kernel for one path, and path 0's messages went on the lane taken for path 0 at
  // that moment, then again on the next carrier: the restarted node's first messages read twice.
  // Now the first such lane moves to its place and its pong settles the pairing: the next lanes
  // are paired by their ports, none is taken for path 0, and path 0's messages wait for path 0.
  it('once a lane taken for path 0 has moved to its place, the next lanes are paired by port; path 0 messages go only on path 0', async () => {
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0, handshakeTimeoutMs: 300 });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: NODE, port: 5001 });
    b.sendmsg(Buffer.from('m1'), { address: KERNEL, port: 7000 });
    b.sendmsg(Buffer.from('m2'), { address: KERNEL, port: 7000 });
    const conn = () => B.connections().find((c) => c.peerAddress === KERNEL)!;

    const lane3 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 3, false);
    cleanups.push(() => void lane3.sock.destroy());
    kernelMap(lane3);
    await framesUntilQuiet(lane3, 1);
    expect(B.counters.get('accept_lane_moved')).toBe(1);

    // Lane 5 next, past the handshake timeout: paired by its port (not taken for path 0).
    const lane5 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 5, false);
    cleanups.push(() => void lane5.sock.destroy());
    kernelMap(lane5);
    await until(() => conn().paths[5]!.state === 'UP', 'lane 5 up');
    expect(conn().paths[0]!.state).not.toBe('UP');
    const onLane5 = await framesUntilQuiet(lane5, 1);
    expect(onLane5.filter((f) => isProbe(f) || f.header.dport === 7000)).toEqual([]);
    expect(B.counters.get('accept_lane_misplaced')).toBe(1);

    // Path 0's carrier is taken; the messages go on it once.
    const p0 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 0, false);
    cleanups.push(() => void p0.sock.destroy());
    kernelMap(p0);
    expect(await userMessages(p0, (got) => got.length === 2)).toEqual(['m1', 'm2']);
    expect((await framesUntilQuiet(lane3, 10)).filter((f) => f.header.dport === 7000)).toEqual([]);
  });

  // The same replay's lost messages: a lane's carrier taken for path 0 brought the kernel's lane
  // messages (numbered in the lane's space, up to 41 here) before its pong showed it a lane; path 0
  // then expected 42 and up, and dropped the kernel's first messages on the real path 0 (1 and 2,
  // resent on a new carrier before its handshake was known) as old.
  it("messages a lane's carrier brought while taken for path 0 do not move path 0's numbering", async () => {
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0 });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: NODE, port: 5002 });
    const data = (c: RawConn, seq: number, text: string) =>
      c.send({ sequence: seq, sport: 7001, dport: 5002 }, Buffer.from(text));

    const lane1 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 1, false);
    cleanups.push(() => void lane1.sock.destroy());
    kernelMap(lane1);
    data(lane1, 40, 'lane-40');
    data(lane1, 41, 'lane-41');
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('lane-40');
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('lane-41');
    await framesUntilQuiet(lane1, 42); // its probe answered on the lane: moved there
    expect(B.counters.get('accept_lane_misplaced')).toBe(1);

    const p0 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 0, false);
    cleanups.push(() => void p0.sock.destroy());
    kernelMap(p0);
    // Resent (RETRANSMITTED): the kernel's path-0 carrier before this one died with them unacknowledged.
    p0.send({ sequence: 1, sport: 7001, dport: 5002, flags: constants.RDS_FLAG_RETRANSMITTED }, Buffer.from('p0-1'));
    p0.send({ sequence: 2, sport: 7001, dport: 5002, flags: constants.RDS_FLAG_RETRANSMITTED }, Buffer.from('p0-2'));
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('p0-1');
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('p0-2');
  });

  // The second replay (session 25): the node's link was down while the kernel redialled, so the
  // handshake timed out (the kernel taken for one path, nothing known of SPORT_IDX); when the link
  // came back a lane's carrier came first, was taken for path 0, and got path 0's messages before
  // its pong showed it a lane. Now, after a handshake that timed out, every carrier taken for
  // path 0 waits for the peer's probe, pong or hello on it (or the handshake timeout) before it
  // carries our messages.
  it("after a handshake timeout, a lane's carrier taken for path 0 gets nothing before its pong", async () => {
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0, handshakeTimeoutMs: 300 });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: NODE, port: 5003 });
    // Path 0's carrier, its probe never answered: after the timeout the messages go on it.
    const p0 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 0, false);
    cleanups.push(() => void p0.sock.destroy());
    kernelMap(p0);
    b.sendmsg(Buffer.from('m1'), { address: KERNEL, port: 7000 });
    expect((await p0.nextUser()).payload.toString()).toBe('m1');
    expect(B.counters.get('handshake_timeout')).toBe(1);
    p0.sock.destroy();
    const conn = () => B.connections().find((c) => c.peerAddress === KERNEL)!;
    await until(() => conn().paths[0]!.state !== 'UP', 'path 0 down');
    b.sendmsg(Buffer.from('m2'), { address: KERNEL, port: 7000 });

    // Lane 4 comes first: taken for path 0 (nothing says the kernel pairs by port), and m2 must
    // not go on it; its probe answered with SPORT_IDX moves it to lane 4.
    const lane4 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 4, false);
    cleanups.push(() => void lane4.sock.destroy());
    kernelMap(lane4);
    const onLane = await framesUntilQuiet(lane4, 1);
    expect(onLane.filter((f) => f.header.dport === 7000).map((f) => f.payload.toString())).toEqual([]);
    expect(B.counters.get('accept_lane_misplaced')).toBe(1);

    const p0b = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 0, false);
    cleanups.push(() => void p0b.sock.destroy());
    kernelMap(p0b);
    // m1 may come again first (resent, RETRANSMITTED: its TCP acknowledgement may not have been
    // seen before p0 closed); m2 comes here, once.
    const got = await userMessages(p0b, (g) => g.includes('m2'));
    expect(got.filter((x) => x !== 'm1')).toEqual(['m2']);
  });

  // The third replay (session 26): the kernel redialled path 0 and a lane while the node's new
  // life knew nothing of it; the lane's connection was accepted for path 0 and waited behind path
  // 0's carrier (the newest carrier wins once the old one is read to its end). When its turn came
  // the kernel was known to pair by port, yet it took path 0 over: the node's path-0 messages went
  // on it, and the kernel read them there and again on its real path 0. Now the port is asked again
  // at the turn.
  it('a lane connection that waited to replace path 0 goes to its lane when its turn comes after the pairing is known', async () => {
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0 });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: NODE, port: 5004 });
    b.sendmsg(Buffer.from('m1'), { address: KERNEL, port: 7000 });
    const conn = () => B.connections().find((c) => c.peerAddress === KERNEL)!;

    const p0 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 0, false);
    cleanups.push(() => void p0.sock.destroy());
    kernelMap(p0);
    await p0.nextProbe();
    // Lane 4 comes while path 0's carrier lives and nothing is known: it waits to replace path 0.
    const l4 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 4, false);
    cleanups.push(() => void l4.sock.destroy());
    kernelMap(l4);
    await until(() => B.counters.get('tcp_connect_raced') === 1, 'the lane queued behind path 0');
    // Path 0's pong: 8 paths, paired by source port. m1 goes on path 0.
    pong(p0, 1);
    expect((await p0.nextUser()).payload.toString()).toBe('m1');
    // The kernel ends that path-0 connection: the waiting connection's turn.
    p0.sock.end();
    await until(() => conn().paths[4]!.state === 'UP', 'lane 4 up on the waiting connection (before: it took path 0)');
    expect(B.counters.get('accept_moved_by_port')).toBe(1);
    expect(conn().paths[0]!.state).not.toBe('UP');
    expect(B.counters.get('accept_lane_misplaced')).toBe(0);
    // Nothing of path 0 went on it: no probe (path 0's first frame), no message.
    const onLane: Frame[] = [];
    for (;;) {
      try {
        onLane.push(await l4.next(500));
      } catch {
        break;
      }
    }
    expect(onLane.filter((f) => isProbe(f) || f.header.dport === 7000)).toEqual([]);
  });

  // Seed 7079 (session 29): the 7.x kernel's first carrier after a partition healed was a lane,
  // taken for path 0 by a node that had just restarted. It brought a message, then the kernel's
  // pong (SPORT_IDX) and more of the lane's messages in the same stream. The pong dropped the
  // carrier as misplaced, and what followed it, though our TCP had acknowledged it (the kernel
  // released it as delivered), was never read: 2 messages vanished. The carrier now moves to the
  // lane it is, and everything after the pong is read there, once.
  it("a lane's messages after its pong on a carrier taken for path 0 are read, once, on the lane", async () => {
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0 });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: NODE, port: 5005 });
    const data = (c: RawConn, seq: number, text: string) =>
      c.send({ sequence: seq, sport: 7001, dport: 5005 }, Buffer.from(text));
    const lane1 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 1, false);
    cleanups.push(() => void lane1.sock.destroy());
    kernelMap(lane1);
    data(lane1, 40, 'lane-40');
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('lane-40');
    // Our probe comes on it; the kernel answers and sends more of the lane's messages right after.
    await lane1.nextProbe();
    pong(lane1, 41);
    data(lane1, 42, 'lane-42');
    data(lane1, 43, 'lane-43');
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('lane-42');
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('lane-43');
    const conn = B.connections().find((c) => c.peerAddress === KERNEL)!;
    expect(B.counters.get('accept_lane_misplaced')).toBe(1);
    expect(B.counters.get('accept_lane_moved')).toBe(1);
    expect(conn.paths[1]!.state).toBe('UP');
    expect(conn.paths[0]!.state).not.toBe('UP');
    expect(lane1.closed).toBe(false);
    // The carrier goes on as lane 1: later messages are read; a resent copy of one read is not.
    lane1.send(
      { sequence: 43, sport: 7001, dport: 5005, flags: constants.RDS_FLAG_RETRANSMITTED },
      Buffer.from('lane-43'),
    );
    data(lane1, 44, 'lane-44');
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('lane-44');
    expect(b.recvmsg()).toBeNull();
    // Path 0's own carrier comes next: its numbering starts where it stood (lane 1's did not move it).
    const p0 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 0, false);
    cleanups.push(() => void p0.sock.destroy());
    kernelMap(p0);
    p0.send({ sequence: 1, sport: 7001, dport: 5005, flags: constants.RDS_FLAG_RETRANSMITTED }, Buffer.from('p0-1'));
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('p0-1');
  });

  // The same moment as above with the kernel redialling several carriers at once: path 0's and
  // lane 2's came while lane 1's was path 0's carrier, and waited to replace it (the newest carrier
  // wins once the old one has been read to its end, or after a second). When lane 1's moved to its
  // lane, the waiting ones went on waiting for it, and a second later the first took path 0 and
  // lane 1's carrier was destroyed; lane 2's, paired by its port at its turn, then destroyed path
  // 0's new carrier in the same way. Now they go when it moves, each to the path its port names,
  // and no carrier is destroyed for a connection that went elsewhere.
  it('connections waiting behind a lane taken for path 0 go when it moves, each to its own path, and close nothing', async () => {
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0 });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: NODE, port: 5006 });
    const conn = () => B.connections().find((c) => c.peerAddress === KERNEL)!;
    const data = (c: RawConn, seq: number, text: string) =>
      c.send({ sequence: seq, sport: 7001, dport: 5006 }, Buffer.from(text));
    const lane1 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 1, false);
    cleanups.push(() => void lane1.sock.destroy());
    kernelMap(lane1);
    await lane1.nextProbe();
    const p0 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 0, false);
    cleanups.push(() => void p0.sock.destroy());
    const lane2 = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, 2, false);
    cleanups.push(() => void lane2.sock.destroy());
    await until(() => B.counters.get('tcp_connect_raced') === 2, 'both wait behind the carrier taken for path 0');
    pong(lane1, 41);
    await until(() => conn().paths[2]?.state === 'UP', 'lane 2 up on its connection');
    expect(conn().paths[0]!.state).toBe('UP');
    expect(conn().paths[1]!.state).toBe('UP');
    expect(B.counters.get('accept_lane_moved')).toBe(1);
    // Every carrier goes on: a message on each is read.
    kernelMap(p0);
    await p0.nextProbe();
    pong(p0, 1);
    data(lane1, 42, 'lane-1');
    data(lane2, 1, 'lane-2');
    data(p0, 2, 'path-0');
    const got = [];
    for (let i = 0; i < 3; i++) got.push((await b.recv({ timeout: 5000 })).data.toString());
    expect(got.sort()).toEqual(['lane-1', 'lane-2', 'path-0']);
    expect([lane1.closed, lane2.closed, p0.closed]).toEqual([false, false, false]);
  });
});
