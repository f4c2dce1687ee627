import { createServer, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants } from '../lib/index.js';
import type { RdsConnection } from '../lib/core/connection.js';
import { tcpPath } from '../lib/transports/tcp-carrier.js';
import { socketFd } from '../lib/transports/tcp-socket.js';
import { native } from '../lib/native.js';
import { TEST_TCP_PORT, until } from './helpers.js';
import { RawListener, rawConnect, type RawConn, kernelMap } from './raw-peer.js';

// Loopback addresses 127.217.x.y belong to this file.
const P = TEST_TCP_PORT;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function node(address: string, port = 4000): Promise<{ stack: RdsStack; sock: RdsSocket }> {
  const stack = new RdsStack({ tcpPort: P, reconnectMaxDelayMs: 50 });
  cleanups.push(() => stack.close());
  const sock = new RdsSocket({ stack });
  await sock.bind({ address, port });
  return { stack, sock };
}

/** User messages (not maps, probes, pongs or hellos) numbered by their first byte, until `want` are in. */
async function collect(c: RawConn, want: number[]): Promise<{ index: number; flags: number; seq: number }[]> {
  const got: { index: number; flags: number; seq: number }[] = [];
  while (got.length < want.length) {
    const f = await c.nextUser(10_000);
    got.push({ index: f.payload[0]!, flags: f.header.flags, seq: Number(f.header.sequence) });
  }
  return got;
}

function retrans(stack: RdsStack): number {
  return stack.connections().reduce((a, c) => a + c.paths.reduce((b, p) => b + p.retransQueue, 0), 0);
}

/**
 * The 6.1 kernel's accept race (spec §3.5-3.6): its TCP acknowledges what arrives on a new
 * connection, and its RDS then resets the connection without reading it. Here a kernel-like peer
 * reads (so TCP acknowledges) every byte of one connection, sends nothing, and resets it. What
 * rds-socket sent on that connection must come again, RETRANSMITTED, on the next one.
 */
async function acceptRace(stack: RdsStack, sock: RdsSocket, peer: string, next: () => Promise<RawConn>): Promise<void> {
  const dst = { address: peer, port: 4000 };
  for (let i = 0; i < 5; i++) sock.sendmsg(Buffer.from([i, 1, 2, 3]), dst);
  const c0 = await next();
  kernelMap(c0);
  expect((await collect(c0, [0, 1, 2, 3, 4])).map((m) => m.index)).toEqual([0, 1, 2, 3, 4]);
  // A proven carrier: what TCP acknowledged is released.
  await until(() => retrans(stack) === 0, 'messages on a proven carrier released').catch((e) => {
    throw new Error(`${(e as Error).message}: ${JSON.stringify(stack.connections())}`);
  });
  c0.sock.resetAndDestroy();

  const c1 = await next();
  c1.kernelLike = false; // a kernel that resets the connection unread answers nothing on it
  for (let i = 5; i < 10; i++) sock.sendmsg(Buffer.from([i, 1, 2, 3]), dst);
  const seen = await collect(c1, [5, 6, 7, 8, 9]);
  expect(seen.map((m) => m.index)).toEqual([5, 6, 7, 8, 9]);
  // Everything is read, so TCP has acknowledged it; without a frame from the peer none of it may
  // be released. (Bounded: before the fix the release came within a few ms of polling.)
  await until(() => retrans(stack) === 0, 'release', 500).catch(() => undefined);
  expect(retrans(stack)).toBeGreaterThanOrEqual(5);
  c1.sock.resetAndDestroy();

  const c2 = await next();
  kernelMap(c2);
  const again = await collect(c2, [5, 6, 7, 8, 9]);
  expect(again.map((m) => m.index)).toEqual([5, 6, 7, 8, 9]);
  expect(again.map((m) => m.seq)).toEqual(seen.map((m) => m.seq));
  for (const m of again) expect(m.flags & 4, 'RETRANSMITTED').toBe(4);
  await until(() => retrans(stack) === 0, 'released once the new carrier is proven');
}

describe('kernel peers: release on TCP acknowledgement only on a carrier the kernel took', () => {
  it('rds-socket connecting (smaller address): messages on a connection reset unread are resent', async () => {
    const listener = await RawListener.listen('127.217.0.2', P);
    cleanups.push(() => listener.close());
    const { stack, sock } = await node('127.217.0.1');
    let n = 0;
    await acceptRace(stack, sock, '127.217.0.2', () => listener.accept(n++, 10_000));
  });

  it('rds-socket accepting (larger address): messages on a connection reset unread are resent', async () => {
    const { stack, sock } = await node('127.217.1.2');
    const conns: RawConn[] = [];
    cleanups.push(() => conns.forEach((c) => c.sock.destroy()));
    await acceptRace(stack, sock, '127.217.1.1', async () => {
      // As a kernel: connect once the previous connection is gone here too.
      await until(() => stack.connections()[0]?.paths[0]?.state !== 'UP', 'the previous connection gone');
      const c = await rawConnect('127.217.1.1', '127.217.1.2', P);
      conns.push(c);
      return c;
    });
  });
});

