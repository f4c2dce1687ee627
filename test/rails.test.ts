import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, wire as w } from '../lib/index.js';
import { RawListener } from './raw-peer.js';
import type { RdsConnection } from '../lib/core/connection.js';
import type { RdsConnPath } from '../lib/core/path.js';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { TEST_TCP_PORT, bigBufferSocket, runNode, until } from './helpers.js';

// Rails (issue #25) on loopback: primary addresses 127.132.N.1 <-> 127.132.N.2, the rail
// 127.132.(N+1).1 <-> 127.132.(N+1).2, a fresh N per test.

let cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});
let net = 0;

type Opts = ConstructorParameters<typeof RdsStack>[0];

async function railPair(optsA: Opts = {}, optsB: Opts = {}, declare = true) {
  const n = (net += 2);
  const a1 = `127.132.${n}.1`;
  const b1 = `127.132.${n}.2`;
  const ra = `127.132.${n + 1}.1`;
  const rb = `127.132.${n + 1}.2`;
  const common = { tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 20, failoverGraceMs: 200, npaths: 1 };
  const A = new RdsStack({ ...common, ...optsA });
  const B = new RdsStack({ ...common, ...optsB });
  cleanups.push(
    () => A.close(),
    () => B.close(),
  );
  const mk = bigBufferSocket;
  const railA = { peer: b1, local: ra, remote: rb };
  const railB = { peer: a1, local: rb, remote: ra };
  const b = await mk(B, b1, 4000);
  const a = await mk(A, a1, 4000);
  if (declare) {
    await A.addRail(railA);
    await B.addRail(railB);
  }
  return { A, B, a, b, a1, b1, ra, rb, railA, railB, mk, n };
}

const tcpConn = (s: RdsStack, peer: string) =>
  s.connections().find((c) => c.transport === 'tcp' && c.peerAddress === peer)!;
const pathInfo = (s: RdsStack, peer: string, index: number) => tcpConn(s, peer)?.paths.find((p) => p.index === index);
const railUp = (s: RdsStack, peer: string): boolean => pathInfo(s, peer, 8)?.state === 'UP';
const internalConn = (s: RdsStack, laddr: string, faddr: string): RdsConnection =>
  s.connFor(laddr, faddr, s.transports.get('tcp')!);

