import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants, wire as w, type ConnectionInfo } from '../lib/index.js';
import { RawListener, rawConnect } from './raw-peer.js';
import { TEST_TCP_PORT, bigBufferSocket, payload, proxiedStacks, until } from './helpers.js';

let cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});
let sub = 0;

type StackOpts = { npaths?: number; failoverGraceMs?: number; ackDelayMaxMs?: number };
async function pair(optsA: StackOpts = {}, optsB: StackOpts = {}, viaProxy = false) {
  const base = `127.27.${++sub}`;
  const { A, B, proxy } = await proxiedStacks(base, optsA, optsB, viaProxy, (c) => cleanups.push(c));
  const mk = bigBufferSocket;
  return { A, B, proxy, base, mk, a: await mk(A, `${base}.1`, 4000), b: await mk(B, `${base}.2`, 4000) };
}

const conn = (s: RdsStack): ConnectionInfo => s.connections().find((c) => c.transport === 'tcp')!;
const upPaths = (s: RdsStack): number => conn(s).paths.filter((p) => p.state === 'UP').length;

/**
 * A node on .1 that has sent one message to a raw peer listening on .2 (answering probes as a 6.1
 * kernel when `kernelLike`), and the peer's first connection.
 */
async function rawPeerConnected(kernelLike: boolean) {
  const base = `127.27.${++sub}`;
  const peer = await RawListener.listen(`${base}.2`, TEST_TCP_PORT, kernelLike);
  cleanups.push(() => peer.close());
  const A = new RdsStack({ tcpPort: TEST_TCP_PORT });
  cleanups.push(() => A.close());
  const a = new RdsSocket({ stack: A });
  await a.bind({ address: `${base}.1`, port: 4000 });
  a.sendmsg(Buffer.from('x'), { address: `${base}.2`, port: 4000 });
  return { A, peer, c: await peer.accept(0) };
}

describe('multipath negotiation (spec §3)', () => {
  it('8 <-> 8: both sides run 8 paths; each lane opens when a socket that uses it first sends', async () => {
    const { A, B, a, b, mk, base } = await pair();
    a.sendmsg(Buffer.from('probe-lane'), b.address());
    await drainProbes(b, 1);
    await until(() => conn(A).npaths === 8 && conn(B).npaths === 8, 'npaths 8');
    expect(A.counters.get('mprds_fanout')).toBe(1);
    // Sockets until every lane has one: each lane comes up as its first socket sends.
    const { socks } = await socketsByLane(A, mk, base, b, 8, 8);
    await drainProbes(b, socks.length);
    await until(() => upPaths(A) === 8 && upPaths(B) === 8, '8 paths up');
  });

  it('8 <-> 1: the smaller count wins', async () => {
    const { A, B, a, b } = await pair({}, { npaths: 1 });
    a.sendmsg(Buffer.from('x'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => conn(A).npaths === 1 && conn(B).npaths === 1, 'npaths 1');
    expect(upPaths(A)).toBe(1);
  });

  it('4 <-> 8 negotiates 4', async () => {
    const { A, B, a, b, mk, base } = await pair({ npaths: 4 }, {});
    a.sendmsg(Buffer.from('probe-lane'), b.address());
    await drainProbes(b, 1);
    await until(() => conn(A).npaths === 4 && conn(B).npaths === 4, 'npaths 4');
    const { socks, lanes } = await socketsByLane(A, mk, base, b, 4, 4);
    await drainProbes(b, socks.length);
    expect(Math.max(...lanes)).toBe(3);
    await until(() => upPaths(A) === 4 && upPaths(B) === 4, '4 paths up');
  });

  it('a kernel-like peer (NPATHS only, no rds-socket capabilities) gets one path', async () => {
    const { A, peer, c } = await rawPeerConnected(true); // answers our probe with NPATHS=8, as a 6.1 kernel
    await c.nextUser();
    await until(() => A.counters.get('handshake_received') >= 1, 'pong');
    expect(conn(A).npaths).toBe(1);
    expect(peer.conns.length).toBe(1); // no lane connections were opened
  });

  it('a kernel before 7.0: our first probe leaves its path count alone, the one after its answer says 1', async () => {
    const { A, peer, c } = await rawPeerConnected(false);
    const npathsOf = (f: { header: w.RdsHeader }) => w.decodeHandshake(w.parseExtensions(f.header.exthdr)).npaths;
    // Not known yet: no NPATHS, so a kernel keeps the count it has (a 7.x kernel its lanes).
    expect(npathsOf(await c.nextProbe())).toBeUndefined();
    // Its answer, as a 6.x kernel's: NPATHS 8, no SPORT_IDX, no rds-socket capabilities.
    c.send({
      sequence: 1,
      sport: 0,
      dport: 1,
      exthdr: w.packExtensions([w.npathsExtension(8), w.genNumExtension(61)]),
    });
    // It may hold a count from a multipath peer that had our address: it is told ours.
    expect(npathsOf(await c.nextProbe())).toBe(1);
    expect(conn(A).npaths).toBe(1);
    expect(peer.conns.length).toBe(1);
  });

  it('a peer that never answers the probe does not hold senders: path 0 carries everything', async () => {
    const base = `127.27.${++sub}`;
    const peer = await RawListener.listen(`${base}.2`, TEST_TCP_PORT);
    cleanups.push(() => peer.close());
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT, handshakeTimeoutMs: 50 });
    cleanups.push(() => A.close());
    const senders: RdsSocket[] = [];
    for (let i = 0; i < 8; i++) {
      const s = new RdsSocket({ stack: A });
      await s.bind({ address: `${base}.1`, port: 5000 + i });
      senders.push(s);
    }
    for (const s of senders) expect(s.sendmsg(Buffer.from('hi'), { address: `${base}.2`, port: 4000 })).toBe(2);
    const c = await peer.accept(0);
    (c as unknown as { kernelLike: boolean }).kernelLike = false;
    for (let i = 0; i < 8; i++) expect((await c.nextUser()).header.sport).toBe(5000 + i);
    await until(() => A.counters.get('handshake_timeout') === 1, 'handshake timeout');
    expect(conn(A).npaths).toBe(1);
  });
});

