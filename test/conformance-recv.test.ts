import { describe, expect, it } from 'vitest';
import { constants } from '../lib/index.js';
import { CONFORMANCE_KINDS, pairPerTest, payload, thrownCode, timeout } from './helpers.js';

// recvmsg(2)'s flags and options over every kind of socket (issue 38; recv.c rds_recvmsg):
// MSG_PEEK, MSG_TRUNC with a caller's buffer, MSG_DONTWAIT on the blocking call, msg_flags and the
// return value, SO_RCVTIMEO. The part of the conformance suite about receiving; addresses 127.144.x.y.
const KINDS = CONFORMANCE_KINDS;
const NET = 144;
const { SOL_SOCKET, SOL_RDS, MSG_PEEK, MSG_TRUNC, MSG_DONTWAIT, SO_RDS_MSG_RXPATH_LATENCY } = constants;

describe.each(KINDS)('recvmsg flags over %s', (kind) => {
  const { open } = pairPerTest(kind, NET);

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

  it('RdsMessage.path: a message from a peer says which lane carried it; a notification has none', async () => {
    const { a, b } = await open();
    for (let i = 0; i < 4; i++) a.sendmsg(payload(i, 64), b.address());
    for (let i = 0; i < 4; i++) {
      const m = await b.recv({ signal: timeout() });
      expect(m.data.readUInt32BE(0)).toBe(i);
      // No rails here: a lane, 0 to npaths-1 (8 by default); loopback and IB run one path.
      expect(Number.isInteger(m.path), `message ${i} over ${kind}: path ${m.path}`).toBe(true);
      expect(m.path).toBeGreaterThanOrEqual(0);
      expect(m.path).toBeLessThan(kind === 'loopback' || kind === 'ib' ? 1 : 8);
    }
    if (kind === 'ib') return; // MSG_ZEROCOPY is TCP only
    a.setsockopt(SOL_SOCKET, constants.SO_ZEROCOPY, 1);
    a.sendmsg(Buffer.from('zc'), b.address(), { flags: constants.MSG_ZEROCOPY, zcopyCookie: 5 });
    expect((await b.recv({ signal: timeout() })).path).toBeTypeOf('number');
    const note = await a.recv({ signal: timeout() });
    expect(note).toMatchObject({ address: '', zcopyCompletions: [5] });
    expect(note.path).toBeUndefined();
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
    expect(thrownCode(() => b.recvmsg({ flags: constants.MSG_OOB }))).toBe('EOPNOTSUPP');
    expect(thrownCode(() => b.recvmsg({ flags: constants.MSG_ERRQUEUE }))).toBe('EOPNOTSUPP');
    expect(thrownCode(() => b.recvmsg({ flags: 0x10000 }))).toBe('EOPNOTSUPP');
    expect(thrownCode(() => b.recvmsg({ flags: 1.5 }))).toBe('EINVAL');
    expect(thrownCode(() => b.recvmsg({ buffer: 'x' as never }))).toBe('EINVAL');
    await expect(b.recv({ flags: constants.MSG_OOB })).rejects.toMatchObject({ code: 'EOPNOTSUPP' });
    // MSG_WAITALL is taken and changes nothing (a datagram comes whole).
    a.sendmsg(Buffer.from('all'), b.address());
    expect((await b.recv({ flags: constants.MSG_WAITALL, signal: timeout() })).data.toString()).toBe('all');
  });

  it('SO_RDS_MSG_RXPATH_LATENCY: each message read carries RDS_CMSG_RXPATH_LATENCY, the intervals asked for in ns', async () => {
    const { a, b } = await open();
    // struct rds_rx_trace_so: rx_traces 3, positions 0 (frame -> delivery), 1 (delivery -> queued), 2 (queued -> read).
    b.setsockopt(SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, Uint8Array.of(3, 0, 1, 2));
    a.sendmsg(Buffer.from('traced'), b.address());
    await b.recv({ flags: MSG_PEEK, signal: timeout() }); // queued (stamp 2) before this resolves
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, 60)); // the interval point 2 is to measure, not a synchronisation
    const waited = performance.now() - t0;
    const m = b.recvmsg()!;
    expect(m.data.toString()).toBe('traced');
    expect(m.rxTrace?.positions).toEqual([0, 1, 2]);
    const [v0, v1, v2] = m.rxTrace!.values;
    for (const v of [v0!, v1!, v2!]) expect(v).toBeGreaterThanOrEqual(0n);
    expect(Number(v2!) / 1e6).toBeGreaterThanOrEqual(waited - 1);
    expect(Number(v2!) / 1e6).toBeLessThan(10_000);
    // The points as an array, in the order given; a peek reports them too.
    b.setsockopt(SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, [2, 0]);
    a.sendmsg(Buffer.from('again'), b.address());
    const p = await b.recv({ flags: MSG_PEEK, signal: timeout() });
    expect(p.rxTrace?.positions).toEqual([2, 0]);
    expect(p.rxTrace?.values.length).toBe(2);
    expect(b.recvmsg()?.rxTrace?.positions).toEqual([2, 0]);
    // [] turns it off.
    b.setsockopt(SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, []);
    a.sendmsg(Buffer.from('plain'), b.address());
    expect((await b.recv({ signal: timeout() })).rxTrace).toBeUndefined();
  });

  it('SO_RDS_MSG_RXPATH_LATENCY is refused as the kernel refuses it: EFAULT, a bad point turns the trace off; no getsockopt', async () => {
    const { a, b } = await open();
    expect(thrownCode(() => b.getsockopt(SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY))).toBe('ENOPROTOOPT');
    expect(thrownCode(() => b.setsockopt(SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, Uint8Array.of(1, 0, 0)))).toBe('EFAULT');
    expect(thrownCode(() => b.setsockopt(SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, Uint8Array.of(4, 0, 0, 0)))).toBe(
      'EFAULT',
    );
    b.setsockopt(SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, [1]);
    expect(thrownCode(() => b.setsockopt(SOL_RDS, SO_RDS_MSG_RXPATH_LATENCY, Uint8Array.of(2, 0, 3, 0)))).toBe(
      'EFAULT',
    );
    a.sendmsg(Buffer.from('off'), b.address());
    const m = await b.recv({ signal: timeout() });
    expect(m.data.toString()).toBe('off');
    expect(m.rxTrace).toBeUndefined();
  });
});
