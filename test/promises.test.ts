import { afterEach, describe, expect, it } from 'vitest';
import { RdsError, RdsSocket, RdsStack, constants } from '../lib/index.js';
import { canonicalAddress, parseCidr } from '../lib/core/address.js';
import { TEST_TCP_PORT, makePair, timeout, type Pair } from './helpers.js';

// Smaller promises of issue 17, each broken before its fix.
const NET = 121;
let host = 0;
let pairs: Pair[] = [];
let stacks: RdsStack[] = [];
afterEach(async () => {
  for (const p of pairs) await p.close();
  for (const s of stacks) await s.close();
  pairs = [];
  stacks = [];
});

async function pair(kind: 'tcp' | 'loopback' = 'tcp'): Promise<Pair> {
  const p = await makePair(kind, NET, ++host);
  pairs.push(p);
  return p;
}

/** Settles with `p`'s outcome, or 'pending' if it has not settled within `ms` (instead of hanging). */
async function within<T>(p: Promise<T>, ms: number): Promise<{ value?: T; error?: unknown } | 'pending'> {
  let t: NodeJS.Timeout | undefined;
  const late = new Promise<'pending'>((r) => {
    t = setTimeout(() => r('pending'), ms);
  });
  try {
    return await Promise.race([
      p.then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      ),
      late,
    ]);
  } finally {
    clearTimeout(t);
  }
}

describe('flush({ signal })', () => {
  it('rejects at once when the signal is already aborted', async () => {
    const { a } = await pair();
    // Something that stays unacknowledged: a message to nobody.
    a.sendmsg(Buffer.from('x'), { address: `127.${NET}.${host}.9`, port: 4000 });
    const r = await within(a.flush({ signal: AbortSignal.abort() }), 1000);
    expect(r).not.toBe('pending');
    expect((r as { error: RdsError }).error).toMatchObject({ code: 'ECANCELED', name: 'AbortError' });
  });

  it('send() and recv() with an already-aborted signal reject at once too', async () => {
    const { a, b } = await pair();
    expect(await within(b.recv({ signal: AbortSignal.abort('stop') }), 1000)).toEqual({ error: 'stop' });
    a.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 1);
    a.sendmsg(Buffer.alloc(1024), { address: `127.${NET}.${host}.9`, port: 4000 });
    const r = await within(a.send(Buffer.from('y'), b.address(), { signal: AbortSignal.abort() }), 1000);
    expect((r as { error: RdsError }).error).toMatchObject({ code: 'ECANCELED' });
  });
});

