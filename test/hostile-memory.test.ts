// Issue 18, unbounded memory: peers that ping without acknowledging or reading, senders that
// ignore congestion, and frames that never finish must not make a node's memory grow without
// bound, and must not stop other peers' round trips.
import type { Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { constants, RdsSocket, RdsStack, type TcpTransport, wire } from '../lib/index.js';
import { TEST_TCP_PORT, testNodes, until } from './helpers.js';
import { frameBytes, plainSockets } from './raw-peer.js';

const { node, closeAll } = testNodes();
const plain = plainSockets(TEST_TCP_PORT);
afterEach(async () => {
  plain.destroyAll();
  await closeAll();
});

/** A plain TCP connection to a node's RDS port, from `from` (smaller than the node: a carrier, not a poke). */
const raw = (from: string, to: string): Promise<Socket> => plain.connect(from, to);
const frame = frameBytes;

/** rds-socket's hello claiming acks (so the node keeps what it sends until we acknowledge it). */
function helloClaimingAcks(): Buffer {
  const caps = constants.RDSSOCK_CAP_ACK | (1 << constants.RDSSOCK_CAP_PATHS_SHIFT);
  return frame({
    sequence: 0,
    flags: 4,
    sport: 1,
    dport: 0,
    exthdr: wire.packExtensions([wire.rdsCapsExtension(caps)]),
  });
}

/** Writes `frames` as fast as the socket takes them (respecting its own back-pressure); resolves when all are written or `stop()`. */
async function pour(
  s: Socket,
  count: number,
  make: (i: number) => Buffer,
  stop: () => boolean = () => false,
): Promise<number> {
  let i = 0;
  while (i < count && !stop() && !s.destroyed) {
    if (!s.write(make(i++))) {
      await new Promise<void>((res) => {
        const t = setInterval(() => {
          if (stop() || s.destroyed) {
            clearInterval(t);
            res();
          }
        }, 20);
        s.once('drain', () => {
          clearInterval(t);
          res();
        });
      });
    }
  }
  return i;
}

function pathOf(
  stack: RdsStack,
  peer: string,
): ReturnType<RdsStack['connections']>[number]['paths'][number] | undefined {
  return stack.connections().find((c) => c.peerAddress === peer)?.paths[0];
}

/** Round trips of a good peer to `victim` (which echoes on port 4000): each one's time in ms. */
async function roundTrips(good: RdsSocket, victim: RdsSocket, n = ROUND_TRIPS): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await good.send(Buffer.from(`rt ${i}`), victim.address());
    const m = await victim.recv({ timeout: 5000 });
    await victim.send(m.data, { address: m.address, port: m.port });
    expect((await good.recv({ timeout: 5000 })).data.toString()).toBe(`rt ${i}`);
    times.push(performance.now() - t0);
  }
  return times;
}

/** Round trips measured idle and under each attack (with this many, the p99 is the worst one). */
const ROUND_TRIPS = 30;

function p99(times: number[]): number {
  const s = [...times].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.ceil(0.99 * s.length) - 1)]!;
}

/**
 * The good peer's round trips before the attack, in the same test: the baseline its round trips
 * under attack are held to (a first round trip brings the connection up and is not counted).
 */
async function idleRoundTrips(good: RdsSocket, victim: RdsSocket): Promise<number[]> {
  await roundTrips(good, victim, 1);
  return roundTrips(good, victim);
}

/**
 * Under attack the good peer's p99 round trip stays within max(6 x idle p99, idle p99 + 200 ms),
 * idle measured in the same test. Why these: on a loaded 2-core CI machine (other test files run
 * beside this one) the idle p99 itself moves from a few ms to ~100 ms with the machine's load, so
 * the limit scales with it; the multiple leaves room for the victim's own work for the attacker
 * (it reads and answers every frame of the flood, up to READ_TURN_FRAMES a turn), measured at 1.5x
 * to 4x idle even at a load average of 25 on 2 cores; the allowance covers a single scheduling
 * hiccup or GC pause when idle is 1 to 5 ms. A flood the node bounded only by bytes a turn went to 8x to
 * 11x (issue 33), and one it reads unbounded, 14x to 20x.
 */
function expectUnhurt(idle: number[], attacked: number[]): void {
  const base = p99(idle);
  const limit = Math.max(6 * base, base + 200);
  const ms = (xs: number[]) => xs.map((x) => Math.round(x)).join(' ');
  expect(p99(attacked), `round trips under attack (ms): ${ms(attacked)}; idle: ${ms(idle)}`).toBeLessThanOrEqual(limit);
}

