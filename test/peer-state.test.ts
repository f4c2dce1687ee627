import { afterEach, describe, expect, it, vi } from 'vitest';
import { RdsError, RdsSocket, RdsStack, constants } from '../lib/index.js';
import type { PeerEvent } from '../lib/core/ext/peer-state.js';
import { TEST_TCP_PORT, timeout, until } from './helpers.js';

// A dead peer must not silently stall a socket (issue 17): peer reachability events and
// stack.peers(), SO_SNDTIMEO, and an EAGAIN that names who holds the send budget.
const NET = 120;
const { SOL_SOCKET, SO_SNDTIMEO, SOL_RDS, RDS_CANCEL_SENT_TO, POLLOUT } = constants;
let sub = 0;
let stacks: RdsStack[] = [];
afterEach(async () => {
  for (const s of stacks) await s.close();
  stacks = [];
});

function stack(opts: ConstructorParameters<typeof RdsStack>[0] = {}): RdsStack {
  const s = new RdsStack({ tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 50, ...opts });
  stacks.push(s);
  return s;
}

/** Two fresh addresses: `near` (numerically smaller, so it initiates TCP) and `far`. */
function addrs(): { near: string; far: string; other: string } {
  const base = `127.${NET}.${++sub}`;
  return { near: `${base}.1`, far: `${base}.2`, other: `${base}.3` };
}

async function bound(
  st: RdsStack,
  address: string,
  port = 4000,
  opts: { sendTimeout?: number } = {},
): Promise<RdsSocket> {
  const s = new RdsSocket({ stack: st, ...opts });
  await s.bind({ address, port });
  return s;
}

function events(target: { on(ev: 'peer-down' | 'peer-up', fn: (e: PeerEvent) => void): unknown }): {
  down: PeerEvent[];
  up: PeerEvent[];
} {
  const got = { down: [] as PeerEvent[], up: [] as PeerEvent[] };
  target.on('peer-down', (e) => got.down.push(e));
  target.on('peer-up', (e) => got.up.push(e));
  return got;
}