describe('rails: several links to one peer', () => {
  it('a rail declared on both ends comes up after the handshake and shows in connections()', async () => {
    const { A, B, a, b, a1, b1, ra, rb } = await railPair();
    a.sendmsg(Buffer.from('hello'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => railUp(A, b1) && railUp(B, a1), 'rail UP on both ends');
    const pa = pathInfo(A, b1, 8)!;
    expect(pa).toMatchObject({ rail: true, source: ra, destination: rb, state: 'UP' });
    expect(pathInfo(B, a1, 8)).toMatchObject({ rail: true, source: rb, destination: ra });
    expect(pathInfo(A, b1, 0)).toMatchObject({ rail: false, source: a1, destination: b1 });
    expect(A.listRails()).toEqual([{ peer: b1, local: ra, remote: rb }]);
  });

  it('a rail whose address pair leads to another node is refused by both ends and reported', async () => {
    const { A, b, a, b1, n } = await railPair({}, {}, false);
    // C is a third node whose rail address is where A's rail to B points.
    const C = new RdsStack({ tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 20 });
    cleanups.push(() => C.close());
    const c1 = `127.132.${n}.3`;
    const rc = `127.132.${n + 1}.3`;
    const ra = `127.132.${n + 1}.1`;
    const sc = new RdsSocket({ stack: C });
    await sc.bind({ address: c1, port: 4000 });
    cleanups.push(() => sc.close());
    const seenA: { by: string; reason: string }[] = [];
    const seenC: { by: string; reason: string }[] = [];
    A.on('rail-refused', (ev) => seenA.push(ev));
    C.on('rail-refused', (ev) => seenC.push(ev));
    await C.addRail({ peer: `127.132.${n}.1`, local: rc, remote: ra });
    await A.addRail({ peer: b1, local: ra, remote: rc });
    a.sendmsg(Buffer.from('x'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => seenA.length > 0 && seenC.length > 0, 'refusals on both ends');
    expect(seenC[0]).toMatchObject({ by: 'local', reason: expect.stringContaining('another node') });
    expect(seenA[0]).toMatchObject({ by: 'peer', reason: expect.stringContaining('another node') });
    expect(A.counters.get('rail_refused')).toBeGreaterThan(0);
    expect(C.counters.get('rail_refused')).toBeGreaterThan(0);
    expect(pathInfo(A, b1, 8)?.state).not.toBe('UP');
    // The connection itself is unaffected.
    a.sendmsg(Buffer.from('y'), b.address());
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('y');
  });

  it('a kernel-like peer (no RDSSOCK_CAP_RAILS: acks off) never sees the rail; every policy sends on path 0', async () => {
    const { A, a, b, b1, a1 } = await railPair({ pathPolicy: 'round-robin' }, { rdsAcks: false });
    for (let i = 0; i < 5; i++) a.sendmsg(Buffer.from(`m${i}`), b.address());
    for (let i = 0; i < 5; i++) expect((await b.recv({ timeout: 5000 })).data.toString()).toBe(`m${i}`);
    const conn = internalConn(A, a1, b1);
    await until(() => conn.handshake.peer !== 'unknown', 'handshake settled');
    for (let port = 100; port < 110; port++) expect(conn.pathFor(port).index).toBe(0);
    expect(pathInfo(A, b1, 8)?.state ?? 'DOWN').toBe('DOWN');
    expect(A.counters.get('rail_refused')).toBe(0);
  });

  for (const [dead, live, what] of [
    [8, 0, 'the rail'],
    [0, 8, 'the primary path'],
  ] as const)
    it(`${what} held down mid-stream: its messages move to the other and back, no loss, no duplicate, order per socket`, async () => {
      const { A, B, a1, b1, mk } = await railPair({ pathPolicy: 'round-robin' });
      const senders = await Promise.all([0, 1, 2, 3].map((i) => mk(A, a1, 5000 + i)));
      const recv = await mk(B, b1, 6000);
      cleanups.push(async () => {
        for (const s of senders) await s.close();
        await recv.close();
      });
      const got = new Map<number, number[]>();
      let total = 0;
      const pump = (async () => {
        for (;;) {
          const m = await recv.recv({ timeout: 10000 });
          const [src, seq] = m.data.toString().split(':').map(Number) as [number, number];
          (got.get(src) ?? got.set(src, []).get(src)!).push(seq);
          if (++total === 4 * 300) return;
        }
      })();
      let sent = 0;
      const send = (k: number): void => {
        for (let j = 0; j < k; j++, sent++) {
          const i = sent % 4;
          senders[i]!.sendmsg(Buffer.from(`${i}:${Math.floor(sent / 4)}`), recv.address());
        }
      };
      send(4);
      await until(() => railUp(A, b1) && railUp(B, a1), 'rail up');
      // Let each socket settle on its path (round-robin spreads idle sockets over path 0 and the rail).
      await until(() => total >= 4, 'first messages');
      send(400);
      // The path dies: held down (as by an operator) so it cannot come back on its own. For the
      // rail the accepting end holds it (A's reconnects are refused in the rail hello); path 0 is
      // held by A (a path 0 the acceptor holds would come UP on A and be reset, again and again).
      const holder = dead === 8 ? B : A;
      const far = dead === 8 ? a1 : b1;
      const failovers: { path: number; to: number }[] = [];
      A.on('failover', (ev) => failovers.push(ev));
      holder.disconnectPath(far, dead);
      send(400);
      await until(() => (pathInfo(A, b1, dead)?.movedByFailover ?? 0) > 0, `path ${dead}'s messages moved`);
      expect(failovers[0]).toMatchObject({ path: dead, to: live });
      send(200);
      holder.reconnectPath(far, dead);
      await until(() => pathInfo(A, b1, dead)?.state === 'UP', 'path back');
      send(196);
      await pump;
      for (let i = 0; i < 4; i++) expect(got.get(i)).toEqual(Array.from({ length: 300 }, (_, k) => k));
      expect(A.counters.get('failover_moved')).toBeGreaterThan(0);
      // Back: new traffic uses it again.
      const before = pathInfo(A, b1, dead)!.sentMessages;
      for (let r = 0; r < 20; r++) {
        for (const s of senders) s.sendmsg(Buffer.from('z'), recv.address());
        for (let i = 0; i < 4; i++) await recv.recv({ timeout: 5000 });
      }
      expect(pathInfo(A, b1, dead)!.sentMessages).toBeGreaterThan(before);
    });

  it('removeRail at run time moves its messages at once and stops it; addRail brings it back', async () => {
    const { A, B, a, b, a1, b1, railA, railB } = await railPair({ pathPolicy: 'round-robin', failoverGraceMs: 60000 });
    a.sendmsg(Buffer.from('x'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => railUp(A, b1), 'rail up');
    expect(B.removeRail(railB)).toBe(true);
    expect(A.removeRail(railA)).toBe(true);
    expect(A.removeRail(railA)).toBe(false);
    expect(A.counters.get('rail_removed')).toBe(1);
    await until(() => pathInfo(A, b1, 8)?.state === 'DOWN', 'rail down');
    // Nothing goes to a removed rail: every socket sends on path 0 (failover grace is a minute here).
    const conn = internalConn(A, a1, b1);
    for (let port = 100; port < 110; port++) expect(conn.pathFor(port).index).toBe(0);
    for (let i = 0; i < 10; i++) a.sendmsg(Buffer.from(`r${i}`), b.address());
    for (let i = 0; i < 10; i++) expect((await b.recv({ timeout: 5000 })).data.toString()).toBe(`r${i}`);
    await B.addRail(railB);
    await A.addRail(railA);
    await until(() => railUp(A, b1) && railUp(B, a1), 'rail back up');
    expect(pathInfo(A, b1, 8)!.held).toBe(false);
  });

  it('a rail removed on the accepting end only: the dialler is refused (not declared), never taken for a connection', async () => {
    const { A, B, a, b, a1, b1, ra, railB } = await railPair();
    a.sendmsg(Buffer.from('x'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => railUp(A, b1) && railUp(B, a1), 'rail up');
    const refused: { by: string; reason: string }[] = [];
    A.on('rail-refused', (ev) => refused.push(ev));
    B.removeRail(railB);
    await until(() => refused.length > 0, 'A refused');
    expect(refused[0]).toMatchObject({ by: 'peer', reason: expect.stringContaining('no such rail is declared') });
    expect(B.counters.get('rail_refused')).toBeGreaterThan(0);
    expect(B.connections().some((c) => c.peerAddress === ra)).toBe(false);
    expect(pathInfo(A, b1, 8)!.state).not.toBe('UP');
  });

  it('removing a rail with messages queued on it moves them at once, whatever failoverGraceMs', async () => {
    const { A, B, a1, b1, railA, mk } = await railPair({ pathPolicy: 'round-robin', failoverGraceMs: 60000 });
    const s1 = await mk(A, a1, 5100);
    const s2 = await mk(A, a1, 5101);
    const r = await mk(B, b1, 6100);
    cleanups.push(async () => {
      await s1.close();
      await s2.close();
      await r.close();
    });
    s1.sendmsg(Buffer.from('w'), r.address());
    await r.recv({ timeout: 5000 });
    await until(() => railUp(A, b1), 'rail up');
    const conn = internalConn(A, a1, b1);
    // Place s2 on the rail, then stop the accepting end from reading... simply hold B's side down
    // first so the rail's queue cannot drain, then remove the rail on A.
    let railSender: RdsSocket | null = null;
    for (const s of [s1, s2]) if (conn.pathFor(s.address().port).index === 8) railSender = s;
    railSender ??= s2;
    B.disconnectPath(a1, 8);
    await until(() => pathInfo(A, b1, 8)?.state !== 'UP', 'rail dropped');
    for (let i = 0; i < 5; i++) railSender.sendmsg(Buffer.from(`q${i}`), r.address());
    A.removeRail(railA);
    for (let i = 0; i < 5; i++) expect((await r.recv({ timeout: 5000 })).data.toString()).toBe(`q${i}`);
  });
});

describe('path policies', () => {
  async function upPair(policy: 'hash' | 'round-robin' | 'min-inflight' | 'min-latency') {
    const p = await railPair({ pathPolicy: policy });
    p.a.sendmsg(Buffer.from('x'), p.b.address());
    await p.b.recv({ timeout: 5000 });
    await until(() => railUp(p.A, p.b1) && railUp(p.B, p.a1), 'rail up');
    const conn = internalConn(p.A, p.a1, p.b1);
    await until(() => conn.paths[0]!.tx.oldestUnacked() === undefined, 'path 0 idle');
    return { ...p, conn };
  }

  it('round-robin: idle sockets take the live paths in turn', async () => {
    const { conn } = await upPair('round-robin');
    const picks = [100, 101, 102, 103].map((p) => conn.pathFor(p).index);
    expect(new Set(picks)).toEqual(new Set([0, 8]));
    expect(picks[0]).not.toBe(picks[1]);
    expect(picks[1]).not.toBe(picks[2]);
  });

  it('a socket with a message in flight stays on its path (every policy but the default hash with no rails)', async () => {
    const { A, a, b, conn, a1 } = await upPair('round-robin');
    a.sendmsg(Buffer.from('in flight'), b.address());
    // Not yet acknowledged (the ack needs a turn of the event loop): the same path, every time.
    const first = conn.pathFor(a.address().port).index;
    expect(conn.paths[first]!.tx.oldestUnacked()).toBeDefined();
    for (let i = 0; i < 5; i++) expect(conn.pathFor(a.address().port).index).toBe(first);
    await b.recv({ timeout: 5000 });
    await until(() => conn.paths[first]!.tx.oldestUnacked() === undefined, 'acknowledged');
    // Idle again: round-robin moves it on.
    const next = conn.pathFor(a.address().port).index;
    expect(next).not.toBe(first);
    expect(A.pathPolicy(b_addr(conn))).toBe('round-robin');
    void a1;
  });

  it('a socket stays while any of its messages is in flight, not only the one it was placed with', async () => {
    const { a, b, conn } = await upPair('round-robin');
    const port = a.address().port;
    for (let i = 0; i < 3; i++) a.sendmsg(Buffer.from(`m${i}`), b.address());
    const p = conn.pathFor(port);
    const mine = [...p.tx.sendQueue, ...p.tx.retrans].filter((m) => m.sport === port && !m.done);
    expect(mine).toHaveLength(3);
    // The first two are acknowledged (as an ack would complete them); the third is not.
    mine[0]!.complete();
    mine[1]!.complete();
    for (let i = 0; i < 3; i++) expect(conn.pathFor(port)).toBe(p);
    // (The two completed by hand are never sent; the third arrives.)
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('m2');
  });

  it('a policy that starts mid-stream keeps messages sent before it in order (they hold the socket where they are)', async () => {
    // Two lanes, no rails, 'hash'; a socket's lane is held down with its messages queued there;
    // then the policy changes: the socket must not jump to the live lane ahead of them.
    const { A, a, b, a1, b1, mk } = await railPair({ npaths: 2 }, { npaths: 2 }, false);
    const c = await mk(A, a1, 7000);
    cleanups.push(() => c.close());
    a.sendmsg(Buffer.from('x'), b.address());
    await b.recv({ timeout: 5000 });
    // Lanes open on demand: once the path count is settled, a message from `a` opens its lane (1).
    const conn = internalConn(A, a1, b1);
    await until(() => conn.lanesMayConnect(), 'path count settled');
    expect(conn.pathFor(a.address().port).index).toBe(1);
    a.sendmsg(Buffer.from('y'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => tcpConn(A, b1).paths.filter((p) => p.state === 'UP').length === 2, 'two lanes up');
    const lane = conn.pathFor(c.address().port).index;
    A.disconnectPath(b1, lane);
    for (let i = 0; i < 5; i++) c.sendmsg(Buffer.from(`c${i}`), b.address());
    A.setPathPolicy('round-robin');
    for (let i = 5; i < 10; i++) c.sendmsg(Buffer.from(`c${i}`), b.address());
    // The held lane's messages move to the live one after failoverGraceMs, in order, then the rest.
    for (let i = 0; i < 10; i++) expect((await b.recv({ timeout: 5000 })).data.toString()).toBe(`c${i}`);
  });

  it('min-inflight: an idle socket goes to the path with the fewest unacknowledged bytes', async () => {
    const { a, b, conn, mk, A, a1 } = await upPair('min-inflight');
    const big = await mk(A, a1, 5200);
    cleanups.push(() => big.close());
    // Load the rail: place `big` there and queue 1 MiB on it, unacknowledged for now.
    const rail = conn.paths[8]!;
    let placed = conn.pathFor(big.address().port);
    expect(placed.index).toBe(0); // both empty: the first (lowest index) wins
    big.sendmsg(Buffer.alloc(1 << 20), b.address());
    // `big` now has bytes in flight on path 0: an idle socket goes to the rail.
    expect(conn.pathFor(a.address().port)).toBe(rail);
    placed = conn.pathFor(big.address().port);
    expect(placed.index).toBe(0); // in flight: it stays
  });

  it('min-latency: an idle socket goes to the path with the lowest recent acknowledgement latency', async () => {
    const { conn } = await upPair('min-latency');
    // Acknowledgement times as the send path records them: path 0 slow (40 ms), the rail fast (1 ms).
    const record = (p: RdsConnPath, ms: number, n: number): void => {
      for (let i = 0; i < n; i++) p.tx.latency.record(ms);
    };
    record(conn.paths[0]!, 40, 10);
    record(conn.paths[8]!, 1, 10);
    expect(conn.pathFor(300).index).toBe(8);
    expect(conn.pathFor(301).index).toBe(8);
    // The rail gets slow: new idle sockets go to path 0.
    record(conn.paths[8]!, 400, 50);
    expect(conn.pathFor(302).index).toBe(0);
  });

  it('hash: fixed per port, over the lanes and the live rails', async () => {
    const { conn } = await upPair('hash');
    const picks = Array.from({ length: 32 }, (_, i) => conn.pathFor(1000 + i).index);
    expect(new Set(picks)).toEqual(new Set([0, 8]));
    expect(Array.from({ length: 32 }, (_, i) => conn.pathFor(1000 + i).index)).toEqual(picks);
  });

  it('a per-peer policy overrides the stack one; bad names are refused', async () => {
    const { A, b1 } = await railPair({ pathPolicy: 'round-robin', peerPathPolicies: { '127.0.0.9': 'min-latency' } });
    expect(A.pathPolicy(b1)).toBe('round-robin');
    expect(A.pathPolicy('127.0.0.9')).toBe('min-latency');
    A.setPathPolicy('min-inflight', b1);
    expect(A.pathPolicy(b1)).toBe('min-inflight');
    A.setPathPolicy(null, b1);
    expect(A.pathPolicy(b1)).toBe('round-robin');
    expect(() => A.setPathPolicy('fastest' as never)).toThrow(/pathPolicy must be one of/);
    expect(() => new RdsStack({ pathPolicy: 'x' as never })).toThrow(/EINVAL/);
  });
});

describe("kernel peers keep the kernel's choice", () => {
  it('a 7.x kernel running 8 lanes: every policy sends each socket on the lane its port hashes to', async () => {
    const n = (net += 2);
    const [a1, k1] = [`127.132.${n}.1`, `127.132.${n}.2`];
    const peer = await RawListener.listen(k1, TEST_TCP_PORT, false);
    cleanups.push(() => peer.close());
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 20, pathPolicy: 'round-robin' });
    cleanups.push(() => A.close());
    const a = new RdsSocket({ stack: A });
    await a.bind({ address: a1, port: 4000 });
    cleanups.push(() => a.close());
    a.sendmsg(Buffer.from('x'), { address: k1, port: 4000 });
    const isProbe = (f: { header: w.RdsHeader }): boolean => f.header.sport === 1 && f.header.dport === 0;
    const kernel7 = (): Uint8Array =>
      w.packExtensions([w.npathsExtension(8), w.genNumExtension(0x7007), w.sportIdxExtension()]);
    const c = await peer.accept(0);
    await c.nextMatching(isProbe);
    c.send({ sequence: 1, sport: 0, dport: 1, exthdr: kernel7() });
    await c.nextMatching(isProbe);
    c.send({ sequence: 2, sport: 0, dport: 1, exthdr: kernel7() });
    await peer.accept(7);
    await until(() => tcpConn(A, k1).paths.filter((p) => p.state === 'UP').length === 8, '8 lanes up');
    const conn = internalConn(A, a1, k1);
    expect(conn.handshake.peer).toBe('kernel');
    const hashLane = (port: number): number => ((Math.imul(port, 0x9e3779b1) >>> 16) & 0xffff) % 8;
    for (let port = 2000; port < 2032; port++) expect(conn.pathFor(port).index).toBe(hashLane(port));
  });
});

describe('operator controls', () => {
  it('maxReconnectAttempts: the path goes to ERROR and stops; peer-down fires; the message stays; reconnect tries again', async () => {
    const n = (net += 2);
    const a1 = `127.132.${n}.1`;
    const b1 = `127.132.${n}.2`;
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 5, maxReconnectAttempts: 3, peerDownMs: 50 });
    cleanups.push(() => A.close());
    const a = new RdsSocket({ stack: A });
    await a.bind({ address: a1, port: 4000 });
    cleanups.push(() => a.close());
    const downs: string[] = [];
    A.on('peer-down', (ev) => downs.push(ev.address));
    a.sendmsg(Buffer.from('waits'), { address: b1, port: 4000 });
    await until(() => pathInfo(A, b1, 0)?.state === 'ERROR', 'path 0 in ERROR');
    expect(A.counters.get('conn_reconnect_exhausted')).toBe(1);
    expect(pathInfo(A, b1, 0)!.connectFailures).toBe(3);
    await until(() => downs.includes(b1), 'peer-down');
    // It stays in ERROR (no more attempts) with the message queued.
    await new Promise((r) => setTimeout(r, 100));
    expect(pathInfo(A, b1, 0)).toMatchObject({ state: 'ERROR', connectFailures: 3 });
    expect(A.peers().find((p) => p.address === b1)).toMatchObject({ state: 'down', queuedMessages: 1 });
    // The peer appears; the operator asks for a reconnect: the message arrives.
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: b1, port: 4000 });
    cleanups.push(() => b.close());
    A.reconnectPath(b1, 0);
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('waits');
    expect(() => A.reconnectPath('127.132.250.250', 0)).toThrow(/ENOENT/);
  });

  it('disconnectPath holds a path down until reconnectPath; resetStats zeroes counters and path figures', async () => {
    const { A, a, b, a1, b1 } = await railPair();
    a.sendmsg(Buffer.from('x'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => railUp(A, b1), 'rail up');
    A.disconnectPath(b1, 8);
    expect(pathInfo(A, b1, 8)).toMatchObject({ state: 'DOWN', held: true });
    await new Promise((r) => setTimeout(r, 100));
    expect(pathInfo(A, b1, 8)!.state).toBe('DOWN');
    A.reconnectPath(b1, 8);
    await until(() => railUp(A, b1), 'rail up again');
    expect(pathInfo(A, b1, 8)!.upCount).toBe(2);
    expect(A.counters.get('send_queued')).toBeGreaterThan(0);
    A.resetStats();
    expect(A.counters.get('send_queued')).toBe(0);
    expect(pathInfo(A, b1, 0)).toMatchObject({ sentMessages: 0, upCount: 0, sentBytes: 0 });
    expect(pathInfo(A, b1, 8)).toMatchObject({ upCount: 0, state: 'UP' });
    a.sendmsg(Buffer.from('y'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => tcpConn(A, b1).paths.reduce((s, p) => s + p.sentMessages, 0) === 1, 'one message counted');
    void a1;
  });

  it('rds-info -R shows lanes and rails with their addresses and figures (dist/ built)', async () => {
    const { A, a, b, b1, ra, rb } = await railPair();
    a.sendmsg(Buffer.from('x'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => railUp(A, b1), 'rail up');
    const path = await A.openControl(`/tmp/rds-rails-${process.pid}-${net}.sock`);
    const cli = fileURLToPath(new URL('../dist/cli/rds-info.js', import.meta.url));
    const out = await runNode([cli, '--socket', path, '-R'], 30000);
    expect(out.code).toBe(0);
    expect(out.out).toMatch(/RDS Paths and Rails:/);
    expect(out.out).toMatch(new RegExp(`\\s0\\s+lane\\s+\\S+\\s+${b1.replace(/\./g, '\\.')}\\s+UP`));
    expect(out.out).toMatch(
      new RegExp(`\\s8\\s+rail\\s+${ra.replace(/\./g, '\\.')}\\s+${rb.replace(/\./g, '\\.')}\\s+UP`),
    );
  });

  it('rails declared with the stack option come up like addRail ones', async () => {
    const n = (net += 2);
    const [a1, b1, ra, rb] = [`127.132.${n}.1`, `127.132.${n}.2`, `127.132.${n + 1}.1`, `127.132.${n + 1}.2`];
    const common = { tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 20, npaths: 1 };
    const A = new RdsStack({ ...common, rails: [{ peer: b1, local: ra, remote: rb }] });
    const B = new RdsStack({ ...common, rails: [{ peer: a1, local: rb, remote: ra }] });
    cleanups.push(
      () => A.close(),
      () => B.close(),
    );
    const a = new RdsSocket({ stack: A });
    await a.bind({ address: a1, port: 4000 });
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: b1, port: 4000 });
    cleanups.push(
      () => a.close(),
      () => b.close(),
    );
    expect(A.listRails()).toEqual([{ peer: b1, local: ra, remote: rb }]);
    await until(() => B.listRails().length === 1, 'B listening on its rail address');
    a.sendmsg(Buffer.from('x'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => railUp(A, b1) && railUp(B, a1), 'rail UP');
  });

  it('garbage on a rail address is refused and counted, and the rail still works', async () => {
    const { A, B, a, b, b1, ra, rb } = await railPair();
    const garbage = Buffer.alloc(48, 0xff); // h_len 0xffffffff: far beyond a rail hello
    await new Promise<void>((resolve) => {
      const s = connect({ host: rb, port: TEST_TCP_PORT, localAddress: ra }, () => s.write(garbage));
      s.on('error', () => {});
      s.on('close', () => resolve());
    });
    expect(B.counters.get('rail_refused')).toBe(1);
    a.sendmsg(Buffer.from('x'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => railUp(A, b1), 'rail UP');
  });

  it('addRail checks its arguments', async () => {
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanups.push(() => A.close());
    await expect(A.addRail({ peer: 'x', local: '127.0.0.1', remote: '127.0.0.2' })).rejects.toThrow(/EINVAL.*peer/);
    await expect(A.addRail({ peer: '127.0.0.3', local: '127.0.0.1', remote: '127.0.0.1' })).rejects.toThrow(/differ/);
    expect(() => new RdsStack({ rails: {} as never })).toThrow(/rails must be an array/);
  });
});

function b_addr(conn: RdsConnection): string {
  return conn.faddr;
}
