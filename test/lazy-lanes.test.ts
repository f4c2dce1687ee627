import { queryObjects } from 'node:v8';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, type RdsStack, constants, type ConnectionInfo } from '../lib/index.js';
import { Handshake } from '../lib/core/handshake.js';
import { RdsConnPath } from '../lib/core/path.js';
import { portHash } from '../lib/core/ext/path-policy.js';
import { tcpPath } from '../lib/transports/tcp-carrier.js';
import { payload, proxiedStacks, until } from './helpers.js';

/** Stacks that play an rds-socket node from before lanes opened on demand (no RDSSOCK_CAP_LAZY_LANES). */
const oldPeers = new WeakSet<object>();
const localCaps = Handshake.prototype.localCaps;
Handshake.prototype.localCaps = function (this: Handshake): number {
  const caps = localCaps.call(this);
  const stack = (this as unknown as { conn: { stack: object } }).conn.stack;
  return oldPeers.has(stack) ? caps & ~constants.RDSSOCK_CAP_LAZY_LANES : caps;
};

// Lanes > 0 open on demand (RDSSOCK_CAP_LAZY_LANES): an idle peer costs one carrier, a lane
// connects when a socket that uses it first has something to send. Addresses 127.155.x.y.

let cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});
let sub = 0;

type Opts = { failoverGraceMs?: number; oldPeer?: boolean };

/** A on .1 (the smaller address: it initiates), B on .2; optionally A dials through a proxy. */
async function pair(optsA: Opts = {}, optsB: Opts = {}, viaProxy = false) {
  const base = `127.155.${++sub}`;
  const stackOpts = (o: Opts) => (o.failoverGraceMs === undefined ? {} : { failoverGraceMs: o.failoverGraceMs });
  const { A, B, proxy } = await proxiedStacks(base, stackOpts(optsA), stackOpts(optsB), viaProxy, (c) =>
    cleanups.push(c),
  );
  // An rds-socket node from before lanes opened on demand: it does not advertise the bit.
  if (optsA.oldPeer) oldPeers.add(A);
  if (optsB.oldPeer) oldPeers.add(B);
  const mk = async (stack: RdsStack, host: string, port: number): Promise<RdsSocket> => {
    const s = new RdsSocket({ stack });
    await s.bind({ address: `${base}.${host}`, port });
    s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 8 << 20);
    return s;
  };
  return { A, B, base, proxy, mk, a: await mk(A, '1', 4000), b: await mk(B, '2', 4000) };
}

/**
 * Every socket of `socks` sends messages 0..n-1 (of size(i) bytes) to `to` at once; `to` must
 * receive n from each, in order per socket.
 */
async function sendInOrder(socks: RdsSocket[], to: RdsSocket, n: number, size: (i: number) => number): Promise<void> {
  for (let i = 0; i < n; i++) for (const s of socks) s.sendmsg(payload(i, size(i)), to.address());
  const next = new Map<number, number>();
  for (let k = 0; k < n * socks.length; k++) {
    const m = await to.recv({ timeout: 10000 });
    const want = next.get(m.port) ?? 0;
    expect(m.data.readUInt32BE(0)).toBe(want);
    next.set(m.port, want + 1);
  }
}

const info = (s: RdsStack): ConnectionInfo => s.connections().find((c) => c.transport === 'tcp')!;
const upLanes = (s: RdsStack): number[] =>
  info(s)
    .paths.filter((p) => p.state === 'UP')
    .map((p) => p.index);

/** The lane a socket bound to `port` on `from` uses towards `to` (once the path count is settled). */
function laneFor(st: RdsStack, from: string, to: string, port: number): number {
  return st.connFor(from, to, st.transports.get('tcp')!).pathFor(port).index;
}

/** Ports (from 5000 up) whose sockets use `lane`, and one that uses lane 0 (for the handshake). */
function portsOnLane(st: RdsStack, from: string, to: string, lane: number, count: number): number[] {
  const out: number[] = [];
  for (let port = 5000; out.length < count && port < 6000; port++)
    if (laneFor(st, from, to, port) === lane) out.push(port);
  expect(out).toHaveLength(count);
  return out;
}

