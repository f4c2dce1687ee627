import { afterEach, describe, expect, it } from 'vitest';
import { constants, RdsSocket, RdsStack } from '../lib/index.js';
import { TEST_TCP_PORT, until } from './helpers.js';
import { native } from '../lib/native.js';
import { socketFd } from '../lib/transports/tcp-socket.js';
import { rawConnect, type RawConn, kernelMap } from './raw-peer.js';

// Loopback addresses 127.219.x.y belong to this file.
const P = TEST_TCP_PORT;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Message `i` of the test: 200 bytes, its index first. */
function body(i: number): Buffer {
  const b = Buffer.alloc(200, 7);
  b.writeUInt32BE(i, 0);
  return b;
}

/**
 * Resolves once our node's TCP has acknowledged everything written to `c` (its send queue is
 * empty: ioctl SIOCOUTQ), as a kernel sender's release needs. Without the addon, once it was
 * handed to `c`'s kernel (the test's messages are far smaller than a TCP window).
 */
async function acknowledged(c: RawConn): Promise<void> {
  const n = native();
  await until(
    () => c.sock.writableLength === 0 && (n === null || n.tcpOutq(socketFd(c.sock)) === 0),
    'our TCP acknowledging what the raw peer wrote',
  );
}

/**
 * A kernel sender releases a message once our TCP has acknowledged it (spec §2.4). A kernel that
 * resets its connection and connects again at once (6.12, `ss -K` in the guest: 1 ms later)
 * never sends those messages again. Our node reads a bounded amount per carrier and turn, and
 * nothing while the receive limits hold the path, so acknowledged bytes can sit unread in our
 * socket when the new connection is accepted; the old carrier was destroyed at once with them
 * (issue #40: 87 messages lost from a 6.12 kernel).
 */
/**
 * The scenario: a kernel on `net`.1 sends FILL messages (the receive limit then holds the path),
 * N more our TCP acknowledges but the node does not read, resets the connection and connects at
 * once with LATER messages. `meanwhile` runs while the limit still holds the path.
 */
async function replacedWhileHeld(
  net: number,
  meanwhile: (stack: RdsStack, sock: RdsSocket) => Promise<void>,
  after: (c1: RawConn) => Promise<void> = async () => {},
) {
  const stack = new RdsStack({ tcpPort: P, recvHardLimitFactor: 1, recvHardLimitMinBytes: 0 });
  cleanups.push(() => stack.close());
  const sock = new RdsSocket({ stack });
  sock.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 4096);
  await sock.bind({ address: `127.219.${net}.2`, port: 4000 });
  // The kernel (the smaller address) connects; our node takes the connection as path 0.
  const c0 = await rawConnect(`127.219.${net}.1`, `127.219.${net}.2`, P);
  cleanups.push(() => c0.sock.destroy());
  kernelMap(c0);
  await c0.mapThenProbe(10_000); // answered (its pong numbered before the messages below)
  c0.sock.setNoDelay(true);
  // Enough unread messages at the port to pass its hard limit: the node stops reading c0.
  const FILL = 40;
  for (let i = 0; i < FILL; i++) c0.send({ sequence: 100 + i, sport: 5000, dport: 4000 }, body(i));
  await until(() => stack.counters.get('recv_pause_queue_limit') >= 1, 'the receive limit holding the path');
  const readBefore = stack.counters.get('tcp_data_ready_calls');
  // N more on c0: our TCP takes (acknowledges) them, the node does not read them.
  const N = 30;
  for (let i = FILL; i < FILL + N; i++) c0.send({ sequence: 100 + i, sport: 5000, dport: 4000 }, body(i));
  await acknowledged(c0);
  // The kernel resets the connection and connects again at once with later messages.
  c0.sock.resetAndDestroy();
  const c1 = await rawConnect(`127.219.${net}.1`, `127.219.${net}.2`, P);
  cleanups.push(() => c1.sock.destroy());
  c1.sock.setNoDelay(true);
  kernelMap(c1);
  const LATER = 5;
  for (let i = FILL + N; i < FILL + N + LATER; i++) c1.send({ sequence: 100 + i, sport: 5000, dport: 4000 }, body(i));
  await acknowledged(c1);
  await until(() => stack.counters.get('tcp_connect_raced') >= 1, 'the new connection replacing the carrier');
  expect(stack.counters.get('tcp_data_ready_calls'), 'nothing read while the limit held').toBe(readBefore);
  expect(stack.connections()[0]?.paths[0]?.state).toBe('UP');
  await meanwhile(stack, sock);

  // The application reads: the hold ends, and every message comes, in the kernel's order.
  const got: number[] = [];
  for (let i = 0; i < FILL + N + LATER; i++) {
    const m = await sock.recv({ timeout: 5000 }).catch(() => null);
    if (m === null) break;
    got.push(m.data.readUInt32BE(0));
  }
  expect(got).toEqual([...Array(FILL + N + LATER).keys()]);
  expect(sock.recvmsg()).toBeNull();
  await after(c1);
}

describe('kernel peers: a carrier replaced while it holds acknowledged, unread bytes (#40)', () => {
  it('is read to its end first: every message of the old connection, in order, before any of the new one', async () => {
    await replacedWhileHeld(0, async () => {});
  });

  it("held past the drain's second, with our write on the old carrier failing on the reset: still every message", async () => {
    await replacedWhileHeld(
      1,
      async (stack, sock) => {
        // Our application sends to the kernel: the write on the old carrier fails on its reset.
        sock.sendmsg(Buffer.from('to the kernel'), { address: '127.219.1.1', port: 4000 });
        // The application does not read for longer than the drain's second (DRAIN_AFTER_RESET_MS):
        // the receive limits, not the peer, keep those bytes unread, and that time does not count.
        await new Promise((res) => setTimeout(res, 1500));
        expect(stack.counters.get('recv_pause_queue_limit')).toBeGreaterThanOrEqual(1);
      },
      // Its message is resent on the new connection.
      async (c1) => expect((await c1.nextUser(10_000)).payload).toEqual(Buffer.from('to the kernel')),
    );
  });
});