describe("'peer-down' / 'peer-up' and stack.peers()", () => {
  it('reports a peer that never answers as down after peerDownMs, on the stack and on the socket with traffic for it, and up when it comes', async () => {
    const { near, far, other } = addrs();
    const A = stack({ peerDownMs: 200 });
    const a = await bound(A, near);
    const idle = await bound(A, other); // sends nothing to the peer: hears nothing
    const onStack = events(A);
    const onA = events(a);
    const onIdle = events(idle);
    const t0 = Date.now();
    for (let i = 0; i < 3; i++) a.sendmsg(Buffer.alloc(100, i), { address: far, port: 4000 });
    await until(() => onA.down.length === 1 && onStack.down.length === 1, 'peer-down');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(195);
    expect(onStack.down[0]).toEqual(onA.down[0]);
    expect(onA.down[0]!.address).toBe(far);
    expect(onA.down[0]!.unreachableMs).toBeGreaterThanOrEqual(195);
    expect(onA.down[0]!.unreachableSince).toBeGreaterThanOrEqual(t0 - 5);
    const p = A.peers().find((x) => x.address === far)!;
    expect(p).toMatchObject({ address: far, state: 'down', pathsUp: 0, queuedMessages: 3, queuedBytes: 300 });
    expect(p.unreachableMs).toBeGreaterThanOrEqual(195);

    // The peer starts: the queued messages arrive, 'peer-up' says how long it was away.
    const B = stack();
    const b = await bound(B, far);
    for (let i = 0; i < 3; i++) expect((await b.recv({ signal: timeout() })).data).toEqual(Buffer.alloc(100, i));
    await until(() => onA.up.length === 1 && onStack.up.length === 1, 'peer-up');
    expect(onA.up[0]!.address).toBe(far);
    expect(onA.up[0]!.unreachableMs).toBeGreaterThanOrEqual(onA.down[0]!.unreachableMs);
    expect(onA.up[0]!.unreachableSince).toBe(onA.down[0]!.unreachableSince);
    await a.flush({ signal: timeout() });
    expect(A.peers().find((x) => x.address === far)).toMatchObject({
      state: 'up',
      unreachableMs: 0,
      queuedMessages: 0,
      queuedBytes: 0,
    });
    expect(A.peers().find((x) => x.address === far)!.pathsUp).toBeGreaterThan(0);
    expect(onIdle.down.length + onIdle.up.length).toBe(0);
    expect(onA.down.length).toBe(1);
  });

  it('a peer that was up is down once no path has been UP for peerDownMs; a socket that sends to it later hears too', async () => {
    const { near, far } = addrs();
    const A = stack({ peerDownMs: 150 });
    const B = stack();
    const a = await bound(A, near);
    const b = await bound(B, far);
    a.sendmsg(Buffer.from('hello'), b.address());
    await b.recv({ signal: timeout() });
    await a.flush({ signal: timeout() });
    const onStack = events(A);
    const onA = events(a);
    await B.close();
    await until(() => onStack.down.length === 1, 'peer-down on the stack');
    // Measured from when its last path left UP (during close, which may take a while on a busy machine).
    expect(onStack.down[0]!.unreachableMs).toBeGreaterThanOrEqual(140);
    expect(onStack.down[0]!.address).toBe(far);
    // Socket a had nothing queued for it: not told.
    expect(onA.down).toHaveLength(0);
    expect(A.peers().find((x) => x.address === far)).toMatchObject({ state: 'down', pathsUp: 0 });
    // Now it sends there: it learns at once (after the call returns) that the peer is down.
    a.sendmsg(Buffer.from('anyone?'), { address: far, port: 4000 });
    expect(onA.down).toHaveLength(0);
    await until(() => onA.down.length === 1, 'peer-down on the socket');
    expect(onA.down[0]!.address).toBe(far);
    expect(onA.down[0]!.unreachableMs).toBeGreaterThanOrEqual(140);
    // Told once, however many more messages go there.
    a.sendmsg(Buffer.from('anyone??'), { address: far, port: 4000 });
    await new Promise((r) => setImmediate(r));
    expect(onA.down).toHaveLength(1);
  });

  it('a peer back within peerDownMs is never reported down', async () => {
    const { near, far } = addrs();
    const A = stack({ peerDownMs: 60000 });
    const a = await bound(A, near);
    const onStack = events(A);
    a.sendmsg(Buffer.from('early'), { address: far, port: 4000 });
    await until(() => A.peers().some((p) => p.address === far && p.state === 'unreachable'), 'unreachable');
    const B = stack();
    const b = await bound(B, far);
    await b.recv({ signal: timeout() });
    await until(() => A.peers().some((p) => p.address === far && p.state === 'up'), 'up');
    await new Promise((r) => setImmediate(r));
    expect(onStack.down.length + onStack.up.length).toBe(0);
  });

  it('peerDownMs is validated; Infinity never declares a peer down', () => {
    expect(() => new RdsStack({ peerDownMs: -1 })).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(() => new RdsStack({ peerDownMs: 1.5 })).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(() => new RdsStack({ peerDownMs: 2 ** 31 })).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(stack({ peerDownMs: Infinity }).options.peerDownMs).toBe(Infinity);
    expect(stack().options.peerDownMs).toBe(5000);
  });

  it('closing the stack stops a pending peer-down (no event, no timer keeping anything)', async () => {
    const { near, far } = addrs();
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT, peerDownMs: 100 });
    const a = await bound(A, near);
    const onStack = events(A);
    a.sendmsg(Buffer.from('x'), { address: far, port: 4000 });
    await A.close();
    await new Promise((r) => setTimeout(r, 200));
    expect(onStack.down).toHaveLength(0);
  });
});