/** Settles the path count with one message from a lane-0 socket of `from` and waits for it. */
async function handshake(from: RdsStack, sender: RdsSocket, to: RdsSocket, other: RdsStack): Promise<void> {
  sender.sendmsg(Buffer.from('hello'), to.address());
  expect((await to.recv({ timeout: 5000 })).data.toString()).toBe('hello');
  await until(() => info(from).npaths === 8 && info(other).npaths === 8, 'npaths 8');
}

describe('lanes open on demand', () => {
  it('an idle connection with 8 paths negotiated keeps only path 0 up', async () => {
    const { A, B, a, b, base } = await pair();
    await handshake(A, a, b, B);
    // Lanes that open with the path count start connecting as path 0 sees the peer's pong.
    const p0 = (st: RdsStack, from: string, to: string) =>
      st.connFor(`${base}.${from}`, `${base}.${to}`, st.transports.get('tcp')!).paths[0]!;
    await until(() => p0(A, '1', '2').peerPongSeen && p0(B, '2', '1').peerPongSeen, 'pongs on path 0');
    await a.flush({ timeout: 5000 });
    for (const st of [A, B])
      expect(info(st).paths.map((p) => p.state)).toEqual(['UP', ...Array<string>(7).fill('DOWN')]);
  });

  it('initiator: sockets that all hash to lane 3 open only paths 0 and 3, in order per socket', async () => {
    const { A, B, a, b, mk, base } = await pair();
    await handshake(A, a, b, B);
    const ports = portsOnLane(A, `${base}.1`, `${base}.2`, 3, 3);
    const socks = await Promise.all(ports.map((p) => mk(A, '1', p)));
    const N = 200;
    // Queued at once, before lane 3 is up: they wait on their lane while it connects.
    await sendInOrder(socks, b, N, (i) => 100 + ((i * 37) % 1500));
    for (const s of socks) await s.flush({ timeout: 10000 });
    expect(upLanes(A)).toEqual([0, 3]);
    expect(upLanes(B)).toEqual([0, 3]);
    expect(info(A).paths[3]!.sentMessages).toBe(N * socks.length);
  });

  it('acceptor: the larger side pokes for lane 3 and the initiator opens only that lane', async () => {
    const { A, B, a, b, mk, base } = await pair();
    await handshake(A, a, b, B);
    const pokesBefore = A.counters.get('conn_poke_received');
    const ports = portsOnLane(B, `${base}.2`, `${base}.1`, 3, 2);
    const socks = await Promise.all(ports.map((p) => mk(B, '2', p)));
    const N = 100;
    await sendInOrder(socks, a, N, () => 300);
    expect(A.counters.get('conn_poke_received')).toBeGreaterThan(pokesBefore);
    expect(upLanes(A)).toEqual([0, 3]);
    expect(upLanes(B)).toEqual([0, 3]);
    expect(info(B).paths[3]!.sentMessages).toBe(N * socks.length);
    expect(B.counters.get('failover_moved')).toBe(0);
  });

  it('a lane that cannot open in time: its messages fail over to path 0, none lost, order kept', async () => {
    const { A, B, a, b, mk, base, proxy } = await pair({ failoverGraceMs: 100 }, { failoverGraceMs: 100 }, true);
    await handshake(A, a, b, B);
    proxy!.cutLane(3);
    const ports = portsOnLane(B, `${base}.2`, `${base}.1`, 3, 2);
    const socks = await Promise.all(ports.map((p) => mk(B, '2', p)));
    const N = 50;
    await sendInOrder(socks, a, N, () => 200);
    expect(B.counters.get('failover_moved')).toBeGreaterThan(0);
    expect(info(B).paths[3]!.state).not.toBe('UP');
    // Once the lane may open, the sockets go back to it, behind what went ahead on path 0.
    proxy!.cutLane(3, false);
    for (const s of socks) s.sendmsg(payload(N, 200), a.address());
    for (let k = 0; k < socks.length; k++) {
      const m = await a.recv({ timeout: 10000 });
      expect(m.data.readUInt32BE(0)).toBe(N);
    }
    await until(() => info(B).paths[3]!.state === 'UP', 'lane 3 up');
    expect(upLanes(A)).toEqual([0, 3]);
  });

  it('a peer without RDSSOCK_CAP_LAZY_LANES gets every lane opened by the initiator, as before', async () => {
    const { A, B, a, b } = await pair({}, { oldPeer: true });
    await handshake(A, a, b, B);
    await until(() => upLanes(A).length === 8 && upLanes(B).length === 8, '8 lanes up');
  });

  it('an initiator without RDSSOCK_CAP_LAZY_LANES is never poked for a lane: it opens them all itself', async () => {
    const { A, B, a, b } = await pair({ oldPeer: true }, {});
    await handshake(A, a, b, B);
    await until(() => upLanes(A).length === 8 && upLanes(B).length === 8, '8 lanes up');
    expect(A.counters.get('conn_poke_received')).toBe(0);
  });
});

