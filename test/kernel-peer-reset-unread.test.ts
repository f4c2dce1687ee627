import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, wire } from '../lib/index.js';
import { TEST_TCP_PORT, until } from './helpers.js';
import { RawListener, rawConnect, kernelMap } from './raw-peer.js';

// Loopback addresses 127.218.x.y belong to this file.
const P = TEST_TCP_PORT;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/**
 * A kernel sender releases a message once our TCP has acknowledged it (spec §2.4). When the
 * kernel then resets the connection before our node has read those bytes (its event loop was
 * held), they are still in our socket's receive queue: the reset does not discard them, only
 * closing the descriptor does. Node destroys a socket whose write fails (ECONNRESET, EPIPE),
 * closing the descriptor before libuv reads what is queued (issue #40: the first messages of
 * four kernel senders lost after the test's senders held the loop for 35 s).
 */
describe('kernel peers: bytes our TCP acknowledged before the kernel reset the connection (#40)', () => {
  it('a write failing on the reset does not lose what is queued unread: every message is delivered', async () => {
    const listener = await RawListener.listen('127.218.0.2', P);
    cleanups.push(() => listener.close());
    const stack = new RdsStack({ tcpPort: P, reconnectMaxDelayMs: 50 });
    cleanups.push(() => stack.close());
    const sock = new RdsSocket({ stack });
    await sock.bind({ address: '127.218.0.1', port: 4000 });
    const dst = { address: '127.218.0.2', port: 4000 };
    sock.sendmsg(Buffer.from('first'), dst);
    const c0 = await listener.accept(0, 10_000);
    kernelMap(c0);
    expect((await c0.nextUser(10_000)).payload).toEqual(Buffer.from('first'));
    // One synchronous section, as a node whose event loop is held: the kernel sends K messages
    // (one segment, sent at once: loopback delivers it to our socket before the write returns)
    // and resets the connection; our application then sends, and the carrier's write fails on
    // the reset before the loop ever polls the socket for reading.
    const K = 20;
    c0.sock.setNoDelay(true);
    c0.sock.cork();
    for (let i = 0; i < K; i++) c0.send({ sequence: 100 + i, sport: 5000, dport: 4000 }, Buffer.from([i, 7, 7]));
    c0.sock.uncork();
    c0.sock.resetAndDestroy();
    sock.sendmsg(Buffer.from('after the reset'), dst);

    const got: number[] = [];
    for (let i = 0; i < K; i++) {
      const m = await sock.recv({ timeout: 5000 }).catch(() => null);
      if (m === null) break;
      expect(m.address).toBe('127.218.0.2');
      got.push(m.data[0]!);
    }
    expect(got, 'messages queued in our socket before the reset').toEqual([...Array(K).keys()]);
    // The path comes back on a new connection and the message sent after the reset gets there.
    const c1 = await listener.accept(1, 10_000);
    kernelMap(c1);
    expect((await c1.nextUser(10_000)).payload).toEqual(Buffer.from('after the reset'));
    expect(sock.recvmsg()).toBeNull();
  });
});

/**
 * A node whose event loop was held past frameTimeoutMs runs the frame's timer before the poll
 * that reads the rest of the frame, which had come meanwhile: the frame must not be taken for a
 * stalled one (the connection reset, and what our TCP acknowledged after it lost with it).
 */
describe('a frame completed while the event loop was held (#40)', () => {
  it('is delivered, not dropped by its timeout before the poll that reads it', async () => {
    const frameTimeoutMs = 300;
    const listener = await RawListener.listen('127.218.1.2', P);
    cleanups.push(() => listener.close());
    const stack = new RdsStack({ tcpPort: P, reconnectMaxDelayMs: 50, frameTimeoutMs });
    cleanups.push(() => stack.close());
    const sock = new RdsSocket({ stack });
    await sock.bind({ address: '127.218.1.1', port: 4000 });
    sock.sendmsg(Buffer.from('first'), { address: '127.218.1.2', port: 4000 });
    const c0 = await listener.accept(0, 10_000);
    kernelMap(c0);
    await c0.nextUser(10_000);
    // The node's second probe (its path count, once the pong showed a kernel) is answered by the
    // raw peer as it arrives: wait for it, so that answer cannot fall between the halves below.
    await c0.nextProbe(10_000);
    c0.sock.setNoDelay(true);
    // Header and half the payload: the node reads them and its frame timer starts.
    const payload = Buffer.alloc(4000, 9);
    const frame = Buffer.alloc(48 + payload.length);
    wire.encodeHeader(frame, 0, { sequence: 100, sport: 5000, dport: 4000, len: payload.length });
    payload.copy(frame, 48);
    const reads = (): number => stack.counters.get('tcp_data_ready_calls');
    const before = reads();
    c0.sock.write(frame.subarray(0, 2048));
    await until(() => reads() > before, 'the first half read');
    // The rest comes while the loop is held past the frame's deadline.
    c0.sock.write(frame.subarray(2048));
    const end = Date.now() + 2 * frameTimeoutMs;
    while (Date.now() < end) {
      /* the held event loop */
    }
    const m = await sock.recv({ timeout: 5000 });
    expect(m.data).toEqual(payload);
    expect(stack.counters.get('recv_drop_frame_timeout')).toBe(0);
  });
});

describe('a new connection whose first frame came while the event loop was held (#40)', () => {
  it('is taken, not reset as a connection that sent nothing in time', async () => {
    const headerTimeoutMs = 300;
    const stack = new RdsStack({ tcpPort: P, headerTimeoutMs });
    cleanups.push(() => stack.close());
    const sock = new RdsSocket({ stack });
    await sock.bind({ address: '127.218.2.2', port: 4000 });
    // A kernel on the smaller address connects; our node takes the connection and waits for its
    // first frame.
    const c0 = await rawConnect('127.218.2.1', '127.218.2.2', P);
    cleanups.push(() => c0.sock.destroy());
    await until(() => stack.connections()[0]?.paths[0]?.state === 'UP', 'the connection taken as a path');
    c0.sock.setNoDelay(true);
    kernelMap(c0);
    c0.send({ sequence: 1, sport: 5000, dport: 4000 }, Buffer.from('held'));
    const end = Date.now() + 2 * headerTimeoutMs;
    while (Date.now() < end) {
      /* the held event loop */
    }
    expect((await sock.recv({ timeout: 5000 })).data).toEqual(Buffer.from('held'));
    expect(stack.counters.get('recv_drop_header_timeout')).toBe(0);
  });
});