describe('pongs are charged to a per-path budget', () => {
  it('a pinger that claims acks and never acknowledges gets at most maxOwnQueued pongs outstanding; the rest are dropped and counted', async () => {
    const v = await node('127.110.1.2', { maxOwnQueued: 32 });
    const good = await node('127.110.1.3');
    const idle = await idleRoundTrips(good.sock, v.sock);
    const s = await raw('127.110.1.1', '127.110.1.2');
    s.on('data', () => {}); // reads everything, acknowledges nothing
    s.write(helloClaimingAcks());
    const pings = 3000;
    await pour(s, pings, (i) => frame({ sequence: i + 1, sport: 5000, dport: 0 }));
    // recv_ping also counts the good peer's probe.
    await until(() => v.stack.counters.get('recv_ping') >= pings, 'every ping read');
    const p = pathOf(v.stack, '127.110.1.1')!;
    expect(p.sendQueue + p.retransQueue).toBeLessThanOrEqual(32);
    expect(v.stack.counters.get('send_pong')).toBeLessThanOrEqual(32);
    expect(v.stack.counters.get('recv_drop_ping_budget')).toBeGreaterThanOrEqual(pings - 32);
    expectUnhurt(idle, await roundTrips(good.sock, v.sock));
  });

  it('a pinger that stops reading cannot queue pongs without bound, and other peers keep their round trips', async () => {
    const v = await node('127.110.1.12', { maxOwnQueued: 64, handshakeTimeoutMs: 100 });
    const good = await node('127.110.1.13');
    const idle = await idleRoundTrips(good.sock, v.sock);
    const s = await raw('127.110.1.11', '127.110.1.12');
    s.pause(); // never reads: the node's writes back up into its own queues
    // 19 MB of pongs: more than the kernel's socket buffers hold, so they back up into the node.
    const batches = 400;
    const pings = batches * 1000;
    // Made from one template, only the sequence numbers written per batch: the attacker shares
    // this process with the victim and the good peer, and must not spend its CPU (a victim's
    // attacker is another host) making 400,000 frames one by one in the middle of the round trips.
    const template = Buffer.concat(Array.from({ length: 1000 }, () => frame({ sequence: 1, sport: 5000, dport: 0 })));
    const batch = (b: number): Buffer => {
      const out = Buffer.from(template);
      for (let i = 0; i < 1000; i++) out.writeBigUInt64BE(BigInt(b * 1000 + i + 1), i * 48);
      return out;
    };
    let most = 0;
    let attacked: number[] = [];
    const sample = setInterval(() => {
      const p = pathOf(v.stack, '127.110.1.11');
      if (p !== undefined) most = Math.max(most, p.sendQueue + p.retransQueue);
    }, 5);
    try {
      const attack = pour(s, batches, batch);
      attacked = await roundTrips(good.sock, v.sock);
      expect(await attack).toBe(batches);
      await until(() => v.stack.counters.get('recv_ping') >= pings, 'every ping read');
    } finally {
      clearInterval(sample);
    }
    // The probe and at most 63 pongs: everything else was refused.
    expect(most).toBeGreaterThan(0);
    expect(most).toBeLessThanOrEqual(64);
    // Pongs the kernel's buffers took (TCP acknowledged them) made room for a few more; most were refused.
    expect(v.stack.counters.get('recv_drop_ping_budget')).toBeGreaterThan(pings * 0.9);
    expectUnhurt(idle, attacked);
  });
});