describe('paths and ordering', () => {
  it('spreads sockets over paths and keeps each socket pair in order across fan-out', async () => {
    const { A, B, a, b, mk, base } = await pair();
    const senders = [a];
    for (let i = 1; i < 16; i++) senders.push(await mk(A, `${base}.1`, 4000 + i));
    // Messages queued before the handshake go on path 0; after fan-out each socket moves to its
    // own lane, which must not overtake what is still on lane 0.
    const N = 150;
    const sending = (async () => {
      // The first 10 of each socket go out before the handshake settles the path count (path 0),
      // the rest after fan-out (each socket's own lane).
      for (let i = 0; i < 10; i++)
        for (const s of senders) await s.send(payload(i, 100 + ((i * 31) % 3000)), b.address());
      await until(() => conn(A).npaths === 8, 'fan-out');
      for (let i = 10; i < N; i++)
        for (const s of senders) await s.send(payload(i, 100 + ((i * 31) % 3000)), b.address());
    })();
    const next = new Map<number, number>();
    for (let k = 0; k < N * senders.length; k++) {
      const m = await b.recv({ timeout: 10000 });
      const want = next.get(m.port) ?? 0;
      expect(m.data.readUInt32BE(0)).toBe(want);
      next.set(m.port, want + 1);
    }
    await sending;
    const used = conn(A).paths.filter((p) => p.sentMessages > 0).length;
    expect(used).toBeGreaterThanOrEqual(4);
    expect(conn(B).paths.reduce((n, p) => n + p.recvMessages, 0)).toBeGreaterThanOrEqual(N * senders.length);
  });

  it("recvmsg reports the path each message came on (RdsMessage.path): path 0 before the handshake, then the sending socket's lane", async () => {
    const { A, B, a, b, mk, base } = await pair();
    a.sendmsg(Buffer.from('first'), b.address());
    const first = await b.recv({ timeout: 5000 });
    expect(first.data.toString()).toBe('first');
    expect(first.path).toBe(0);
    await until(() => conn(A).npaths === 8 && conn(B).npaths === 8, 'npaths 8');
    const { socks, lanes } = await socketsByLane(A, mk, base, b, 12, 3);
    const byPort = new Map(socks.map((s, i) => [s.address().port, lanes[i]!]));
    await drainProbes(b, socks.length);
    for (const s of socks) s.sendmsg(Buffer.from('lane'), b.address());
    for (let i = 0; i < socks.length; i++) {
      const m = await b.recv({ timeout: 5000 });
      expect(m.path).toBe(byPort.get(m.port));
    }
    // Lanes other than 0 were in use, so the field is the carrier's, not a constant.
    expect(new Set(lanes).size).toBeGreaterThanOrEqual(3);
  });

  it('pairs each lane with the same path after repeated reconnects (SPORT_IDX)', async () => {
    const { A, B, a, b, mk, base, proxy } = await pair({}, {}, true);
    const senders = [a];
    for (let i = 1; i < 12; i++) senders.push(await mk(A, `${base}.1`, 4100 + i));
    const N = 200;
    const rx = (async () => {
      const next = new Map<number, number>();
      for (let k = 0; k < N * senders.length; k++) {
        const m = await b.recv({ timeout: 20000 });
        const want = next.get(m.port) ?? 0;
        expect(m.data.readUInt32BE(0)).toBe(want);
        next.set(m.port, want + 1);
      }
    })();
    for (let i = 0; i < N; i++) {
      for (const s of senders) await s.send(payload(i, 200), b.address(), { timeout: 20000 });
      if (i % 40 === 20) {
        await a.flush({ timeout: 20000 });
        await until(() => usedLanesUp(A), 'every lane in use up');
        proxy!.resetAll();
      }
    }
    await rx;
    for (const s of senders) await s.flush({ timeout: 20000 });
    expect(b.recvmsg()).toBeNull();
    expect(A.counters.get('conn_reset')).toBeGreaterThan(0);
    // Every lane's TCP source port still encodes its index, on both sides of the proxy.
    for (const p of conn(B).paths) {
      const info = p.transport as { peerPort?: number } | null;
      if (p.state === 'UP' && info?.peerPort !== undefined) expect(info.peerPort % 8).toBe(p.index);
    }
  });

  it('reports per-path figures: state, ports, messages, bytes, acknowledgement latency histogram', async () => {
    const { A, a, b } = await pair();
    for (let i = 0; i < 50; i++) a.sendmsg(payload(i, 1000), b.address());
    for (let i = 0; i < 50; i++) await b.recv({ timeout: 5000 });
    await a.flush({ timeout: 5000 });
    const p = conn(A).paths.find((x) => x.sentMessages > 0)!;
    expect(p.sentBytes).toBeGreaterThanOrEqual(50 * 1000);
    expect(p.latencyHistogram.reduce((x, y) => x + y, 0)).toBeGreaterThanOrEqual(50);
    expect(p.transport).toMatchObject({ localPort: expect.any(Number), peerPort: TEST_TCP_PORT });
  });
});