describe('SO_SNDTIMEO', () => {
  it('reads back as set (ms), is also a constructor option, and refuses values a timer cannot take', async () => {
    const { near } = addrs();
    const A = stack();
    const a = await bound(A, near);
    expect(a.getsockopt(SOL_SOCKET, SO_SNDTIMEO)).toBe(0);
    a.setsockopt(SOL_SOCKET, SO_SNDTIMEO, 1500);
    expect(a.getsockopt(SOL_SOCKET, SO_SNDTIMEO)).toBe(1500);
    expect(a.getsockopt(SOL_SOCKET, constants.SO_SNDTIMEO_NEW)).toBe(1500);
    expect(SO_SNDTIMEO).toBe(21);
    for (const bad of [-1, 2 ** 31, 1.5, NaN, '100']) {
      expect(() => a.setsockopt(SOL_SOCKET, SO_SNDTIMEO, bad)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    }
    expect(new RdsSocket({ stack: A, sendTimeout: 250 }).getsockopt(SOL_SOCKET, SO_SNDTIMEO)).toBe(250);
    expect(() => new RdsSocket({ stack: A, sendTimeout: -5 })).toThrow(expect.objectContaining({ code: 'EINVAL' }));
  });

  it('gives up messages to an unreachable destination: confirmations reject ETIMEDOUT, the budget returns, nothing is sent later', async () => {
    const { near, far } = addrs();
    const A = stack();
    const a = await bound(A, near, 4000, { sendTimeout: 200 });
    const dead = { address: far, port: 4000 };
    let filled = 0;
    try {
      for (;;) {
        a.sendmsg(Buffer.alloc(1024, 1), dead);
        filled++;
      }
    } catch (e) {
      expect((e as RdsError).code).toBe('EAGAIN');
    }
    expect(a.poll() & POLLOUT).toBe(0);
    const t0 = Date.now();
    const confirm = a.send(Buffer.from('last'), dead, { confirm: true }).catch((e: unknown) => e);
    const err = (await confirm) as RdsError;
    // It waited for room, was queued when the first batch timed out, then timed out itself.
    expect(err).toBeInstanceOf(RdsError);
    expect(err.code).toBe('ETIMEDOUT');
    expect(err.message).toMatch(/SO_SNDTIMEO \(200 ms\)/);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(190);
    expect(A.counters.get('send_cancelled')).toBe(filled + 1);
    expect(a.poll() & POLLOUT).not.toBe(0);
    await a.flush({ signal: timeout(2000) });
    // The peer appears: none of the given-up messages reach it, a new one does.
    const B = stack();
    const b = await bound(B, far);
    a.sendmsg(Buffer.from('fresh'), dead);
    const m = await b.recv({ signal: timeout() });
    expect(m.data.toString()).toBe('fresh');
    await a.flush({ signal: timeout() });
    expect(b.recvmsg()).toBeNull();
  });

  it('deadlines are per message: a later message to another dead destination lives its full timeout; live destinations are untouched', async () => {
    const { near, far, other } = addrs();
    const A = stack();
    const B = stack();
    const live = await bound(B, far);
    const a = await bound(A, near);
    a.setsockopt(SOL_SOCKET, SO_SNDTIMEO, 300);
    const first = a.send(Buffer.from('1'), { address: other, port: 4000 }, { confirm: true }).then(
      () => Date.now(),
      (e: RdsError) => [e.code, Date.now()] as const,
    );
    const t0 = Date.now();
    // A live peer keeps working through the timeout period.
    for (let i = 0; i < 5; i++) {
      const [, m] = await Promise.all([
        a.send(Buffer.from(`live ${i}`), live.address(), { confirm: true, signal: timeout() }),
        live.recv({ signal: timeout() }),
      ]);
      expect(m.data.toString()).toBe(`live ${i}`);
    }
    await new Promise((r) => setTimeout(r, 150));
    const second = a.send(Buffer.from('2'), { address: other, port: 4001 }, { confirm: true }).then(
      () => Date.now(),
      (e: RdsError) => [e.code, Date.now()] as const,
    );
    const t1 = Date.now();
    let secondDone = false;
    void second.then(() => {
      secondDone = true;
    });
    const r1 = await first;
    expect(Array.isArray(r1) && r1[0]).toBe('ETIMEDOUT');
    expect((r1 as readonly [string, number])[1] - t0).toBeGreaterThanOrEqual(290);
    // When the first expired, the second (another port, queued 150 ms later) was still pending.
    await new Promise((r) => setImmediate(r));
    expect(secondDone).toBe(false);
    const r2 = await second;
    expect(Array.isArray(r2) && r2[0]).toBe('ETIMEDOUT');
    expect((r2 as readonly [string, number])[1] - t1).toBeGreaterThanOrEqual(290);
  });

  it('an expired message takes every message to its destination port with it, as RDS_CANCEL_SENT_TO does', async () => {
    const { near, far } = addrs();
    const A = stack();
    const a = await bound(A, near);
    a.setsockopt(SOL_SOCKET, SO_SNDTIMEO, 200);
    const p1 = a
      .send(Buffer.from('old'), { address: far, port: 4000 }, { confirm: true })
      .catch((e: RdsError) => e.code);
    await new Promise((r) => setTimeout(r, 120));
    const p2 = a
      .send(Buffer.from('new'), { address: far, port: 4000 }, { confirm: true })
      .catch((e: RdsError) => e.code);
    const p3 = a
      .send(Buffer.from('elsewhere'), { address: far, port: 4001 }, { confirm: true })
      .catch((e: RdsError) => e.code);
    expect(await p1).toBe('ETIMEDOUT');
    expect(await p2).toBe('ETIMEDOUT');
    // Port 4001's message is younger and to another port: still pending until its own deadline.
    let p3done = false;
    void p3.then(() => {
      p3done = true;
    });
    await new Promise((r) => setImmediate(r));
    expect(p3done).toBe(false);
    expect(await p3).toBe('ETIMEDOUT');
    // Cancelling works as before alongside it.
    a.setsockopt(SOL_SOCKET, SO_SNDTIMEO, 0);
    const p4 = a.send(Buffer.from('x'), { address: far, port: 4000 }, { confirm: true }).catch((e: RdsError) => e.code);
    a.setsockopt(SOL_RDS, RDS_CANCEL_SENT_TO, { address: far, port: 4000 });
    expect(await p4).toBe('ECANCELED');
  });

  it('uses one timer per socket however many messages wait', async () => {
    const { near, far } = addrs();
    const A = stack();
    const a = await bound(A, near);
    a.setsockopt(SOL_SOCKET, constants.SO_SNDBUF, 1 << 20);
    const T = 987_654;
    const spy = vi.spyOn(globalThis, 'setTimeout');
    try {
      a.setsockopt(SOL_SOCKET, SO_SNDTIMEO, T);
      for (let i = 0; i < 200; i++) a.sendmsg(Buffer.alloc(100), { address: far, port: 4000 + (i % 7) });
      const ours = spy.mock.calls.filter(([, ms]) => typeof ms === 'number' && ms > T - 5000 && ms <= T);
      expect(ours).toHaveLength(1);
    } finally {
      spy.mockRestore();
    }
  });

  it('set while messages wait: they count from the moment it was set', async () => {
    const { near, far } = addrs();
    const A = stack();
    const a = await bound(A, near);
    const p = a
      .send(Buffer.from('waiting'), { address: far, port: 4000 }, { confirm: true })
      .catch((e: RdsError) => e.code);
    await new Promise((r) => setTimeout(r, 50));
    const t0 = Date.now();
    a.setsockopt(SOL_SOCKET, SO_SNDTIMEO, 100);
    expect(await p).toBe('ETIMEDOUT');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(95);
  });
});

describe('EAGAIN names the destination holding the budget', () => {
  it('says how much is queued to whom, for how long it has been unreachable, and what to do', async () => {
    const { near, far, other } = addrs();
    const A = stack({ peerDownMs: 100 });
    const B = stack();
    const live = await bound(B, other);
    const a = await bound(A, near);
    const onA = events(a);
    let n = 0;
    try {
      for (;;) {
        a.sendmsg(Buffer.alloc(1024), { address: far, port: 4000 });
        n++;
      }
    } catch {
      /* full */
    }
    expect(n).toBe(104);
    await until(() => onA.down.length === 1, 'peer-down');
    let err: RdsError | null = null;
    try {
      a.sendmsg(Buffer.from('to a live peer'), live.address());
    } catch (e) {
      err = e as RdsError;
    }
    expect(err?.code).toBe('EAGAIN');
    expect(err!.message).toMatch(
      new RegExp(
        `^EAGAIN: send buffer full \\(106496 of 106496 bytes unacknowledged\\): 104 messages / 106 KB queued to ${far.replace(/\./g, '\\.')}:4000, ` +
          'unreachable for \\d+ (ms|s); cancel with RDS_CANCEL_SENT_TO or set SO_SNDTIMEO$',
      ),
    );
    expect(Number(/unreachable for (\d+) ms/.exec(err!.message)?.[1] ?? 1000)).toBeGreaterThanOrEqual(100);
    expect(String(err)).toContain('104 messages');
  });

  it('a destination that is reachable but slow is named without a cancel hint', async () => {
    const { near, far } = addrs();
    const A = stack();
    const B = stack();
    const b = await bound(B, far);
    b.setsockopt(SOL_SOCKET, constants.SO_RCVBUF, 1 << 20);
    const a = await bound(A, near);
    a.sendmsg(Buffer.from('up'), b.address());
    await b.recv({ signal: timeout() });
    // A receiver that does not read keeps its messages unacknowledged (ackDelayMaxMs default 1 s).
    let err: RdsError | null = null;
    for (let i = 0; i < 200 && err === null; i++) {
      try {
        a.sendmsg(Buffer.alloc(4096), b.address());
      } catch (e) {
        err = e as RdsError;
      }
    }
    expect(err?.code).toBe('EAGAIN');
    expect(err!.message).toMatch(
      new RegExp(
        `queued to ${far.replace(/\./g, '\\.')}:4000, reachable but not yet acknowledged; wait for 'writable' or use send\\(\\)$`,
      ),
    );
  });
});
