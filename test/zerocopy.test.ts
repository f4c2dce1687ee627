import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants } from '../lib/index.js';
import { RdsOutgoing, type SendOwner } from '../lib/core/message.js';
import type { RdsConnPath } from '../lib/core/path.js';
import { TEST_TCP_PORT, makePair, payload, thrownCode, timeout, until, type Pair } from './helpers.js';

// MSG_ZEROCOPY (spec §6.4, §6.6): the caller's buffers are referenced, not copied, until the
// socket reports their cookie through recvmsg (RDS_CMSG_ZCOPY_COMPLETION).
const NET = 31;
const { SOL_SOCKET, SO_ZEROCOPY, MSG_ZEROCOPY, MSG_DONTWAIT, POLLIN } = constants;
const ZC = { flags: MSG_ZEROCOPY };
let host = 0;
let pairs: Pair[] = [];
afterEach(async () => {
  for (const p of pairs) await p.close();
  pairs = [];
});

async function zcPair(): Promise<Pair> {
  const p = await makePair('tcp', NET, ++host);
  pairs.push(p);
  p.a.setsockopt(SOL_SOCKET, SO_ZEROCOPY, 1);
  // With the monitor on, POLLIN is not also raised once per congestion-map update (spec §6.6).
  p.a.setsockopt(constants.SOL_RDS, constants.RDS_CONG_MONITOR, 1);
  return p;
}

/** Every completion the socket reports until `n` have arrived, in report order. */
async function completions(s: RdsSocket, n: number): Promise<number[]> {
  const got: number[] = [];
  while (got.length < n) {
    const m = await s.recv({ signal: timeout() });
    expect(m.zcopyCompletions?.length ?? 0).toBeLessThanOrEqual(constants.RDS_MAX_ZCOOKIES);
    got.push(...(m.zcopyCompletions ?? []));
  }
  return got;
}

