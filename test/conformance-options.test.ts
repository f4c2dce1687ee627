import { describe, expect, it } from 'vitest';
import { RdsError, RdsSocket, constants } from '../lib/index.js';
import { CONFORMANCE_KINDS, pairPerTest, type Pair, payload, timeout, until } from './helpers.js';

// Every socket option, constructor options included, over every kind of socket the conformance
// suite runs (issue 33: an option an attached socket forwarded under the wrong number was accepted
// and then did nothing). The part of the conformance suite about options; conformance.test.ts has
// the rest. Destinations nobody answers are 127.26.<host>.9 (connections to it are refused).
const KINDS = CONFORMANCE_KINDS;
const NET = 26;
const { SOL_SOCKET, SOL_RDS } = constants;

describe.each(KINDS)('socket options over %s', (kind) => {
  const { open, host } = pairPerTest(kind, NET);
  /** A destination no node answers (so nothing sent there is ever acknowledged). */
  const nowhere = (): { address: string; port: number } => ({ address: `127.${NET}.${host()}.9`, port: 4000 });

  /** A socket of A's stack on A's address, made with `opts`, bound to an ephemeral port. */
  async function socketOfA(p: Pair, opts: ConstructorParameters<typeof RdsSocket>[0] = {}): Promise<RdsSocket> {
    const s = new RdsSocket({ stack: p.stackA, ...opts });
    await s.bind({ address: p.a.address().address, port: 0 });
    return s;
  }

  /** send() to nowhere with a confirmation, and the error it ends with (null: none within 10 s). */
  async function confirmToNowhere(s: RdsSocket, tag: string): Promise<RdsError | null> {
    const ended = s.send(Buffer.from(tag), nowhere(), { confirm: true }).then(
      () => null,
      (e: RdsError) => e,
    );
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<null>((r) => (timer = setTimeout(() => r(null), 10_000)));
    try {
      return await Promise.race([ended, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  it('new RdsSocket({ sendTimeout }) gives up messages unacknowledged that long (SO_SNDTIMEO)', async () => {
    const p = await open();
    const s = await socketOfA(p, { sendTimeout: 300 });
    expect(s.getsockopt(SOL_SOCKET, constants.SO_SNDTIMEO)).toBe(300);
    const t0 = performance.now();
    const e = await confirmToNowhere(s, 'ctor');
    expect(e).toMatchObject({ code: 'ETIMEDOUT', message: expect.stringMatching(/SO_SNDTIMEO \(300 ms\)/) });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(250);
    // The socket goes on: a message to a live peer arrives.
    await s.send(Buffer.from('after'), p.b.address(), { signal: timeout() });
    expect((await p.b.recv({ signal: timeout() })).data.toString()).toBe('after');
  });

  it('setsockopt(SO_SNDTIMEO) and SO_SNDTIMEO_NEW do the same; 0 means never', async () => {
    const p = await open();
    const s = await socketOfA(p);
    expect(s.getsockopt(SOL_SOCKET, constants.SO_SNDTIMEO)).toBe(0);
    s.setsockopt(SOL_SOCKET, constants.SO_SNDTIMEO, 200);
    expect(await confirmToNowhere(s, 'old')).toMatchObject({ code: 'ETIMEDOUT', message: /SO_SNDTIMEO \(200 ms\)/ });
    s.setsockopt(SOL_SOCKET, constants.SO_SNDTIMEO_NEW, 250);
    expect(s.getsockopt(SOL_SOCKET, constants.SO_SNDTIMEO_NEW)).toBe(250);
    expect(await confirmToNowhere(s, 'new')).toMatchObject({ code: 'ETIMEDOUT', message: /SO_SNDTIMEO \(250 ms\)/ });
    expect(() => s.setsockopt(SOL_SOCKET, constants.SO_SNDTIMEO, -1)).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    expect(s.getsockopt(SOL_SOCKET, constants.SO_SNDTIMEO)).toBe(250);
  });

  it('RDS_CANCEL_SENT_TO removes what waits for one destination, and only that', async () => {
    const p = await open();
    const s = await socketOfA(p);
    const cancelled = [0, 1, 2].map((i) =>
      s.send(payload(i, 100), nowhere(), { confirm: true }).then(
        () => null,
        (e: RdsError) => e,
      ),
    );
    // A confirmation resolves once b has read the message.
    const kept = s.send(Buffer.from('kept'), p.b.address(), { confirm: true, signal: timeout() });
    expect((await p.b.recv({ signal: timeout() })).data.toString()).toBe('kept');
    await kept;
    s.setsockopt(SOL_RDS, constants.RDS_CANCEL_SENT_TO, nowhere());
    for (const e of await Promise.all(cancelled)) expect(e).toMatchObject({ code: 'ECANCELED' });
    // Only those: the socket still sends to b.
    await s.send(Buffer.from('next'), p.b.address(), { signal: timeout() });
    expect((await p.b.recv({ signal: timeout() })).data.toString()).toBe('next');
  });

  it('SO_SNDBUF and SO_RCVBUF read back doubled, with the kernel minimums', async () => {
    const { a } = await open();
    a.setsockopt(SOL_SOCKET, constants.SO_SNDBUF, 65536);
    a.setsockopt(SOL_SOCKET, constants.SO_RCVBUF, 32768);
    expect(a.getsockopt(SOL_SOCKET, constants.SO_SNDBUF)).toBe(131072);
    expect(a.getsockopt(SOL_SOCKET, constants.SO_RCVBUF)).toBe(65536);
    a.setsockopt(SOL_SOCKET, constants.SO_SNDBUF, 0);
    a.setsockopt(SOL_SOCKET, constants.SO_RCVBUF, 0);
    expect(a.getsockopt(SOL_SOCKET, constants.SO_SNDBUF)).toBe(constants.SOCK_MIN_SNDBUF);
    expect(a.getsockopt(SOL_SOCKET, constants.SO_RCVBUF)).toBe(constants.SOCK_MIN_RCVBUF);
  });

  it('SO_TIMESTAMP_NEW stamps messages; turned off, none are', async () => {
    const { a, b } = await open();
    b.setsockopt(SOL_SOCKET, constants.SO_TIMESTAMP_NEW, true);
    expect(b.getsockopt(SOL_SOCKET, constants.SO_TIMESTAMP)).toBe(1);
    const before = Date.now();
    a.sendmsg(Buffer.from('t'), b.address());
    const m = await b.recv({ signal: timeout() });
    expect(m.timestamp).toBeGreaterThanOrEqual(before - 1);
    b.setsockopt(SOL_SOCKET, constants.SO_TIMESTAMP_NEW, 0);
    a.sendmsg(Buffer.from('u'), b.address());
    expect((await b.recv({ signal: timeout() })).timestamp).toBeUndefined();
  });

  it('RDS_RECVERR and SO_ZEROCOPY read back what was set', async () => {
    const { a } = await open();
    for (const [level, name] of [
      [SOL_RDS, constants.RDS_RECVERR],
      [SOL_SOCKET, constants.SO_ZEROCOPY],
      [SOL_RDS, constants.RDS_CONG_MONITOR],
    ] as const) {
      expect(a.getsockopt(level, name)).toBe(0);
      a.setsockopt(level, name, 1);
      expect(a.getsockopt(level, name)).toBe(1);
      a.setsockopt(level, name, false);
      expect(a.getsockopt(level, name)).toBe(0);
    }
  });

  it('SO_RDS_TRANSPORT and the transport option: set once, before bind(), and read back', async () => {
    const p = await open();
    if (kind === 'ib') return; // the IB suite binds its sockets over IB (test/ib)
    const viaOption = new RdsSocket({ stack: p.stackA, transport: 'tcp' });
    expect(viaOption.getsockopt(SOL_RDS, constants.SO_RDS_TRANSPORT)).toBe(constants.RDS_TRANS_TCP);
    const viaSet = new RdsSocket({ stack: p.stackA });
    expect(viaSet.getsockopt(SOL_RDS, constants.SO_RDS_TRANSPORT)).toBe(constants.RDS_TRANS_NONE);
    viaSet.setsockopt(SOL_RDS, constants.SO_RDS_TRANSPORT, constants.RDS_TRANS_TCP);
    expect(() => viaSet.setsockopt(SOL_RDS, constants.SO_RDS_TRANSPORT, constants.RDS_TRANS_TCP)).toThrow(
      expect.objectContaining({ code: 'EOPNOTSUPP' }),
    );
    for (const s of [viaOption, viaSet]) {
      await s.bind({ address: p.a.address().address, port: 0 });
      expect(s.getsockopt(SOL_RDS, constants.SO_RDS_TRANSPORT)).toBe(constants.RDS_TRANS_TCP);
      await s.send(Buffer.from('tcp'), p.b.address(), { signal: timeout() });
      expect((await p.b.recv({ signal: timeout() })).data.toString()).toBe('tcp');
    }
  });

  it('refuses unknown options and bad values at the call, the same way everywhere', async () => {
    const { a, b } = await open();
    for (const [level, name] of [
      [SOL_SOCKET, 62],
      [SOL_RDS, 999],
      [7, constants.SO_SNDBUF],
    ]) {
      expect(() => a.setsockopt(level!, name!, 1)).toThrow(expect.objectContaining({ code: 'ENOPROTOOPT' }));
    }
    expect(() => a.setsockopt(SOL_SOCKET, constants.SO_ZEROCOPY, 2)).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    expect(() => a.setsockopt(SOL_SOCKET, constants.SO_RCVBUF, 'big' as never)).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    expect(() => new RdsSocket({ stack: a.stack, sendTimeout: 1.5 })).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    // Nothing above changed anything, and nothing was refused later.
    await a.send(Buffer.from('ok'), b.address(), { signal: timeout() });
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('ok');
    expect(a.poll() & constants.POLLERR).toBe(0);
  });

  it('RDS_CONG_MONITOR: the port that returned ENOBUFS is reported once it clears, as a 0-byte message', async () => {
    const { a, b } = await open();
    a.setsockopt(SOL_RDS, constants.RDS_CONG_MONITOR, 1);
    b.setsockopt(SOL_SOCKET, constants.SO_RCVBUF, 4096);
    let sent = 0;
    let enobufs = false;
    const deadline = Date.now() + 20_000;
    while (!enobufs && Date.now() < deadline) {
      try {
        a.sendmsg(Buffer.alloc(1024), b.address());
        sent++;
      } catch (e) {
        if (!(e instanceof RdsError) || (e.code !== 'ENOBUFS' && e.code !== 'EAGAIN')) throw e;
        enobufs = e.code === 'ENOBUFS';
        if (!enobufs) await new Promise((r) => setTimeout(r, 2));
      }
      if (sent % 20 === 19) await new Promise((r) => setImmediate(r));
    }
    expect(enobufs).toBe(true);
    for (let got = 0; got < sent; got++) await b.recv({ signal: timeout() });
    const bit = 1n << BigInt(b.address().port % 64);
    let update: bigint | undefined;
    await until(() => {
      const m = a.recvmsg();
      if (m !== null) {
        expect(m.data.length).toBe(0);
        update = m.congestionUpdate;
      }
      return update !== undefined;
    }, 'the congestion update');
    expect(update! & bit).toBe(bit);
  });
});