/** The path index a socket's messages to `dest` use: send one, see which path's counter moved. */
async function laneOf(A: RdsStack, s: RdsSocket, dest: { address: string; port: number }): Promise<number> {
  const before = conn(A).paths.map((p) => p.sentMessages);
  await s.send(Buffer.from('probe-lane'), dest);
  const moved = () => conn(A).paths.findIndex((p, k) => p.sentMessages > before[k]!);
  await until(() => moved() >= 0, 'the message to leave');
  return moved();
}

/** Lanes open on demand: every path that has carried a message (and path 0) is UP. */
const usedLanesUp = (s: RdsStack): boolean =>
  conn(s).paths.every((p) => p.state === 'UP' || (p.index > 0 && p.sentMessages === 0));

/**
 * Sockets on A, one per lane that some socket maps to; several per lane are fine. With `lanes`,
 * more sockets (up to 64) until that many distinct lanes are in use.
 */
async function socketsByLane(
  A: RdsStack,
  mk: (st: RdsStack, a: string, p: number) => Promise<RdsSocket>,
  base: string,
  b: RdsSocket,
  count: number,
  distinct = 0,
): Promise<{ socks: RdsSocket[]; lanes: number[] }> {
  const socks: RdsSocket[] = [];
  const lanes: number[] = [];
  for (let i = 0; i < 64 && (i < count || new Set(lanes).size < distinct); i++) {
    const s = await mk(A, `${base}.1`, 4200 + i);
    socks.push(s);
    lanes.push(await laneOf(A, s, b.address()));
  }
  return { socks, lanes };
}

