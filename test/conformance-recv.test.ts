import { afterEach, describe, expect, it } from 'vitest';
import { type RdsError, constants } from '../lib/index.js';
import { CONFORMANCE_KINDS, makePair, type Pair, payload, timeout } from './helpers.js';

// recvmsg(2)'s flags and options over every kind of socket (issue 38; recv.c rds_recvmsg):
// MSG_PEEK, MSG_TRUNC with a caller's buffer, MSG_DONTWAIT on the blocking call, msg_flags and the
// return value, SO_RCVTIMEO. The part of the conformance suite about receiving; addresses 127.144.x.y.
const KINDS = CONFORMANCE_KINDS;
const NET = 144;
const { SOL_SOCKET, MSG_PEEK, MSG_TRUNC, MSG_DONTWAIT } = constants;

describe.each(KINDS)('recvmsg flags over %s', (kind) => {
  let pair: Pair | null = null;
  let host = kind === 'tcp' ? 0 : kind === 'attached' ? 64 : kind === 'attached-process' ? 96 : 128;
  const open = async (): Promise<Pair> => (pair = await makePair(kind, NET, ++host));
  afterEach(async () => {
    await pair?.close();
    pair = null;
  });

  it('MSG_PEEK returns the next message and leaves it queued; the next recvmsg returns it again', async () => {
    const { a, b } = await open();
    a.sendmsg(payload(1, 300), b.address());
    a.sendmsg(payload(2, 20), b.address());
    const peeked = await b.recv({ flags: MSG_PEEK, signal: timeout() });
    expect(peeked).toMatchObject({ address: a.address().address, port: 4000, flags: 0, length: 300 });
    expect(peeked.data.equals(payload(1, 300))).toBe(true);
    for (let i = 0; i < 3; i++) expect(b.recvmsg({ flags: MSG_PEEK })?.data.equals(payload(1, 300))).toBe(true);
    expect(b.poll() & constants.POLLIN).toBe(constants.POLLIN);
    expect(b.recvmsg()?.data.equals(payload(1, 300))).toBe(true);
    expect((await b.recv({ signal: timeout() })).data.equals(payload(2, 20))).toBe(true);
    expect(b.recvmsg({ flags: MSG_PEEK })).toBeNull();
  });

  it('MSG_PEEK does not count as read: a confirmed send resolves only once the message is taken', async () => {
    const { a, b } = await open();
    // Loopback confirms once the message is queued at the receiver (see SendOptions.confirm).
    if (kind === 'loopback') return;
    let confirmed = false;
    const conf = a.send(Buffer.from('peek me'), b.address(), { confirm: true, signal: timeout() }).then(() => {
      confirmed = true;
    });
    await b.recv({ flags: MSG_PEEK, signal: timeout() });
    // Peek again on later turns and let the node and the peer exchange a round trip meanwhile (a
    // read report, or an attached socket's credit, sent by a peek would arrive in it).
    for (let i = 0; i < 3; i++) {
      b.sendmsg(Buffer.from('ping'), a.address());
      expect((await a.recv({ signal: timeout() })).data.toString()).toBe('ping');
      expect(b.recvmsg({ flags: MSG_PEEK })?.data.toString()).toBe('peek me');
    }
    expect(confirmed).toBe(false);
    expect(b.recvmsg()?.data.toString()).toBe('peek me');
    await conf;
    expect(confirmed).toBe(true);
  });

  it('a buffer shorter than the message: the rest is dropped, msg_flags has MSG_TRUNC; with MSG_TRUNC asked, length is the full length', async () => {
    const { a, b } = await open();
    for (let i = 0; i < 4; i++) a.sendmsg(payload(i, 100), b.address());
    const buf = Buffer.alloc(40);
    const m0 = await b.recv({ buffer: buf, signal: timeout() });
    expect(m0).toMatchObject({ flags: MSG_TRUNC, length: 40 });
    expect(m0.data.length).toBe(40);
    expect(m0.data.buffer).toBe(buf.buffer); // the bytes are in the caller's buffer
    expect(buf.equals(payload(0, 100).subarray(0, 40))).toBe(true);
    // The rest of message 0 is gone: the next call returns message 1.
    const m1 = await b.recv({ buffer: new Uint8Array(40), flags: MSG_TRUNC, signal: timeout() });
    expect(m1).toMatchObject({ flags: MSG_TRUNC, length: 100 });
    expect(m1.data.equals(payload(1, 100).subarray(0, 40))).toBe(true);
    // MSG_PEEK | MSG_TRUNC with a short buffer: cut, and still queued whole.
    expect(await b.recv({ buffer: new Uint8Array(10), flags: MSG_PEEK | MSG_TRUNC, signal: timeout() })).toMatchObject({
      flags: MSG_TRUNC,
      length: 100,
    });
    const big = new Uint8Array(4096);
    const m2 = await b.recv({ buffer: big, signal: timeout() });
    expect(m2).toMatchObject({ flags: 0, length: 100 });
    expect(m2.data.equals(payload(2, 100))).toBe(true);
    // Without a buffer nothing is cut, and MSG_TRUNC changes nothing.
    const m3 = await b.recv({ flags: MSG_TRUNC, signal: timeout() });
    expect(m3).toMatchObject({ flags: 0, length: 100 });
    expect(m3.data.equals(payload(3, 100))).toBe(true);
  });

  it('MSG_DONTWAIT: recv() rejects with EAGAIN at once when nothing is queued, recvmsg() returns null', async () => {
    const { a, b } = await open();
    await expect(b.recv({ flags: MSG_DONTWAIT, signal: timeout() })).rejects.toMatchObject({ code: 'EAGAIN' });
    expect(b.recvmsg({ flags: MSG_DONTWAIT })).toBeNull();
    a.sendmsg(Buffer.from('now'), b.address());
    await b.recv({ flags: MSG_PEEK, signal: timeout() });
    expect((await b.recv({ flags: MSG_DONTWAIT })).data.toString()).toBe('now');
  });

  it('SO_RCVTIMEO bounds a blocking recv() with ETIMEDOUT (as rds_recvmsg); a call timeout overrides it; 0 waits', async () => {
    const { a, b } = await open();
    expect(b.getsockopt(SOL_SOCKET, constants.SO_RCVTIMEO)).toBe(0);
    b.setsockopt(SOL_SOCKET, constants.SO_RCVTIMEO, 150);
    expect(b.getsockopt(SOL_SOCKET, constants.SO_RCVTIMEO)).toBe(150);
    const t0 = performance.now();
    await expect(b.recv()).rejects.toMatchObject({ code: 'ETIMEDOUT', message: /SO_RCVTIMEO timed out after 150 ms/ });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(140);
    // The iterator is a blocking receive too.
    await expect(b.messages().next()).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    await expect(b.recv({ timeout: 20 })).rejects.toMatchObject({ message: /^recv\(\) timed out after 20 ms/ });
    b.setsockopt(SOL_SOCKET, constants.SO_RCVTIMEO_NEW, 0);
    expect(b.getsockopt(SOL_SOCKET, constants.SO_RCVTIMEO_NEW)).toBe(0);
    const waiting = b.recv({ signal: timeout() });
    a.sendmsg(Buffer.from('late'), b.address());
    expect((await waiting).data.toString()).toBe('late');
    expect(() => b.setsockopt(SOL_SOCKET, constants.SO_RCVTIMEO, -1)).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    // The option is the socket's own (an attached socket does not ask its node): nothing refused later.
    expect(b.poll() & constants.POLLERR).toBe(0);
    expect(b.recvmsg()).toBeNull();
  });

  it('zero-copy completions are consumed by a MSG_PEEK that returns them (rds_recvmsg_zcookie)', async () => {
    const { a, b } = await open();
    if (kind === 'ib') return; // MSG_ZEROCOPY is TCP only
    a.setsockopt(SOL_SOCKET, constants.SO_ZEROCOPY, 1);
    a.sendmsg(Buffer.from('zc'), b.address(), { flags: constants.MSG_ZEROCOPY, zcopyCookie: 77 });
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('zc');
    const done = await a.recv({ flags: MSG_PEEK, signal: timeout() });
    expect(done).toMatchObject({ address: '', zcopyCompletions: [77] });
    expect(a.recvmsg()).toBeNull();
  });

  it('refuses flags RDS does not take: MSG_OOB, MSG_ERRQUEUE, unknown bits (EOPNOTSUPP); a bad value or buffer (EINVAL)', async () => {
    const { a, b } = await open();
    const code = (f: () => unknown): string | undefined => {
      try {
        f();
      } catch (e) {
        return (e as RdsError).code;
      }
      return undefined;
    };
    expect(code(() => b.recvmsg({ flags: constants.MSG_OOB }))).toBe('EOPNOTSUPP');
    expect(code(() => b.recvmsg({ flags: constants.MSG_ERRQUEUE }))).toBe('EOPNOTSUPP');
    expect(code(() => b.recvmsg({ flags: 0x10000 }))).toBe('EOPNOTSUPP');
    expect(code(() => b.recvmsg({ flags: 1.5 }))).toBe('EINVAL');
    expect(code(() => b.recvmsg({ buffer: 'x' as never }))).toBe('EINVAL');
    await expect(b.recv({ flags: constants.MSG_OOB })).rejects.toMatchObject({ code: 'EOPNOTSUPP' });
    // MSG_WAITALL is taken and changes nothing (a datagram comes whole).
    a.sendmsg(Buffer.from('all'), b.address());
    expect((await b.recv({ flags: constants.MSG_WAITALL, signal: timeout() })).data.toString()).toBe('all');
  });
});