describe('recv() and messages() abort and timeout', () => {
  it("an aborted recv({ signal }) throws the signal's reason", async () => {
    const { b } = await pair();
    const reason = new Error('shutting down');
    const ac = new AbortController();
    const p = b.recv({ signal: ac.signal });
    ac.abort(reason);
    await expect(p).rejects.toBe(reason);
    // Already aborted, and the default reason (a DOMException named AbortError).
    await expect(b.recv({ signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    const ac2 = new AbortController();
    const p2 = b.recv({ signal: ac2.signal });
    ac2.abort();
    await expect(p2).rejects.toBe(ac2.signal.reason);
    expect((ac2.signal.reason as Error).name).toBe('AbortError');
  });

  it("an aborted messages({ signal }) throws the signal's reason and the socket stays usable", async () => {
    const { a, b } = await pair();
    const reason = { why: 'enough' };
    const ac = new AbortController();
    const got: string[] = [];
    const loop = (async () => {
      for await (const m of b.messages({ signal: ac.signal })) {
        got.push(m.data.toString());
        if (got.length === 2) ac.abort(reason);
      }
    })();
    a.sendmsg(Buffer.from('one'), b.address());
    a.sendmsg(Buffer.from('two'), b.address());
    await expect(loop).rejects.toBe(reason);
    expect(got).toEqual(['one', 'two']);
    a.sendmsg(Buffer.from('three'), b.address());
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('three');
  });

  it('a timeout names the call that timed out and how long it waited', async () => {
    const { a, b } = await pair();
    const e1 = await b.recv({ timeout: 100 }).catch((e: RdsError) => e);
    expect(e1).toMatchObject({ code: 'ETIMEDOUT' });
    expect(e1.message).toBe('ETIMEDOUT: recv() timed out after 100 ms');
    // With a signal too, the timeout is still named as such.
    const e2 = await b.recv({ timeout: 50, signal: new AbortController().signal }).catch((e: RdsError) => e);
    expect(e2.message).toBe('ETIMEDOUT: recv() timed out after 50 ms');
    a.sendmsg(Buffer.from('x'), { address: `127.${NET}.${host}.9`, port: 4000 });
    const e3 = await a.flush({ timeout: 50 }).catch((e: RdsError) => e);
    expect(e3.message).toBe('ETIMEDOUT: flush() timed out after 50 ms');
    const e4 = await a
      .send(Buffer.from('y'), { address: `127.${NET}.${host}.9`, port: 4000 }, { confirm: true, timeout: 50 })
      .catch((e: RdsError) => e);
    expect(e4.message).toBe('ETIMEDOUT: send() timed out after 50 ms');
    // A caller's own AbortSignal.timeout() stays ETIMEDOUT, as before.
    await expect(b.recv({ signal: AbortSignal.timeout(20) })).rejects.toMatchObject({ code: 'ETIMEDOUT' });
  });

  it('timeout values a timer cannot take are refused with EINVAL', async () => {
    const { a, b } = await pair();
    const dest = b.address();
    for (const bad of [2 ** 31, 2 ** 32, Infinity, -1, NaN, '100', null]) {
      const what = String(bad);
      await expect(b.recv({ timeout: bad as number }), what).rejects.toMatchObject({ code: 'EINVAL' });
      await expect(a.flush({ timeout: bad as number }), what).rejects.toMatchObject({ code: 'EINVAL' });
      await expect(a.send(Buffer.from('z'), dest, { timeout: bad as number }), what).rejects.toMatchObject({
        code: 'EINVAL',
      });
      const e = await b.recv({ timeout: bad as number }).catch((x: unknown) => x);
      expect(e, what).toBeInstanceOf(RdsError);
    }
    // The largest a timer takes, and fractions (rounded up), are fine.
    const ac = new AbortController();
    const p = b.recv({ timeout: 2 ** 31 - 1, signal: ac.signal });
    ac.abort('done');
    await expect(p).rejects.toBe('done');
    await expect(b.recv({ timeout: 1.5 })).rejects.toMatchObject({
      code: 'ETIMEDOUT',
      message: 'ETIMEDOUT: recv() timed out after 2 ms',
    });
    expect(b.recvmsg()).toBeNull();
  });
});

describe('IPv4-mapped IPv6 addresses are the IPv4 address', () => {
  it('canonical form and CIDR blocks', () => {
    expect(canonicalAddress('::ffff:10.0.0.1')).toBe('10.0.0.1');
    expect(canonicalAddress('::FFFF:0a00:0001')).toBe('10.0.0.1');
    expect(canonicalAddress('0:0:0:0:0:ffff:127.0.0.1')).toBe('127.0.0.1');
    expect(canonicalAddress('::ffff:1:10.0.0.1')).toBe('::ffff:1:a00:1');
    expect(canonicalAddress('64:ff9b::10.0.0.1')).toBe('64:ff9b::a00:1');
    expect(parseCidr('::ffff:10.0.0.0/104')('10.1.2.3')).toBe(true);
    expect(parseCidr('::ffff:10.0.0.0/104')('11.1.2.3')).toBe(false);
  });

  it('a socket bound to ::ffff:a.b.c.d is bound to a.b.c.d and receives; sending to a mapped address reaches the IPv4 node', async () => {
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT });
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT });
    stacks.push(A, B);
    const h = ++host;
    const a = new RdsSocket({ stack: A });
    const b = new RdsSocket({ stack: B });
    await a.bind({ address: `127.${NET}.${h}.1`, port: 4000 });
    await b.bind({ address: `::ffff:127.${NET}.${h}.2`, port: 4000 });
    expect(b.address()).toEqual({ address: `127.${NET}.${h}.2`, port: 4000 });
    a.sendmsg(Buffer.from('plain'), { address: `127.${NET}.${h}.2`, port: 4000 });
    a.sendmsg(Buffer.from('mapped'), { address: `::ffff:127.${NET}.${h}.2`, port: 4000 });
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('plain');
    const m = await b.recv({ signal: timeout() });
    expect(m.data.toString()).toBe('mapped');
    expect(m.address).toBe(`127.${NET}.${h}.1`);
    // One connection to one peer, not two.
    expect(A.connections().map((c) => c.peerAddress)).toEqual([`127.${NET}.${h}.2`]);
    a.connect({ address: `::ffff:127.${NET}.${h}.2`, port: 4000 });
    expect(a.remoteAddress().address).toBe(`127.${NET}.${h}.2`);
    a.setsockopt(constants.SOL_RDS, constants.RDS_CANCEL_SENT_TO, { address: `::ffff:127.${NET}.${h}.2`, port: 4000 });
  });
});

describe('sendmsg with MSG_ZEROCOPY copies the array of buffers', () => {
  it('reusing the array right after the call changes nothing on the wire', async () => {
    const { a, b, stackA, stackB } = await pair();
    a.setsockopt(constants.SOL_SOCKET, constants.SO_ZEROCOPY, 1);
    const head = Buffer.from('head-');
    const tail = Buffer.from('tail');
    const parts: Buffer[] = [head, tail];
    a.sendmsg(parts, b.address(), { flags: constants.MSG_ZEROCOPY, zcopyCookie: 7 });
    // The application reuses its array for the next message before the first went out.
    parts[1] = Buffer.alloc(3000, 0x41);
    parts.push(Buffer.from('more'));
    const m = await b.recv({ signal: timeout() });
    expect(m.data.toString()).toBe('head-tail');
    a.sendmsg(Buffer.from('after'), b.address());
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('after');
    expect(stackA.counters.get('conn_reset') + stackB.counters.get('conn_reset')).toBe(0);
    expect(stackB.counters.get('recv_drop_protocol_error')).toBe(0);
  });
});

describe('sendmsg during bind()', () => {
  it('says bind() has not finished', async () => {
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT });
    stacks.push(A);
    const s = new RdsSocket({ stack: A });
    const bound = s.bind({ address: `127.${NET}.${++host}.1`, port: 4000 });
    let err: RdsError | null = null;
    try {
      s.sendmsg(Buffer.from('too early'), { address: `127.${NET}.${host}.2`, port: 4000 });
    } catch (e) {
      err = e as RdsError;
    }
    expect(err).toBeInstanceOf(RdsError);
    expect(err!.code).toBe('ENOTCONN');
    expect(err!.message).toMatch(/bind\(\) has not finished; await it/);
    await bound;
    expect(s.sendmsg(Buffer.from('now'), { address: `127.${NET}.${host}.2`, port: 4000 })).toBe(3);
    // Never bound at all: the old message.
    expect(() => new RdsSocket({ stack: A }).sendmsg(Buffer.from('x'), { address: '127.0.0.1', port: 1 })).toThrow(
      /call bind\(\) before sending/,
    );
  });
});