describe('MSG_ZEROCOPY send', () => {
  it('SO_ZEROCOPY is off by default, reads back as set, and takes only 0 or 1', async () => {
    const { b } = await zcPair();
    expect(b.getsockopt(SOL_SOCKET, SO_ZEROCOPY)).toBe(0);
    b.setsockopt(SOL_SOCKET, SO_ZEROCOPY, true);
    expect(b.getsockopt(SOL_SOCKET, SO_ZEROCOPY)).toBe(1);
    expect(() => b.setsockopt(SOL_SOCKET, SO_ZEROCOPY, 2)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
  });

  it('checks flags and the cookie as rds_sendmsg does', async () => {
    const { a, b } = await zcPair();
    const to = b.address();
    const x = Buffer.from('x');
    expect(thrownCode(() => a.sendmsg(x, to, { flags: 0x1 /* MSG_OOB */ }))).toBe('EOPNOTSUPP');
    expect(thrownCode(() => a.sendmsg(x, to, { flags: 1.5 }))).toBe('EINVAL');
    expect(thrownCode(() => a.sendmsg(x, to, ZC))).toBe('EINVAL'); // no cookie
    expect(thrownCode(() => a.sendmsg(x, to, { ...ZC, zcopyCookie: -1 }))).toBe('EINVAL');
    expect(thrownCode(() => a.sendmsg(x, to, { ...ZC, zcopyCookie: 2 ** 32 }))).toBe('EINVAL');
    expect(thrownCode(() => a.sendmsg(x, to, { zcopyCookie: 5 }))).toBe('EINVAL'); // cookie without the flag
    expect(thrownCode(() => b.sendmsg(x, a.address(), { ...ZC, zcopyCookie: 5 }))).toBe('EINVAL'); // b lacks SO_ZEROCOPY
    // Without SO_ZEROCOPY the flag alone is ignored, as in the kernel: the data is copied.
    const copied = Buffer.from('copied');
    expect(b.sendmsg(copied, a.address(), { flags: MSG_ZEROCOPY | MSG_DONTWAIT })).toBe(6);
    copied.write('CHANGE');
    expect((await a.recv({ signal: timeout() })).data.toString()).toBe('copied');
    expect(a.sendmsg(x, to, { ...ZC, zcopyCookie: 0xffffffff })).toBe(1);
    expect(await completions(a, 1)).toEqual([0xffffffff]);
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('x');
  });

  it("references the caller's buffer: it is released only after the peer application took the message", async () => {
    const { a, b, stackB } = await zcPair();
    const buf = Buffer.from('zero-copy');
    a.sendmsg(buf, b.address(), { ...ZC, zcopyCookie: 7 });
    await until(() => stackB.counters.get('recv_queued') >= 1, 'the message to reach b');
    // b's application has not read it: no rds-socket peer acknowledges before that.
    expect(a.poll() & POLLIN).toBe(0);
    expect(a.recvmsg()).toBeNull();
    const readable = new Promise<void>((r) => a.once('readable', r));
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('zero-copy');
    await readable;
    expect(a.poll() & POLLIN).toBe(POLLIN);
    expect(a.recvmsg()).toMatchObject({ address: '', port: 0, zcopyCompletions: [7] });
    expect(a.poll() & POLLIN).toBe(0);
  });

  it('reports at most eight cookies per recvmsg, oldest first, and lets them ride on received data', async () => {
    const { a, b } = await zcPair();
    for (let i = 0; i < 20; i++) a.sendmsg(payload(i, 100), b.address(), { ...ZC, zcopyCookie: i });
    for (let i = 0; i < 20; i++) expect((await b.recv({ signal: timeout() })).data.readUInt32BE(0)).toBe(i);
    await a.flush({ signal: timeout() });
    b.sendmsg(Buffer.from('reply'), a.address());
    await until(() => a.stack.counters.get('recv_queued') >= 1, 'the reply to reach a');
    const first = a.recvmsg()!;
    // The data message carries the first eight completions; the rest come as lone records.
    expect(first.data.toString()).toBe('reply');
    expect(first.zcopyCompletions).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(a.recvmsg()).toMatchObject({ data: Buffer.alloc(0), zcopyCompletions: [8, 9, 10, 11, 12, 13, 14, 15] });
    expect(a.recvmsg()).toMatchObject({ zcopyCompletions: [16, 17, 18, 19] });
    expect(a.recvmsg()).toBeNull();
  });

  it("releases a cancelled message's buffer (RDS_CANCEL_SENT_TO) and never sends it later", async () => {
    const stack = new RdsStack({ tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 50 });
    const a = new RdsSocket({ stack });
    try {
      await a.bind({ address: '127.31.200.1', port: 4000 });
      a.setsockopt(SOL_SOCKET, SO_ZEROCOPY, 1);
      const nobody = { address: '127.31.200.2', port: 4000 };
      a.sendmsg(Buffer.from('lost'), nobody, { ...ZC, zcopyCookie: 42 });
      expect(a.recvmsg()).toBeNull();
      a.setsockopt(constants.SOL_RDS, constants.RDS_CANCEL_SENT_TO, nobody);
      expect(await completions(a, 1)).toEqual([42]);
      await a.flush({ signal: timeout() });
    } finally {
      await stack.close();
    }
  });

  it('keeps a payload a transport is still writing until the write finishes, even once acknowledged', () => {
    const released: number[] = [];
    const owner: SendOwner = { messageDone() {}, zcopyReleased: (c) => released.push(c) };
    const m = new RdsOutgoing(Buffer.alloc(48), 5, 1, 4000, 4000, '127.0.0.2', null as unknown as RdsConnPath, owner);
    m.zeroCopy(Buffer.from('hello'), 9);
    m.xmitHold();
    m.complete();
    expect(released).toEqual([]);
    m.xmitDone();
    expect(released).toEqual([9]);
    m.complete();
    expect(released).toEqual([9]);
  });

  it('a 64 KiB stream in zero-copy arrives in order and intact, each buffer reused only after its completion', async () => {
    const { a, b } = await zcPair();
    a.setsockopt(SOL_SOCKET, constants.SO_SNDBUF, 1 << 20);
    // A ring of buffers: slot i % 8 is rewritten for message i only after its last use completed.
    const ring = Array.from({ length: 8 }, () => Buffer.alloc(65536));
    const free = new Set(ring.keys());
    const N = 200;
    const got = (async () => {
      for (let i = 0; i < N; i++)
        expect((await b.recv({ signal: timeout() })).data.equals(payload(i, 65536))).toBe(true);
    })();
    for (let i = 0; i < N; i++) {
      while (!free.has(i % 8)) {
        const m = await a.recv({ signal: timeout() });
        for (const c of m.zcopyCompletions ?? []) free.add(c % 8);
      }
      free.delete(i % 8);
      payload(i, 65536).copy(ring[i % 8]!);
      await a.send(ring[i % 8]!, b.address(), { ...ZC, zcopyCookie: i, signal: timeout() });
    }
    await got;
  });
});
