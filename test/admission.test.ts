import type { Socket } from 'node:net';
import * as tls from 'node:tls';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LoopTransport, type RdsSocket, RdsStack, TcpTransport, constants } from '../lib/index.js';
import { plainSockets, rawConnect } from './raw-peer.js';
import { tlsMaterial } from '../bench/attacks/tls-material.mjs';
import { TEST_TCP_PORT, testNodes, until } from './helpers.js';

// Issue 18: hostile peers and strangers against admission, TLS and per-peer state.
// Addresses 127.100.x.y .. 127.109.x.y belong to this file.

const { node, closeAll } = testNodes();
const plain = plainSockets(TEST_TCP_PORT);
afterEach(async () => {
  plain.destroyAll();
  await closeAll();
});

type StackOpts = ConstructorParameters<typeof RdsStack>[0];

/** A plain TCP connection from `from` to the node's RDS port that sends nothing. */
const idleConnection = (from: string, to: string): Socket => plain.start(from, to);

/** Resolves once a message arrives on `sock`, with the time it took from `t0`. */
async function recvWithin(sock: RdsSocket, ms: number): Promise<{ text: string; ms: number }> {
  const t0 = Date.now();
  const m = await sock.recv({ timeout: ms });
  return { text: m.data.toString(), ms: Date.now() - t0 };
}

describe('TLS admission', () => {
  let pki: ReturnType<typeof tlsMaterial>;
  beforeAll(() => {
    pki = tlsMaterial(['a', 'b']);
  });
  afterAll(() => pki.remove());

  const tlsOpts = (who: string) => pki.buffers(who);
  const tlsNode = (address: string, who: string, opts: StackOpts = {}) =>
    node(address, {
      ...opts,
      transports: [new TcpTransport({ tls: tlsOpts(who) }), new LoopTransport()],
    });

  /** A CA-signed TLS client from `from` that completes its handshake and then sends nothing. */
  function signedClient(from: string, to: string): Promise<'secure' | 'refused'> {
    return new Promise((resolve) => {
      const s = tls.connect({
        host: to,
        port: TEST_TCP_PORT,
        localAddress: from,
        ...tlsOpts('b'),
        checkServerIdentity: () => undefined,
      });
      plain.track(s);
      s.on('secureConnect', () => resolve('secure'));
      s.on('error', () => resolve('refused'));
      s.on('close', () => resolve('refused'));
    });
  }

  it('refusing CA-signed peers (outside allowPeers, over the unidentified limit) never throws; the node keeps serving', async () => {
    const v = await tlsNode('127.100.1.200', 'a', {
      allowPeers: ['127.100.1.0/25'],
      maxUnidentifiedConnections: 2,
      headerTimeoutMs: 2000,
    });
    // Outside the allowlist, with a valid certificate.
    expect(await signedClient('127.100.1.130', '127.100.1.200')).toBe('refused');
    expect(v.stack.counters.get('conn_refused_allowlist')).toBe(1);
    // Twelve allowed, CA-signed peers at once (a cluster restart) against two unidentified slots.
    const outcomes = await Promise.all(
      Array.from({ length: 12 }, (_, i) => signedClient(`127.100.1.${10 + i}`, '127.100.1.200')),
    );
    expect(outcomes.filter((o) => o === 'secure').length).toBeLessThanOrEqual(2);
    expect(v.stack.counters.get('conn_refused_limit')).toBeGreaterThanOrEqual(10);
    plain.destroyAll();
    // Still up: a good peer gets a round trip.
    const a = await tlsNode('127.100.1.1', 'b');
    a.sock.sendmsg(Buffer.from('ping'), v.sock.address());
    const m = await v.sock.recv({ timeout: 10000 });
    expect(m.data.toString()).toBe('ping');
    v.sock.sendmsg(Buffer.from('pong'), { address: m.address, port: m.port });
    expect((await a.sock.recv({ timeout: 10000 })).data.toString()).toBe('pong');
  });

  it('idle TCP connections to a TLS node are refused or timed out before the handshake, and a good peer still gets through', async () => {
    const v = await tlsNode('127.101.1.200', 'a', { maxUnidentifiedConnections: 8, headerTimeoutMs: 400 });
    const idle: Socket[] = [];
    // In batches, so the kernel's accept queue (64) never overflows: every connection reaches the node.
    for (let i = 0; i < 300; i++) {
      idle.push(idleConnection(`127.101.${2 + (i >> 7)}.${1 + (i & 127)}`, '127.101.1.200'));
      if (i % 25 === 24)
        await until(
          () => idle.filter((s) => !s.destroyed && !s.closed).length <= 8,
          'connections over the limit refused',
        );
    }
    // Over the limit: refused at once; the ones that got a slot never start a handshake: timed out.
    const { counters } = v.stack;
    await until(
      () => counters.get('conn_refused_limit') + counters.get('conn_refused_tls') === 300,
      'every idle connection refused or timed out',
      5000,
    );
    expect(counters.get('conn_refused_limit')).toBeGreaterThanOrEqual(200);
    expect(counters.get('conn_refused_tls')).toBeGreaterThanOrEqual(8);
    const a = await tlsNode('127.101.1.1', 'b');
    const t0 = Date.now();
    a.sock.sendmsg(Buffer.from('ping'), v.sock.address());
    const m = await v.sock.recv({ timeout: 5000 });
    v.sock.sendmsg(Buffer.from('pong'), { address: m.address, port: m.port });
    expect((await a.sock.recv({ timeout: 5000 })).data.toString()).toBe('pong');
    expect(Date.now() - t0).toBeLessThan(3000);
    await until(() => idle.every((s) => s.destroyed || s.closed), 'every idle connection closed by the node', 5000);
  });

  it("first contact works in both address orders: the larger node's poke survives TLS", async () => {
    for (const [low, high, sender] of [
      ['127.102.1.1', '127.102.1.2', 'high'],
      ['127.102.2.1', '127.102.2.2', 'low'],
    ] as const) {
      const a = await tlsNode(low, 'a');
      const b = await tlsNode(high, 'b');
      const [from, to] = sender === 'high' ? [b, a] : [a, b];
      from.sock.sendmsg(Buffer.from(`first from ${sender}`), to.sock.address());
      expect((await recvWithin(to.sock, 5000)).text).toBe(`first from ${sender}`);
      expect(a.stack.counters.get('conn_refused_tls')).toBe(0);
      expect(b.stack.counters.get('conn_refused_tls')).toBe(0);
      if (sender === 'high') expect(a.stack.counters.get('conn_poke_received')).toBeGreaterThanOrEqual(1);
    }
  });
});