describe('senders that ignore congestion are stopped by TCP, not by dropping', () => {
  const SIZE = 16 * 1024;
  const N = 2000; // 32 MiB at one unread port

  async function attackUnreadPort(
    net: number,
    opts: ConstructorParameters<typeof RdsStack>[0],
    rcvbuf: number,
    bound: number,
  ): Promise<void> {
    const victimAddr = `127.110.${net}.2`;
    const v = await node(victimAddr, { handshakeTimeoutMs: 100, ...opts });
    const sink = new RdsSocket({ stack: v.stack });
    sink.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, rcvbuf);
    await sink.bind({ address: victimAddr, port: 4001 });
    const good = await node(`127.110.${net}.3`);
    const idle = await idleRoundTrips(good.sock, v.sock);
    const s = await raw(`127.110.${net}.1`, victimAddr);
    s.on('data', () => {}); // takes the congestion maps, and ignores them
    const body = (i: number): Buffer => {
      const b = Buffer.alloc(SIZE, i & 0xff);
      b.writeUInt32BE(i, 0);
      return b;
    };
    let done = false;
    const queued = (): number =>
      v.stack
        .info()
        .recvQueue.filter((m) => m.localPort === 4001)
        .reduce((a, m) => a + m.bytes, 0);
    let most = 0;
    const sample = setInterval(() => (most = Math.max(most, queued())), 5);
    const attack = pour(
      s,
      N,
      (i) => frame({ sequence: i + 1, sport: 7000, dport: 4001 }, body(i)),
      () => done,
    );
    try {
      // Either the node stops reading and TCP holds the sender back, or the queue outgrows the bound.
      await until(
        () => (v.stack.counters.get('recv_pause_queue_limit') >= 1 && s.writableLength > 0) || most > bound,
        'the sender held back',
      );
    } finally {
      clearInterval(sample);
    }
    expect(most).toBeLessThanOrEqual(bound);
    const before = queued();
    expect(before).toBeLessThanOrEqual(bound);
    // Another peer's round trips still work meanwhile, and the sender gets no further.
    expectUnhurt(idle, await roundTrips(good.sock, v.sock));
    expect(queued()).toBe(before);
    expect(pathOf(v.stack, `127.110.${net}.1`)!.state).toBe('UP');
    // The application reads: reading resumes, and every message arrives, in order, none dropped.
    for (let i = 0; i < N; i++) {
      const m = await sink.recv({ timeout: 5000 });
      expect(m.data.length).toBe(SIZE);
      expect(m.data.readUInt32BE(0)).toBe(i);
      if (i % 100 === 0) expect(queued()).toBeLessThanOrEqual(bound);
    }
    done = true;
    expect(await attack).toBe(N);
    expect(v.stack.counters.get('recv_drop_no_sock') + v.stack.counters.get('recv_drop_protocol_error')).toBe(0);
  }

  it('per socket: past recvHardLimitFactor x SO_RCVBUF the node stops reading that connection until the application reads', async () => {
    // 64 KiB x 16 = 1 MiB, plus what one read (64 KiB) brought in after the limit.
    await attackUnreadPort(
      2,
      { recvHardLimitFactor: 16, recvHardLimitMinBytes: 0 },
      64 * 1024,
      (1 << 20) + 64 * 1024 + SIZE,
    );
  });

  it('a small SO_RCVBUF does not pause the connection on the overshoot of a sender that had data in flight', async () => {
    // 64 x 4 KiB is 256 KiB: a kernel with a TCP window in flight when our map arrives went past
    // it, the connection stopped, and its message to another port (the one the application was
    // waiting for) sat unread behind it. Below recvHardLimitMinBytes (8 MiB) nothing pauses.
    const v = await node('127.110.7.2', { handshakeTimeoutMs: 100 });
    const full = new RdsSocket({ stack: v.stack });
    full.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 4096);
    await full.bind({ address: '127.110.7.2', port: 4001 });
    const s = await raw('127.110.7.1', '127.110.7.2');
    s.on('data', () => {});
    const n = 64; // 1 MiB of 16 KiB messages at the unread port, then one to the port being read
    for (let i = 0; i < n; i++) s.write(frame({ sequence: i + 1, sport: 7000, dport: 4001 }, Buffer.alloc(SIZE, i)));
    s.write(frame({ sequence: n + 1, sport: 7000, dport: 4000 }, Buffer.from('ctrl')));
    const m = await v.sock.recv({ timeout: 5000 });
    expect(m.data.toString()).toBe('ctrl');
    expect(v.stack.counters.get('recv_pause_queue_limit')).toBe(0);
    for (let i = 0; i < n; i++) expect((await full.recv({ timeout: 5000 })).data[0]).toBe(i);
  });

  it('per stack: past maxRecvQueueBytes the same happens, whatever the sockets allow', async () => {
    await attackUnreadPort(
      3,
      { recvHardLimitFactor: 100000, maxRecvQueueBytes: 2 << 20 },
      64 * 1024,
      (2 << 20) + 64 * 1024 + SIZE,
    );
  });
});

describe('a paused connection between rds-socket nodes', () => {
  it('survives the heartbeat while the node does not read it, and delivers everything once the application reads', async () => {
    // Factor 1: the hard limit is SO_RCVBUF itself, so even a sender that honours congestion
    // reaches it with what it had in flight.
    // One path, so the stack's heartbeat counter is that path's.
    const hb = { heartbeatIntervalMs: 100, heartbeatMissedLimit: 3, npaths: 1 };
    const v = await node('127.110.6.2', { recvHardLimitFactor: 1, recvHardLimitMinBytes: 0, ...hb });
    const sender = await node('127.110.6.1', hb);
    const n = 400;
    const sent = (async () => {
      for (let i = 0; i < n; i++) {
        const b = Buffer.alloc(16 * 1024, i & 0xff);
        b.writeUInt32BE(i, 0);
        await sender.sock.send(b, v.sock.address());
      }
    })();
    sent.catch(() => {}); // awaited below; a failure before then is reported there
    await until(() => v.stack.counters.get('recv_pause_queue_limit') >= 1, 'the node stops reading');
    // While it reads nothing, the node keeps the peer hearing from it: several heartbeat periods pass.
    const beats = v.stack.counters.get('heartbeat_sent');
    await until(() => v.stack.counters.get('heartbeat_sent') >= beats + 6, 'six heartbeat periods while paused');
    expect(v.stack.counters.get('heartbeat_timeout') + sender.stack.counters.get('heartbeat_timeout')).toBe(0);
    expect(v.stack.counters.get('conn_reset') + sender.stack.counters.get('conn_reset')).toBe(0);
    for (let i = 0; i < n; i++) expect((await v.sock.recv({ timeout: 5000 })).data.readUInt32BE(0)).toBe(i);
    await sent;
    expect(v.stack.counters.get('heartbeat_timeout') + sender.stack.counters.get('heartbeat_timeout')).toBe(0);
  });
});