describe('kernel peers: a carrier being torn down releases nothing (#40)', () => {
  it('messages TCP had not acknowledged when the socket was destroyed are resent, not released', async () => {
    const listener = await RawListener.listen('127.217.5.2', P);
    cleanups.push(() => listener.close());
    const { stack, sock } = await node('127.217.5.1');
    sock.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 64 << 20);
    const dst = { address: '127.217.5.2', port: 4000 };
    const N = 600;
    const body = (i: number): Buffer => Buffer.alloc(16 << 10, i & 0xff);
    sock.sendmsg(body(0), dst);
    const c0 = await listener.accept(0, 10_000);
    kernelMap(c0); // a carrier the kernel took: TCP's acknowledgement now releases
    await collect(c0, [0]);
    // The peer stops reading: its receive window fills and the rest of 9.6 MB waits, part of it
    // in our kernel's send queue (written: those writes' callbacks have run; not acknowledged).
    c0.sock.pause();
    for (let i = 1; i < N; i++) sock.sendmsg(body(i), dst);
    const path = (): { retransQueue: number; sendQueue: number } => stack.connections()[0]!.paths[0]!;
    const conn = [...(stack as unknown as { conns: { values(): Iterable<RdsConnection> } }).conns.values()][0]!;
    const carrier = tcpPath(conn.path(0)!).sock!;
    const outq = (): number => native()!.tcpOutq(socketFd(carrier));
    await until(() => outq() > 4 * body(0).length, 'whole messages written and unacknowledged', 10_000);
    // Messages from the socket only: the queues may hold a congestion map update too (the
    // proven carrier queues one), which is no user message and is not collected.
    const user = (q: Iterable<{ done: boolean; fromSocket: boolean }>): number =>
      [...q].filter((m) => !m.done && m.fromSocket).length;
    const cp0 = conn.path(0)!;
    const held = user(cp0.tx.retrans);
    const queued = user(cp0.tx.sendQueue);
    expect(held).toBeGreaterThan(1);
    // As Node does when the peer resets the connection: the socket is destroyed (its descriptor
    // gone) before 'close' tells the path, and a write that completed just before calls back in
    // between. Any release attempt then must release nothing.
    carrier.destroy();
    conn.transport.capabilitiesChanged?.(conn);
    expect(user(cp0.tx.retrans), 'released while the carrier was being torn down').toBe(held);
    c0.sock.destroy();
    // The next carrier gets them again, RETRANSMITTED, in order, then those never sent.
    const c1 = await listener.accept(1, 10_000);
    kernelMap(c1);
    const want = [...Array(held + queued).keys()].map((k) => N - held - queued + k);
    const again = await collect(c1, want);
    expect(again.map((m) => m.index)).toEqual(want.map((i) => i & 0xff));
    expect(again.map((m) => m.flags & 4)).toEqual(want.map((_, k) => (k < held ? 4 : 0)));
    await until(() => path().retransQueue === 0, 'released once acknowledged on the new carrier');
  });
});

describe('kernel peers: a connection our TCP has acknowledged data on is never reset unread', () => {
  it('rds-socket accepting: a new connection while the old one still looks alive (its RST was lost) replaces it', async () => {
    const { stack, sock } = await node('127.217.4.2');
    const c0 = await rawConnect('127.217.4.1', '127.217.4.2', P);
    cleanups.push(() => c0.sock.destroy());
    kernelMap(c0);
    c0.send({ sequence: 1, sport: 5000, dport: 4000 }, Buffer.from([0]));
    expect((await sock.recv({ timeout: 10_000 })).data).toEqual(Buffer.from([0]));
    expect(stack.connections()[0]!.paths[0]!.state).toBe('UP');
    const drops: { path: number; reason: string }[] = [];
    stack.on('drop', (e) => drops.push({ path: e.path, reason: e.reason }));
    const resets = stack.counters.get('conn_reset');
    // The kernel gave up c0 (we never heard), connected again and sent at once: our TCP
    // acknowledges these bytes whatever we do next, and the kernel then releases the messages.
    const c1 = await rawConnect('127.217.4.1', '127.217.4.2', P);
    cleanups.push(() => c1.sock.destroy());
    kernelMap(c1);
    c1.send({ sequence: 2, sport: 5000, dport: 4000 }, Buffer.from([1]));
    c1.send({ sequence: 3, sport: 5000, dport: 4000 }, Buffer.from([2]));
    expect((await sock.recv({ timeout: 10_000 })).data).toEqual(Buffer.from([1]));
    expect((await sock.recv({ timeout: 10_000 })).data).toEqual(Buffer.from([2]));
    await c0.waitClosed();
    expect(c1.closed).toBe(false);
    expect(stack.counters.get('tcp_accept_no_free_path')).toBe(0);
    // The old carrier is gone: operators (and applications that ping on 'drop') hear of it once,
    // as of any other loss of a connection, and it counts as a reset as in the kernel.
    expect(drops).toEqual([{ path: 0, reason: expect.stringContaining('replaced') }]);
    expect(stack.counters.get('conn_reset')).toBe(resets + 1);
  });
});

