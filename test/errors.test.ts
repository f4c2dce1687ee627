import { afterAll, describe, expect, it } from 'vitest';
import { constants as osConstants } from 'node:os';
import { LoopTransport, RdsError, RdsSocket, RdsStack, TcpTransport, constants } from '../lib/index.js';
import { TEST_TCP_PORT } from './helpers.js';

const { SOL_RDS, SOL_SOCKET, SO_SNDBUF, SO_RDS_TRANSPORT, RDS_CANCEL_SENT_TO } = constants;
const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
afterAll(() => stack.close());

let nextHost = 1;
async function bound(port = 0): Promise<RdsSocket> {
  const s = new RdsSocket({ stack });
  await s.bind({ address: `127.22.0.${nextHost++}`, port });
  return s;
}

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(RdsError);
    const err = e as RdsError;
    expect(err.errno).toBe((osConstants.errno as Record<string, number>)[err.code]);
    expect(err.message.length).toBeGreaterThan(err.code.length + 10);
    return err.code;
  }
  return 'no error';
}

async function acode(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(RdsError);
    return (e as RdsError).code;
  }
  return 'no error';
}

describe('errors are RdsError with the Linux code and errno', () => {
  it('bind: non-local address EADDRNOTAVAIL, port 1 / second bind / wildcard / multicast EINVAL', async () => {
    expect(await acode(new RdsSocket({ stack }).bind({ address: '192.0.2.1', port: 4000 }))).toBe('EADDRNOTAVAIL');
    expect(await acode(new RdsSocket({ stack }).bind({ address: '127.22.1.1', port: 1 }))).toBe('EINVAL');
    expect(await acode(new RdsSocket({ stack }).bind({ address: '0.0.0.0', port: 4000 }))).toBe('EINVAL');
    expect(await acode(new RdsSocket({ stack }).bind({ address: '224.0.0.1', port: 4000 }))).toBe('EINVAL');
    expect(await acode(new RdsSocket({ stack }).bind({ address: 'not-an-ip', port: 4000 }))).toBe('EINVAL');
    expect(await acode(new RdsSocket({ stack }).bind({ address: '127.22.1.1', port: 70000 }))).toBe('EINVAL');
    const s = await bound();
    expect(await acode(s.bind({ address: '127.22.1.1', port: 4001 }))).toBe('EINVAL');
  });

  it('bind: an address and port already bound is EADDRINUSE, and the loser stays usable', async () => {
    const s = await bound(4000);
    const t = new RdsSocket({ stack });
    expect(await acode(t.bind(s.address()))).toBe('EADDRINUSE');
    await t.bind({ address: s.address().address, port: 4001 });
    expect(t.address().port).toBe(4001);
  });

  it('bind: port 0 picks an ephemeral port that is never 0 or 1', async () => {
    const s = await bound(0);
    expect(s.address().port).toBeGreaterThanOrEqual(2);
  });

  it('bind: a TCP port held by someone else is EADDRINUSE with advice', async () => {
    const other = new RdsStack({ tcpPort: TEST_TCP_PORT });
    const s = new RdsSocket({ stack: other });
    const mine = await bound();
    try {
      await s.bind({ address: mine.address().address, port: 5000 });
      expect.unreachable();
    } catch (e) {
      expect((e as RdsError).code).toBe('EADDRINUSE');
      expect((e as Error).message).toMatch(/tcpPort/);
    }
    await other.close();
  });

  it('sendmsg: unbound or without a destination is ENOTCONN', async () => {
    const s = new RdsSocket({ stack });
    expect(code(() => s.sendmsg(Buffer.alloc(1), { address: '127.22.0.200', port: 4000 }))).toBe('ENOTCONN');
    const b = await bound();
    expect(code(() => b.sendmsg(Buffer.alloc(1)))).toBe('ENOTCONN');
  });

  it('sendmsg: larger than RDS_MAX_MSG_SIZE or than SO_SNDBUF is EMSGSIZE', async () => {
    const s = await bound();
    const dst = { address: '127.22.0.201', port: 4000 };
    expect(code(() => s.sendmsg(Buffer.alloc(106_497), dst))).toBe('EMSGSIZE'); // default budget 106,496
    s.setsockopt(SOL_SOCKET, SO_SNDBUF, 4 << 20);
    expect(code(() => s.sendmsg(Buffer.alloc((1 << 20) + 1), dst))).toBe('EMSGSIZE');
  });

  it('sendmsg: the largest default message is the kernel one, 106,496 bytes', async () => {
    const s = await bound();
    expect(s.getsockopt(SOL_SOCKET, SO_SNDBUF)).toBe(212_992);
    expect(s.sendmsg(Buffer.alloc(106_496), { address: '127.22.0.202', port: 4000 })).toBe(106_496);
  });

  it('sendmsg: a full send buffer is EAGAIN, and RDS_CANCEL_SENT_TO gives the room back', async () => {
    const s = await bound();
    // Nothing listens at this address: messages stay queued, unacknowledged.
    const dst = { address: '127.22.0.203', port: 4000 };
    let n = 0;
    let err = 'no error';
    for (; n < 1000 && err === 'no error'; n++) err = code(() => s.sendmsg(Buffer.alloc(10_000), dst));
    expect(err).toBe('EAGAIN');
    expect(s.poll() & constants.POLLOUT).toBe(0);
    const writable = new Promise<void>((r) => s.once('writable', r));
    s.setsockopt(SOL_RDS, RDS_CANCEL_SENT_TO, dst);
    await writable;
    expect(s.poll() & constants.POLLOUT).toBe(constants.POLLOUT);
    expect(stack.counters.get('send_cancelled')).toBeGreaterThanOrEqual(n - 1);
  });

  it('sendmsg: bad data or destination is EINVAL and consumes no sequence number', async () => {
    const s = await bound();
    const dst = { address: '127.22.0.204', port: 4000 };
    expect(code(() => s.sendmsg('text' as unknown as Buffer, dst))).toBe('EINVAL');
    expect(code(() => s.sendmsg([Buffer.alloc(1), 5] as unknown as Buffer[], dst))).toBe('EINVAL');
    expect(code(() => s.sendmsg(Buffer.alloc(1), { address: '255.255.255.255', port: 1 }))).toBe('EINVAL');
    expect(code(() => s.sendmsg(Buffer.alloc(1), { address: '127.22.0.204', port: -1 }))).toBe('EINVAL');
    expect(code(() => s.sendmsg(Buffer.alloc(1), { address: '::1', port: 4 }))).toBe('EOPNOTSUPP');
    expect(stack.connections().some((c) => c.peerAddress === dst.address)).toBe(false);
    s.sendmsg(Buffer.alloc(1), dst);
    const c = stack.connections().find((c) => c.peerAddress === dst.address)!;
    // The path numbers from the clock in whole milliseconds x 1000 (initialSequence 'clock'): the
    // first went to the multipath probe, queued ahead of this node's first message; the message
    // took the second.
    expect(c.paths[0]!.nextTxSeq % 1000).toBe(2);
  });

  it('connect: unspecified destination is EDESTADDRREQ; getpeername without connect is ENOTCONN', () => {
    const s = new RdsSocket({ stack });
    expect(code(() => s.connect({ address: '0.0.0.0', port: 1 }))).toBe('EDESTADDRREQ');
    expect(code(() => s.remoteAddress())).toBe('ENOTCONN');
    s.connect({ address: '127.22.9.9', port: 7 });
    expect(s.remoteAddress()).toEqual({ address: '127.22.9.9', port: 7 });
  });

  it('options: unknown ENOPROTOOPT, bad value EINVAL, SO_RDS_TRANSPORT after bind EOPNOTSUPP', async () => {
    const s = new RdsSocket({ stack });
    expect(code(() => s.setsockopt(SOL_RDS, 99, 1))).toBe('ENOPROTOOPT');
    expect(code(() => s.setsockopt(42, 1, 1))).toBe('ENOPROTOOPT');
    expect(code(() => s.getsockopt(SOL_RDS, 99))).toBe('ENOPROTOOPT');
    expect(code(() => s.setsockopt(SOL_SOCKET, SO_SNDBUF, 'big'))).toBe('EINVAL');
    expect(code(() => s.setsockopt(SOL_RDS, SO_RDS_TRANSPORT, 7))).toBe('EINVAL');
    expect(s.getsockopt(SOL_RDS, SO_RDS_TRANSPORT)).toBe(constants.RDS_TRANS_NONE);
    s.setsockopt(SOL_RDS, SO_RDS_TRANSPORT, constants.RDS_TRANS_TCP);
    expect(code(() => s.setsockopt(SOL_RDS, SO_RDS_TRANSPORT, constants.RDS_TRANS_TCP))).toBe('EOPNOTSUPP');
    const b = await bound();
    expect(b.getsockopt(SOL_RDS, SO_RDS_TRANSPORT)).toBe(constants.RDS_TRANS_TCP);
    expect(code(() => b.setsockopt(SOL_RDS, SO_RDS_TRANSPORT, constants.RDS_TRANS_TCP))).toBe('EOPNOTSUPP');
    expect(code(() => b.setsockopt(SOL_RDS, RDS_CANCEL_SENT_TO, { address: 'x' }))).toBe('EINVAL');
    expect(
      code(() => new RdsSocket({ stack }).setsockopt(SOL_RDS, RDS_CANCEL_SENT_TO, { address: '127.0.0.1', port: 1 })),
    ).toBe('ENOTCONN');
  });

  it('choosing an unavailable transport is ENOPROTOOPT; a bad one EINVAL', async () => {
    const tcpOnly = new RdsStack({ tcpPort: TEST_TCP_PORT, transports: [new TcpTransport(), new LoopTransport()] });
    expect(code(() => new RdsSocket({ stack: tcpOnly, transport: 'ib' }))).toBe('ENOPROTOOPT');
    expect(
      code(() => new RdsSocket({ stack: tcpOnly }).setsockopt(SOL_RDS, SO_RDS_TRANSPORT, constants.RDS_TRANS_IB)),
    ).toBe('ENOPROTOOPT');
    expect(code(() => new RdsSocket({ stack, transport: 'udp' as 'tcp' }))).toBe('EINVAL');
    await tcpOnly.close();
  });

  it('InfiniBand on an address without an RDMA device: bind is ENOPROTOOPT and says what is missing', async () => {
    // These machines have no RDMA device (and CI machines may lack rdma-core): either way the
    // message names the missing piece; Soft-RoCE runs are in test/ib.
    const s = new RdsSocket({ stack, transport: 'ib' });
    expect(s.getsockopt(SOL_RDS, SO_RDS_TRANSPORT)).toBe(constants.RDS_TRANS_IB);
    const err = await s.bind({ address: '127.22.0.77', port: 4000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RdsError);
    expect(err).toMatchObject({ code: 'ENOPROTOOPT', message: expect.stringMatching(/rdma-core|RDMA device/) });
  });

  it('calls on a closed socket are EBADF', async () => {
    const s = await bound();
    await s.close();
    expect(code(() => s.recvmsg())).toBe('EBADF');
    expect(code(() => s.setsockopt(SOL_SOCKET, SO_SNDBUF, 1))).toBe('EBADF');
    expect(await acode(s.bind({ address: '127.22.0.250', port: 3 }))).toBe('EBADF');
    expect(s.poll()).toBe(constants.POLLNVAL);
  });
});