async function drainProbes(b: RdsSocket, n: number): Promise<void> {
  for (let i = 0; i < n; i++) expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('probe-lane');
}

/** Settles 8 paths, then makes `count` sockets on A, learns each one's lane and waits for those lanes to be up. */
async function lanesUp(
  A: RdsStack,
  B: RdsStack,
  a: RdsSocket,
  b: RdsSocket,
  mk: (st: RdsStack, a: string, p: number) => Promise<RdsSocket>,
  base: string,
  count: number,
) {
  a.sendmsg(Buffer.from('probe-lane'), b.address());
  await drainProbes(b, 1);
  await until(() => conn(A).npaths === 8 && conn(B).npaths === 8, 'npaths 8');
  // Lanes open on demand: the sockets' first messages bring theirs up.
  const r = await socketsByLane(A, mk, base, b, count);
  await drainProbes(b, r.socks.length);
  await until(
    () => r.lanes.every((l) => conn(A).paths[l]!.state === 'UP' && conn(B).paths[l]!.state === 'UP'),
    'the lanes in use up',
  );
  return r;
}

describe('failover between rds-socket nodes', () => {
  it('a lane killed mid-stream: its messages move to a live path and back, none lost, none duplicated, order kept', async () => {
    const { A, B, a, b, mk, base, proxy } = await pair({ failoverGraceMs: 150 }, { failoverGraceMs: 150 }, true);
    const { socks, lanes } = await lanesUp(A, B, a, b, mk, base, 12);
    const victim = lanes.find((l) => l > 0)!;
    expect(victim).toBeGreaterThan(0);
    const onVictim = socks.filter((_, i) => lanes[i] === victim);

    const N = 300;
    const received = new Map<number, number>();
    const rx = (async () => {
      for (let k = 0; k < N * socks.length; k++) {
        const m = await b.recv({ timeout: 20000 });
        const want = received.get(m.port) ?? 0;
        expect(m.data.readUInt32BE(0)).toBe(want); // a gap is a loss, a repeat is a duplicate
        received.set(m.port, want + 1);
      }
    })();
    let sentAfterReturn = 0;
    for (let i = 0; i < N; i++) {
      for (const s of socks) await s.send(payload(i, 100 + ((i * 53) % 2000)), b.address(), { timeout: 20000 });
      if (i === 100) proxy!.cutLane(victim);
      if (i === 150) await until(() => conn(A).paths[victim]!.failedOverTo !== null, 'failover of the cut lane');
      if (i === 200) {
        proxy!.cutLane(victim, false);
        await until(
          () => conn(A).paths[victim]!.state === 'UP' && conn(A).paths[victim]!.failedOverTo === null,
          'lane back',
        );
        sentAfterReturn = conn(A).paths[victim]!.sentMessages;
      }
    }
    await rx;
    for (const s of socks) await s.flush({ timeout: 20000 });
    expect(b.recvmsg()).toBeNull();
    for (const s of socks) expect(received.get(s.address().port)).toBe(N);
    const p = conn(A).paths[victim]!;
    expect(p.movedByFailover).toBeGreaterThan(0);
    expect(A.counters.get('failover_moved')).toBe(conn(A).paths.reduce((n, x) => n + x.movedByFailover, 0));
    // The lane's sockets came back to it once it was up again.
    if (onVictim.length > 0) expect(p.sentMessages).toBeGreaterThan(sentAfterReturn);
  });

  it('messages the peer already had when the lane died are not delivered twice', async () => {
    // The receiver does not read, so nothing is acknowledged: every message on the lane is still
    // unacknowledged at the sender when the lane dies, although the peer has them all.
    const { A, B, a, b, mk, base, proxy } = await pair({ failoverGraceMs: 100 }, { ackDelayMaxMs: 60000 }, true);
    const { socks, lanes } = await lanesUp(A, B, a, b, mk, base, 8);
    const k = lanes.findIndex((l) => l > 0);
    const s = socks[k]!;
    const victim = lanes[k]!;
    const before = conn(B).paths[victim]!.recvMessages;
    const K = 40;
    const events: number[] = [];
    A.on('failover', (ev) => events.push(ev.moved));
    for (let i = 0; i < K; i++) s.sendmsg(payload(i, 500), b.address());
    await until(() => conn(B).paths[victim]!.recvMessages === before + K, 'peer has them all');
    proxy!.cutLane(victim);
    await until(() => B.counters.get('recv_drop_moved_dup') === K, 'moved copies dropped as duplicates');
    expect(events).toEqual([K]);
    for (let i = 0; i < K; i++) expect((await b.recv({ timeout: 5000 })).data.readUInt32BE(0)).toBe(i);
    expect(b.recvmsg()).toBeNull();
    await s.flush({ timeout: 10000 }); // acknowledged over the live path
    expect(conn(A).paths[victim]!.failedOverTo).not.toBeNull();
  });

  it('never fails over with failoverGraceMs: Infinity: messages wait for their own path', async () => {
    const { A, B, a, b, mk, base, proxy } = await pair({ failoverGraceMs: Infinity }, {}, true);
    const { socks, lanes } = await lanesUp(A, B, a, b, mk, base, 8);
    const k = lanes.findIndex((l) => l > 0);
    proxy!.cutLane(lanes[k]!);
    await until(() => conn(A).paths[lanes[k]!]!.state !== 'UP', 'lane down');
    socks[k]!.sendmsg(payload(0, 100), b.address());
    await expect(b.recv({ timeout: 300 })).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    expect(A.counters.get('failover_moved')).toBe(0);
    proxy!.cutLane(lanes[k]!, false);
    expect((await b.recv({ timeout: 10000 })).data.readUInt32BE(0)).toBe(0);
  });
});