describe('reconnect backoff', () => {
  /** A peer at `address` that accepts RDS/TCP connections and handles each with `onConn`. */
  async function tcpPeer(address: string, onConn: (s: Socket, n: number) => void): Promise<{ accepts: number[] }> {
    const accepts: number[] = [];
    const server = createServer((s) => {
      s.on('error', () => {});
      accepts.push(Date.now());
      onConn(s, accepts.length - 1);
    });
    await new Promise<void>((res, rej) => {
      server.once('error', rej);
      server.listen({ host: address, port: P }, () => res());
    });
    cleanups.push(() => new Promise<void>((res) => server.close(() => res())));
    return { accepts };
  }

  it('a peer that accepts and resets at once sees attempts spaced by a growing backoff, not a storm', async () => {
    // Reset once the first bytes arrive (as a 6.1 kernel's accept race does): the connection was up.
    const peer = await tcpPeer('127.217.2.2', (s) => s.once('data', () => s.resetAndDestroy()));
    const stack = new RdsStack({ tcpPort: P }); // kernel defaults: 1 ms growing to 1000 ms
    const sock = new RdsSocket({ stack });
    await sock.bind({ address: '127.217.2.1', port: 4000 });
    sock.sendmsg(Buffer.from('x'), { address: '127.217.2.2', port: 4000 });
    await until(() => peer.accepts.length > 0, 'the first connection');
    const t0 = peer.accepts[0]!;
    // A time window, not a synchronisation: count the connections made in 2.5 s.
    await new Promise((r) => setTimeout(r, 2500));
    await stack.close();
    const inWindow = peer.accepts.filter((t) => t - t0 < 2500);
    // Delays drawn from [0, 1), [0, 2), [0, 4) ... [0, 1000) ms: about a dozen in 2.5 s, never
    // near the hundreds an immediate reconnect after each reset makes.
    expect(inWindow.length).toBeGreaterThanOrEqual(3);
    expect(inWindow.length).toBeLessThanOrEqual(40);
    // And the gaps grow: the last attempts are further apart than the first ones.
    const gaps = inWindow.slice(1).map((t, i) => t - inWindow[i]!);
    const firstGaps = gaps.slice(0, 3).reduce((a, b) => a + b, 0);
    const lastGaps = gaps.slice(-3).reduce((a, b) => a + b, 0);
    expect(lastGaps).toBeGreaterThan(firstGaps);
  });

  it('a connection that stayed up resets the backoff: its loss reconnects at once, as in the kernel', async () => {
    let stayed: Socket | null = null;
    const peer = await tcpPeer('127.217.3.2', (s, n) => {
      if (n < 4)
        s.once('data', () => s.resetAndDestroy()); // quick deaths build up a backoff (100, 200, 400 ms)
      else if (n === 4) stayed = s.resume();
      else s.resume();
    });
    const stack = new RdsStack({ tcpPort: P, reconnectMinDelayMs: 100, reconnectMaxDelayMs: 400 });
    cleanups.push(() => stack.close());
    const sock = new RdsSocket({ stack });
    await sock.bind({ address: '127.217.3.1', port: 4000 });
    sock.sendmsg(Buffer.from('x'), { address: '127.217.3.2', port: 4000 });
    await until(() => stayed !== null, 'a connection that stays', 10_000);
    await until(() => stack.connections()[0]?.paths[0]?.state === 'UP', 'UP');
    // Up longer than the stability time (the 400 ms maximum backoff here) ...
    await new Promise((r) => setTimeout(r, 600));
    const resetAt = Date.now();
    (stayed as Socket | null)!.resetAndDestroy();
    // ... so its loss is followed by an immediate reconnect, not one drawn from [0, 400) ms.
    await until(() => peer.accepts.length >= 6, 'the reconnect', 5000);
    expect(peer.accepts[5]! - resetAt).toBeLessThan(150);
  });
});