describe('a stalled payload cannot pin memory', () => {
  it('frames in progress share a stack-wide cap, connections past it wait, and a frame that never completes is dropped and counted', async () => {
    const victimAddr = '127.110.4.200';
    const cap = 2 << 20;
    const v = await node(victimAddr, { maxPartialFrameBytes: cap, frameTimeoutMs: 1500 });
    const good = await node('127.110.4.201');
    const idle = await idleRoundTrips(good.sock, v.sock);
    const tcp = v.stack.transports.get('tcp') as TcpTransport;
    const attackers = 6;
    const big = 1 << 20;
    for (let k = 0; k < attackers; k++) {
      const s = await raw(`127.110.4.${10 + k}`, victimAddr);
      s.on('data', () => {});
      // A header for 1 MiB and all but its last byte, then nothing.
      s.write(Buffer.concat([frame({ sequence: 1, sport: 7000, dport: 4000, len: big }), Buffer.alloc(big - 1, k)]));
    }
    // Bytes the node has read from the attackers: their frames' memory.
    const read = (): number =>
      v.stack
        .connections()
        .filter((c) => c.peerAddress.startsWith('127.110.4.1'))
        .reduce((a, c) => a + Number(c.paths[0]!.transport?.bytesRead ?? 0), 0);
    const bound = cap + attackers * (64 * 1024 + 48);
    await until(
      () => v.stack.counters.get('recv_pause_partial_limit') >= attackers - 2 || read() > bound,
      'connections past the cap wait',
    );
    let peak = 0;
    const sample = setInterval(() => (peak = Math.max(peak, tcp.partialFrameBytes)), 5);
    try {
      // The waiting connections have read no more than one read past their header.
      expect(read()).toBeLessThanOrEqual(bound);
      // Small messages from a good peer are unaffected.
      expectUnhurt(idle, await roundTrips(good.sock, v.sock));
      // Each stalled frame is dropped once its time is up; the waiting ones get their turn and are too.
      await until(
        () => v.stack.counters.get('recv_drop_frame_timeout') === attackers,
        'every stalled frame dropped',
        20000,
      );
      await until(() => tcp.partialFrameBytes === 0, 'nothing held');
    } finally {
      clearInterval(sample);
    }
    expect(peak).toBeLessThanOrEqual(cap);
    expect(v.sock.recvmsg()).toBeNull();
  });

  it('a large frame that arrives slowly but within frameTimeoutMs is delivered', async () => {
    const v = await node('127.110.5.2', { frameTimeoutMs: 2000 });
    const s = await raw('127.110.5.1', '127.110.5.2');
    s.on('data', () => {});
    const body = Buffer.alloc(512 * 1024, 7);
    const f = frame({ sequence: 1, sport: 7000, dport: 4000 }, body);
    s.write(f.subarray(0, 200 * 1024));
    await until(
      () => (v.stack.transports.get('tcp') as TcpTransport).partialFrameBytes === body.length,
      'frame in progress',
    );
    await new Promise((r) => setTimeout(r, 300));
    s.write(f.subarray(200 * 1024));
    const m = await v.sock.recv({ timeout: 5000 });
    expect(m.data.equals(body)).toBe(true);
    expect(v.stack.counters.get('recv_drop_frame_timeout')).toBe(0);
    expect((v.stack.transports.get('tcp') as TcpTransport).partialFrameBytes).toBe(0);
  });

  it('rejects limits that make no sense', () => {
    expect(() => new RdsStack({ maxPartialFrameBytes: 1000 })).toThrow(/maxPartialFrameBytes/);
    expect(() => new RdsStack({ frameTimeoutMs: 0 })).toThrow(/frameTimeoutMs/);
    expect(() => new RdsStack({ recvHardLimitFactor: 0 })).toThrow(/recvHardLimitFactor/);
    expect(() => new RdsStack({ maxRecvQueueBytes: -1 })).toThrow(/maxRecvQueueBytes/);
    expect(() => new RdsStack({ maxOwnQueued: 0 })).toThrow(/maxOwnQueued/);
  });
});