describe('pairing without SPORT_IDX (older kernels, spec §3.5)', () => {
  it('an acceptor pairs lane connections first-free, the same way after reconnects', async () => {
    const base = `127.27.${++sub}`;
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: `${base}.2`, port: 4000 });
    // An rds-socket-like initiator that runs 8 paths but does not put path indexes in its ports.
    const caps = constants.RDSSOCK_CAP_ACK | constants.RDSSOCK_CAP_HEARTBEAT | (8 << constants.RDSSOCK_CAP_PATHS_SHIFT);
    const hello = w.packExtensions([w.npathsExtension(8), w.genNumExtension(77), w.rdsCapsExtension(caps)]);
    const open = async () => {
      const c = await rawConnect(`${base}.1`, `${base}.2`, TEST_TCP_PORT, false);
      cleanups.push(async () => {
        c.sock.destroy();
      });
      c.send({ sport: 1, dport: 0, flags: constants.RDS_FLAG_RETRANSMITTED, exthdr: hello });
      return c;
    };
    const c0 = await open();
    await until(() => conn(B).npaths === 8, 'path count from the hello');
    const portOf = (c: { sock: { localPort?: number } }) => c.sock.localPort!;
    const peerPorts = () =>
      conn(B).paths.map((p) => (p.state === 'UP' ? (p.transport as { peerPort: number }).peerPort : null));
    const c1 = await open();
    const c2 = await open();
    await until(() => peerPorts()[2] !== null, 'three paths up');
    expect(peerPorts().slice(0, 3)).toEqual([portOf(c0), portOf(c1), portOf(c2)]);
    // Lane 1 goes away; the next connection takes the first free path, 1, whatever its port.
    c1.sock.destroy();
    await until(() => conn(B).paths[1]!.state !== 'UP', 'path 1 down');
    const c3 = await open();
    await until(() => peerPorts()[1] === portOf(c3), 'path 1 re-paired');
    expect(peerPorts().slice(0, 3)).toEqual([portOf(c0), portOf(c3), portOf(c2)]);
    // Data on the re-paired lane is delivered.
    c3.send({ sequence: 1, sport: 9, dport: 4000 }, Buffer.from('lane'));
    const m = await b.recv({ timeout: 5000 });
    expect(m.data.toString()).toBe('lane');
  });
});