describe('known peers and strangers', () => {
  it('a known peer that reconnects gets in at once while strangers hold every unidentified slot', async () => {
    const v = await node('127.103.1.200', { maxUnidentifiedConnections: 8, headerTimeoutMs: 6000 });
    let a = await node('127.103.1.1');
    a.sock.sendmsg(Buffer.from('hello'), v.sock.address());
    expect((await v.sock.recv({ timeout: 5000 })).data.toString()).toBe('hello');
    // Strangers take every slot and take a new one whenever the node frees one.
    let flooding = true;
    let next = 0;
    const flood = (): void => {
      if (!flooding) return;
      const s = idleConnection(`127.103.0.${1 + (next++ % 200)}`, '127.103.1.200');
      s.once('close', flood);
    };
    for (let i = 0; i < 24; i++) flood();
    await until(() => v.stack.counters.get('conn_refused_limit') >= 16, 'slots full');
    try {
      // The peer restarts (its connections drop) and comes back while the slots are full.
      await a.stack.close();
      a = await node('127.103.1.1');
      a.sock.sendmsg(Buffer.from('back'), v.sock.address());
      const got = await recvWithin(v.sock, 5000);
      expect(got.text).toBe('back');
      expect(got.ms).toBeLessThan(1500); // well under headerTimeoutMs (6 s), when a stranger's slot would free
    } finally {
      flooding = false;
    }
  });

  it('one-shot strangers leave no connection state after the idle time, and the node stops dialling them', async () => {
    const v = await node('127.104.1.200', { peerIdleTimeoutMs: 300, headerTimeoutMs: 2000 });
    let attempts = 0;
    v.stack.on('state', (e) => {
      if (e.to === 'CONNECTING') attempts++;
    });
    // 200 strangers from distinct addresses, half below the node's address (they connect) and
    // half above it (their connection is a poke), each connecting once and leaving.
    const closed: Promise<void>[] = [];
    for (let i = 0; i < 200; i++) {
      const from = i < 100 ? `127.104.0.${1 + i}` : `127.104.2.${1 + i - 100}`;
      const s = idleConnection(from, '127.104.1.200');
      closed.push(new Promise((res) => s.once('close', () => res())));
      s.once('connect', () => s.destroy());
    }
    await Promise.all(closed);
    await until(() => v.stack.connections().length === 0, 'every stranger forgotten', 5000);
    expect(v.stack.counters.get('conn_reclaimed')).toBeGreaterThanOrEqual(100);
    // Nothing keeps dialling them: no connection attempt in a further 3x the idle time.
    const before = attempts;
    const t0 = Date.now();
    await until(() => Date.now() - t0 >= 900, 'quiet period', 2000);
    expect(attempts).toBe(before);
    expect(v.stack.connections().length).toBe(0);
  });

  it('a connection with queued messages is never reclaimed: it keeps trying and delivers when the peer appears', async () => {
    const v = await node('127.104.5.200', { peerIdleTimeoutMs: 100 });
    v.sock.sendmsg(Buffer.from('kept'), { address: '127.104.5.1', port: 4000 });
    const t0 = Date.now();
    await until(() => Date.now() - t0 >= 600, 'several idle periods', 2000);
    v.stack.reclaimIdleConnections();
    const c = v.stack.connections();
    expect(c.length).toBe(1);
    expect(c[0]!.paths[0]!.sendQueue).toBeGreaterThanOrEqual(1);
    const p = await node('127.104.5.1');
    expect((await recvWithin(p.sock, 5000)).text).toBe('kept');
  });

  it('a forgotten peer that comes back and resends what was delivered has the copies dropped', async () => {
    const v = await node('127.104.7.200', { peerIdleTimeoutMs: 100 });
    const first = await rawConnect('127.104.7.1', '127.104.7.200', TEST_TCP_PORT);
    first.send({ sequence: 1, sport: 9, dport: 4000 }, Buffer.from('one'));
    first.send({ sequence: 2, sport: 9, dport: 4000 }, Buffer.from('two'));
    expect((await recvWithin(v.sock, 5000)).text).toBe('one');
    expect((await recvWithin(v.sock, 5000)).text).toBe('two');
    first.sock.destroy();
    await until(() => v.stack.connections().length === 0, 'the peer forgotten', 5000);
    // Back, with 2 again (its acknowledgement was lost with the connection), then 3.
    const again = await rawConnect('127.104.7.1', '127.104.7.200', TEST_TCP_PORT);
    again.send({ sequence: 2, sport: 9, dport: 4000, flags: constants.RDS_FLAG_RETRANSMITTED }, Buffer.from('two'));
    again.send({ sequence: 3, sport: 9, dport: 4000 }, Buffer.from('three'));
    expect((await recvWithin(v.sock, 5000)).text).toBe('three');
    expect(v.stack.counters.get('recv_drop_old_seq')).toBe(1);
    again.sock.destroy();
  });

  it("a poke ends a long backoff at once: the poker's messages (and ours for it) need not wait", async () => {
    // A (smaller) has a message for B while B is down: its attempts fail and back off to seconds.
    const a = await node('127.105.1.1', { reconnectMinDelayMs: 4000, reconnectMaxDelayMs: 20000 });
    a.sock.sendmsg(Buffer.from('queued for b'), { address: '127.105.1.2', port: 4000 });
    await until(() => (a.stack.connections()[0]?.paths[0]?.connectFailures ?? 0) >= 2, 'two failed attempts', 10000);
    // B appears and has something for A: it pokes; A must connect now, not after its backoff.
    const b = await node('127.105.1.2');
    const t0 = Date.now();
    b.sock.sendmsg(Buffer.from('hi a'), a.sock.address());
    expect((await recvWithin(a.sock, 10000)).text).toBe('hi a');
    expect((await recvWithin(b.sock, 10000)).text).toBe('queued for b');
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(a.stack.counters.get('conn_poke_received')).toBeGreaterThanOrEqual(1);
  });

  it('the idle time is an option that rejects nonsense', () => {
    expect(() => new RdsStack({ peerIdleTimeoutMs: 0 })).toThrow(/peerIdleTimeoutMs/);
    expect(new RdsStack({ peerIdleTimeoutMs: Infinity }).options.peerIdleTimeoutMs).toBe(Infinity);
  });
});