describe('path objects of an idle connection', () => {
  it('with 8 paths negotiated, only the lanes used have a path object (a lane is made at first use)', async () => {
    // Path objects alive in the heap (counted after a full GC), made by either stack.
    const count = () => queryObjects(RdsConnPath, { format: 'count' }) as number;
    const before = count();
    const { A, B, a, b, mk, base } = await pair();
    await handshake(A, a, b, B);
    // One message from a socket whose port hashes to lane 3 (the 'hash' policy: portHash % npaths),
    // then the connection is idle.
    let port = 5000;
    while (portHash(port) % 8 !== 3) port++;
    const s = await mk(A, '1', port);
    s.sendmsg(Buffer.from('on lane 3'), b.address());
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('on lane 3');
    await s.flush({ timeout: 5000 });
    await until(() => upLanes(B).includes(3), 'lane 3 up at B');
    expect(upLanes(A)).toEqual([0, 3]);
    expect(info(A).paths[3]!.sentMessages).toBe(1);
    // Two connections (A to B, B to A): paths 0 and 3 each, not 8 each.
    expect(count() - before).toBeLessThanOrEqual(4);
    for (const [st, from, to] of [
      [A, '1', '2'],
      [B, '2', '1'],
    ] as const) {
      const conn = st.connFor(`${base}.${from}`, `${base}.${to}`, st.transports.get('tcp')!);
      expect(conn.npaths).toBe(8);
      expect(conn.madePaths().map((p) => p.index)).toEqual([0, 3]);
      // What rds-info shows is unchanged: every lane in use, those never made as fresh DOWN ones.
      expect(info(st).paths.map((p) => [p.index, p.state, p.upCount])).toEqual(
        [0, 1, 2, 3, 4, 5, 6, 7].map((i) => [i, i === 0 || i === 3 ? 'UP' : 'DOWN', i === 0 || i === 3 ? 1 : 0]),
      );
      expect(conn.madePaths()).toHaveLength(2);
    }
  });
});

describe('read memory of an idle carrier', () => {
  it('after an exchange, neither side keeps a 64 KiB read slab for the quiet connection', async () => {
    const { A, B, a, b, base } = await pair();
    await handshake(A, a, b, B);
    for (let i = 0; i < 20; i++) {
      a.sendmsg(payload(i, 3000), b.address());
      expect((await b.recv({ timeout: 5000 })).data.readUInt32BE(0)).toBe(i);
      b.sendmsg(payload(i, 10), a.address());
      expect((await a.recv({ timeout: 5000 })).data.readUInt32BE(0)).toBe(i);
    }
    await a.flush({ timeout: 5000 });
    await b.flush({ timeout: 5000 });
    const reader = (st: RdsStack, from: string, to: string) => {
      return tcpPath(st.connFor(`${base}.${from}`, `${base}.${to}`, st.transports.get('tcp')!).paths[0]!).reader!;
    };
    // The acks and read reports that end the exchange arrive last; then both readers are quiet.
    await until(
      () => reader(A, '1', '2').slabBytes <= 2048 && reader(B, '2', '1').slabBytes <= 2048,
      'small read slabs',
    );
    expect(reader(A, '1', '2').idle).toBe(true);
  });
});
