import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { RdsError, RdsSocket, RdsStack, constants, wire, type RdsStackOptions } from '../lib/index.js';
import { RawListener, READ_REPORTING_CAPS as caps, rawConnect } from './raw-peer.js';
import { cleanupsPerTest, payload, TEST_TCP_PORT, until } from './helpers.js';

// send({ confirm: true }) between rds-socket nodes resolves only once the receiving application
// has read the message; acknowledging unread messages "as queued" (ackDelayMaxMs) is flow control.
// Addresses: 127.130.x.y .. 127.139.x.y (this file only).
const LAZY = fileURLToPath(new URL('./fixtures/lazy-receiver.mjs', import.meta.url));

const cleanups = cleanupsPerTest();

function node(opts: RdsStackOptions = {}): RdsStack {
  const s = new RdsStack({ tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 50, ...opts });
  cleanups.push(() => s.close());
  return s;
}

async function bound(stack: RdsStack, address: string, port = 4000): Promise<RdsSocket> {
  const s = new RdsSocket({ stack });
  await s.bind({ address, port });
  return s;
}

/** Sends messages from..to-1 with confirm; records each outcome ('ok' or the error code) as it settles. */
function sendRange(
  s: RdsSocket,
  dest: { address: string; port: number },
  from: number,
  to: number,
  outcomes: Map<number, string>,
): Promise<void>[] {
  const out: Promise<void>[] = [];
  for (let i = from; i < to; i++) {
    out.push(
      s.send(payload(i, 100), dest, { confirm: true, timeout: 20000 }).then(
        () => void outcomes.set(i, 'ok'),
        (e: RdsError) => void outcomes.set(i, e.code),
      ),
    );
  }
  return out;
}

function tally(outcomes: Map<number, string>): Record<string, number> {
  const t: Record<string, number> = {};
  for (const v of outcomes.values()) t[v] = (t[v] ?? 0) + 1;
  return t;
}

/** Every confirmed message reached the receiving application. */
function expectNoConfirmedButLost(outcomes: Map<number, string>, delivered: Set<number>): void {
  const lost = [...outcomes].filter(([i, v]) => v === 'ok' && !delivered.has(i)).map(([i]) => i);
  expect(lost, 'confirmed but never delivered').toEqual([]);
}

/** A raw peer's pong: one path, generation `gen`, `caps`. */
function pong(c: { send(f: Record<string, unknown>): void }, gen: number, ack = 0): void {
  c.send({
    sequence: 1,
    sport: 0,
    dport: 1,
    ack,
    exthdr: wire.packExtensions([wire.npathsExtension(1), wire.genNumExtension(gen), wire.rdsCapsExtension(caps)]),
  });
}

describe('confirm means "the receiving application has it" (rds-socket peers)', () => {
  it('a receiving socket closed with an unread backlog and bound again: its unread messages reject (ECONNRESET), none is confirmed and lost', async () => {
    const A = node({ ackDelayMaxMs: 50 });
    const B = node({ ackDelayMaxMs: 50 });
    const a = await bound(A, '127.130.1.1');
    let b = await bound(B, '127.130.1.2');
    const dest = { address: '127.130.1.2', port: 4000 };
    const outcomes = new Map<number, string>();
    const delivered = new Set<number>();
    const all = sendRange(a, dest, 0, 200, outcomes);
    for (let k = 0; k < 50; k++) delivered.add((await b.recv({ timeout: 10000 })).data.readUInt32BE(0));
    // The 150 unread ones are acknowledged as queued once they waited 50 ms: budget back.
    await a.flush({ timeout: 10000 });
    await until(() => outcomes.size >= 50, 'the 50 read messages confirmed');
    expect(tally(outcomes)).toEqual({ ok: 50 });
    await b.close();
    // Meanwhile nothing is bound: dropped as the kernel drops them, and the sender is told.
    all.push(...sendRange(a, dest, 200, 220, outcomes));
    await until(() => outcomes.size >= 220, 'the 150 discarded and 20 refused messages settled');
    b = await bound(B, '127.130.1.2');
    all.push(...sendRange(a, dest, 220, 400, outcomes));
    for (let k = 0; k < 180; k++) delivered.add((await b.recv({ timeout: 10000 })).data.readUInt32BE(0));
    await Promise.all(all);
    expectNoConfirmedButLost(outcomes, delivered);
    expect(tally(outcomes)).toEqual({ ok: 230, ECONNRESET: 150, ECONNREFUSED: 20 });
    expect(B.counters.get('recv_drop_no_sock')).toBe(20);
    expect(A.counters.get('send_refused_no_sock')).toBe(20);
    expect(A.counters.get('send_discarded_unread')).toBe(150);
  });

  it('a message to a port no socket has bound: dropped, counted on both sides, the confirmation rejects with ECONNREFUSED', async () => {
    const A = node();
    const B = node();
    const a = await bound(A, '127.130.2.1');
    await bound(B, '127.130.2.2');
    const err = await a
      .send(Buffer.from('anyone?'), { address: '127.130.2.2', port: 4999 }, { confirm: true, timeout: 10000 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RdsError);
    expect((err as RdsError).code).toBe('ECONNREFUSED');
    expect((err as RdsError).message).toContain('127.130.2.2:4999');
    expect(B.counters.get('recv_drop_no_sock')).toBe(1);
    expect(A.counters.get('send_refused_no_sock')).toBe(1);
    // Without confirm the sender is told all the same (the message's budget came back long before).
    a.sendmsg(Buffer.from('again'), { address: '127.130.2.2', port: 4999 });
    await until(() => A.counters.get('send_refused_no_sock') === 2, 'second refusal counted');
  });

  it('over loopback: a message to an unbound port rejects with ECONNREFUSED, one read resolves', async () => {
    const A = node();
    const a = await bound(A, '127.130.5.1');
    const b = await bound(A, '127.130.5.2');
    const err = await a
      .send(Buffer.from('anyone?'), { address: '127.130.5.2', port: 4999 }, { confirm: true, timeout: 10000 })
      .catch((e: unknown) => e);
    expect((err as RdsError).code).toBe('ECONNREFUSED');
    expect(A.counters.get('recv_drop_no_sock')).toBe(1);
    expect(A.counters.get('send_refused_no_sock')).toBe(1);
    // Resolves once b has read it (test/conformance-confirm.test.ts: not before).
    const here = a.send(Buffer.from('here'), b.address(), { confirm: true, timeout: 10000 });
    expect((await b.recv({ timeout: 10000 })).data.toString()).toBe('here');
    await here;
  });

  it('a receiving node closed with an unread backlog: its unread messages reject (ECONNRESET)', async () => {
    const A = node({ ackDelayMaxMs: 50 });
    const B = node({ ackDelayMaxMs: 50 });
    const a = await bound(A, '127.130.3.1');
    const b = await bound(B, '127.130.3.2');
    const outcomes = new Map<number, string>();
    const all = sendRange(a, { address: '127.130.3.2', port: 4000 }, 0, 30, outcomes);
    for (let k = 0; k < 10; k++) await b.recv({ timeout: 10000 });
    await a.flush({ timeout: 10000 });
    await B.close();
    await Promise.all(all);
    expect(tally(outcomes)).toEqual({ ok: 10, ECONNRESET: 20 });
  });

  it('ackDelayMaxMs: Infinity is accepted and never acknowledges unread messages', async () => {
    expect(() => new RdsStack({ ackDelayMaxMs: Number.NaN })).toThrow(RdsError);
    const A = node();
    const B = node({ ackDelayMaxMs: Infinity });
    expect(B.options.ackDelayMaxMs).toBe(Infinity);
    const a = await bound(A, '127.130.4.1');
    const b = await bound(B, '127.130.4.2');
    for (let i = 0; i < 5; i++) a.sendmsg(payload(i, 100), { address: '127.130.4.2', port: 4000 });
    await until(() => b.receiveQueue().length === 5, 'all five queued at the receiver');
    // Unread, they hold the sender's budget however long they wait (1 s is the default's delay).
    await expect(a.flush({ timeout: 1500 })).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    for (let i = 0; i < 5; i++) await b.recv({ timeout: 1000 });
    await a.flush({ timeout: 10000 });
  });

  it('a receiver killed (SIGKILL) with a backlog unread longer than ackDelayMaxMs, then restarted: every confirmed message was read, the rest reject', async () => {
    const A = node();
    const a = await bound(A, '127.131.1.1');
    const dest = { address: '127.131.1.2', port: 4000 };
    const delivered = new Set<number>();
    const life1 = await lazyReceiver('127.131.1.2', 30, delivered);
    const outcomes = new Map<number, string>();
    const all = sendRange(a, dest, 0, 100, outcomes);
    await until(() => delivered.size === 30, 'the first life read 30');
    await until(() => outcomes.size === 30, 'their confirmations');
    // The other 70 wait unread past ackDelayMaxMs (100 ms): acknowledged as queued.
    await a.flush({ timeout: 10000 });
    life1.kill('SIGKILL');
    await lazyReceiver('127.131.1.2', Infinity, delivered);
    await Promise.all(all);
    expectNoConfirmedButLost(outcomes, delivered);
    expect(tally(outcomes)).toEqual({ ok: 30, ECONNRESET: 70 });
    expect(A.counters.get('send_confirm_reset')).toBe(70);
  });
});

describe("the sender's side of read reports (a raw peer plays an rds-socket receiver)", () => {
  it('a refusal rejects its message, a repeated one is counted once, and a report that cannot be placed rejects rather than confirms', async () => {
    const peer = await RawListener.listen('127.134.1.2', TEST_TCP_PORT, false);
    cleanups.push(() => peer.close());
    const A = node({ heartbeatIntervalMs: 0 });
    const a = await bound(A, '127.134.1.1');
    const dest = { address: '127.134.1.2', port: 4000 };
    const outcomes = new Map<number, string>();
    const first = sendRange(a, dest, 0, 3, outcomes);
    const { c, probe } = await peer.acceptProbed();
    pong(c, 5);
    expect(probe.header.sequence % 1000).toBe(0); // the path's first number (the clock, ms x 1000)
    const seqs = await c.userSeqs(3);
    const report = (ack: number, ...exts: ReturnType<typeof wire.readExtension>[]): void =>
      c.send({ ack, exthdr: wire.packExtensions(exts) });
    // The middle one found no socket; the other two were read.
    report(seqs[2]!, wire.refusedExtension(seqs[1]!, constants.RDSSOCK_REFUSED_NO_SOCK));
    report(seqs[2]!, wire.readExtension(seqs[2]!, 1));
    await Promise.all(first);
    expect([outcomes.get(0), outcomes.get(1), outcomes.get(2)]).toEqual(['ok', 'ECONNREFUSED', 'ok']);
    // A new carrier repeats recent refusals: counted once.
    report(seqs[2]!, wire.refusedExtension(seqs[1]!, constants.RDSSOCK_REFUSED_NO_SOCK));
    const second = sendRange(a, dest, 3, 6, outcomes);
    const seqs2 = await c.userSeqs(3);
    // Flow control first: acknowledged as queued, the confirmations keep waiting.
    report(seqs2[2]!);
    await a.flush({ timeout: 5000 });
    expect(outcomes.size).toBe(3);
    // Two refused or discarded among them, but their reports never came: nothing can be confirmed.
    report(seqs2[2]!, wire.readExtension(seqs2[2]!, 3));
    await Promise.all(second);
    expect([outcomes.get(3), outcomes.get(4), outcomes.get(5)]).toEqual(['ECONNRESET', 'ECONNRESET', 'ECONNRESET']);
    expect(A.counters.get('send_refused_no_sock')).toBe(1);
    expect(A.counters.get('send_confirm_reset')).toBe(3);
  });
});

describe("the sender's side of read reports: messages not yet acknowledged when the report comes", () => {
  it('a read report that cannot be placed, before the h_ack of the messages it covers: they reject, and their later h_ack confirms none of them', async () => {
    // Seen in the soak: a restarted node sent 155 messages to a receiver with no socket bound; the
    // receiver's refusals died with a carrier, its read report (155 refused) came while the
    // messages still waited for their h_ack, and the h_ack that followed confirmed them all.
    const peer = await RawListener.listen('127.134.2.2', TEST_TCP_PORT, false);
    cleanups.push(() => peer.close());
    const A = node({ heartbeatIntervalMs: 0 });
    const a = await bound(A, '127.134.2.1');
    const dest = { address: '127.134.2.2', port: 4000 };
    const outcomes = new Map<number, string>();
    const all = sendRange(a, dest, 0, 4, outcomes);
    const { c } = await peer.acceptProbed();
    pong(c, 6);
    const seqs = await c.userSeqs(4);
    const last = seqs[3]!;
    // No h_ack yet (ack 0): the messages are still in the retransmit queue. Three were refused,
    // and not one of those refusals arrived.
    c.send({ ack: 0, exthdr: wire.packExtensions([wire.readExtension(last, 3)]) });
    // Then the flow cursor, and the refusals, late (a new carrier repeating them).
    c.send({ ack: last });
    for (const s of seqs.slice(0, 3))
      c.send({ ack: last, exthdr: wire.packExtensions([wire.refusedExtension(s, constants.RDSSOCK_REFUSED_NO_SOCK)]) });
    await Promise.all(all);
    // Which one was read is unknown: none may be confirmed.
    expect([0, 1, 2, 3].map((i) => outcomes.get(i))).toEqual(['ECONNRESET', 'ECONNRESET', 'ECONNRESET', 'ECONNRESET']);
    expect(A.counters.get('send_confirm_reset')).toBe(4);
  });
});

describe("the sender's side of read reports: an h_ack before the peer's capabilities are known", () => {
  it('confirms nothing: the confirmations wait until the handshake says whether the peer reports reads', async () => {
    // Seen in the soak: a restarted node's first messages went to a peer with no socket bound;
    // the peer's ack frame (control frames go ahead of queued data) arrived before its probe, and
    // with its capabilities unknown the h_ack was taken as the confirmation, as from an older
    // peer. The peer's refusals came next: too late, the messages were already confirmed.
    const peer = await RawListener.listen('127.134.3.2', TEST_TCP_PORT, false);
    cleanups.push(() => peer.close());
    const A = node({ heartbeatIntervalMs: 0 });
    const a = await bound(A, '127.134.3.1');
    const dest = { address: '127.134.3.2', port: 4000 };
    const outcomes = new Map<number, string>();
    const all = sendRange(a, dest, 0, 4, outcomes);
    const { c } = await peer.acceptProbed();
    const seqs = await c.userSeqs(4);
    const last = seqs[3]!;
    // The flow cursor first, before any handshake: not a confirmation yet.
    c.send({ ack: last });
    await a.flush({ timeout: 5000 });
    expect(outcomes.size).toBe(0);
    // Then the pong with capabilities (it reports reads), the refusals and the read cursor.
    pong(c, 7, last);
    for (const s of seqs.slice(0, 3))
      c.send({ ack: last, exthdr: wire.packExtensions([wire.refusedExtension(s, constants.RDSSOCK_REFUSED_NO_SOCK)]) });
    c.send({ ack: last, exthdr: wire.packExtensions([wire.readExtension(last, 3)]) });
    await Promise.all(all);
    expect([0, 1, 2, 3].map((i) => outcomes.get(i))).toEqual(['ECONNREFUSED', 'ECONNREFUSED', 'ECONNREFUSED', 'ok']);
  });

  it('from a peer that turns out not to report reads (a kernel: no capabilities), the held h_ack then confirms', async () => {
    const peer = await RawListener.listen('127.134.4.2', TEST_TCP_PORT, false);
    cleanups.push(() => peer.close());
    const A = node({ heartbeatIntervalMs: 0 });
    const a = await bound(A, '127.134.4.1');
    const dest = { address: '127.134.4.2', port: 4000 };
    const outcomes = new Map<number, string>();
    const all = sendRange(a, dest, 0, 2, outcomes);
    const { c } = await peer.acceptProbed();
    const seqs = await c.userSeqs(2);
    c.send({ ack: seqs[1]! });
    // A kernel's pong: NPATHS and GEN_NUM, no rds-socket capabilities.
    c.send({
      sequence: 1,
      sport: 0,
      dport: 1,
      exthdr: wire.packExtensions([wire.npathsExtension(1), wire.genNumExtension(8)]),
    });
    await Promise.all(all);
    expect([outcomes.get(0), outcomes.get(1)]).toEqual(['ok', 'ok']);
  });
});

describe('with older rds-socket peers (no RDSSOCK_CAP_CONFIRM / RDSSOCK_CAP_NO_HELLO)', () => {
  it('gets the unsequenced hello it waits for, and confirmations resolve on its acknowledgement as before', async () => {
    const peer = await RawListener.listen('127.132.1.2', TEST_TCP_PORT, false);
    cleanups.push(() => peer.close());
    const A = node({ heartbeatIntervalMs: 0 });
    const a = await bound(A, '127.132.1.1');
    let confirmed = false;
    const sent = a
      .send(Buffer.from('x'), { address: '127.132.1.2', port: 4000 }, { confirm: true, timeout: 10000 })
      .then(() => {
        confirmed = true;
      });
    const c = await peer.accept(0);
    // What an older rds-socket node sends first on every carrier.
    const oldCaps =
      constants.RDSSOCK_CAP_ACK | constants.RDSSOCK_CAP_HEARTBEAT | (1 << constants.RDSSOCK_CAP_PATHS_SHIFT);
    const exthdr = wire.packExtensions([
      wire.npathsExtension(1),
      wire.genNumExtension(99),
      wire.rdsCapsExtension(oldCaps),
    ]);
    c.send({ sport: 1, dport: 0, flags: constants.RDS_FLAG_RETRANSMITTED, exthdr });
    let hello = null;
    let m = null;
    while (hello === null || m === null) {
      const f = await c.next();
      if (f.header.sequence === 0 && f.header.sport === 1 && f.header.dport === 0) hello = f;
      if (f.header.dport === 4000) m = f;
    }
    expect(hello.header.flags).toBe(constants.RDS_FLAG_RETRANSMITTED);
    expect(A.connections()[0]!.paths[0]!.state).toBe('UP');
    await until(() => A.counters.get('handshake_received') === 1, "the old peer's hello processed");
    expect(confirmed).toBe(false);
    c.send({ ack: m.header.sequence }); // its acknowledgement, "queued" or read: it cannot say which
    await sent;
    expect(confirmed).toBe(true);
  });
});

describe('a kernel cannot tell rds-socket from a kernel', () => {
  it('connection setup and reconnects send nothing a kernel counts in recv_drop_old_seq', async () => {
    // The raw peer plays a kernel: next_rx_seq per carrier pair, and its drop rule (spec §2.5).
    const peer = await RawListener.listen('127.133.1.2', TEST_TCP_PORT);
    cleanups.push(() => peer.close());
    const A = node();
    const a = await bound(A, '127.133.1.1');
    const dest = { address: '127.133.1.2', port: 4000 };
    let nextRxSeq = 0;
    let dropOldSeq = 0;
    const kernelReceive = (h: { sequence: number; flags: number }): void => {
      if (h.flags === constants.RDS_FLAG_CONG_BITMAP) return;
      if (h.sequence < nextRxSeq && h.flags & constants.RDS_FLAG_RETRANSMITTED) dropOldSeq++;
      else nextRxSeq = h.sequence + 1;
    };
    for (let carrier = 0; carrier < 3; carrier++) {
      a.sendmsg(Buffer.from(`m${carrier}`), dest);
      const c = await peer.accept(carrier);
      // Everything up to this carrier's message, which follows any retransmission and the probe.
      for (;;) {
        const f = await c.next();
        kernelReceive(f.header);
        if (f.payload.toString() === `m${carrier}`) break;
      }
      // The kernel's answer to our probe came back: our handshake is over on this carrier.
      // Wait until TCP acknowledged everything (nothing to resend) and the kernel's pong came back.
      await until(() => {
        const p0 = A.connections()[0]?.paths[0];
        return (
          p0?.state === 'UP' &&
          p0.retransQueue === 0 &&
          p0.sendQueue === 0 &&
          A.counters.get('handshake_received') > carrier
        );
      }, 'pong processed, nothing unacknowledged');
      c.sock.destroy();
      await until(() => A.counters.get('conn_reset') > carrier, 'carrier dropped');
    }
    expect(dropOldSeq).toBe(0);
    expect(A.counters.get('handshake_sent')).toBeGreaterThanOrEqual(3); // a probe on every carrier
  });
});

describe('a restarted peer is recognised by the generation in its probe', () => {
  it('even when its first frames come again as retransmissions: nothing of its new life is dropped as old, no ack names its old life', async () => {
    const A = node({ heartbeatIntervalMs: 0 });
    const a = await bound(A, '127.135.1.2');
    const probe = (gen: number, flags = 0) => ({
      sequence: 1,
      sport: 1,
      dport: 0,
      flags,
      exthdr: wire.packExtensions([wire.npathsExtension(1), wire.genNumExtension(gen), wire.rdsCapsExtension(caps)]),
    });
    // First life: a probe, then 49 messages; all read.
    const c1 = await rawConnect('127.135.1.1', '127.135.1.2', TEST_TCP_PORT, false);
    cleanups.push(() => void c1.sock.destroy());
    c1.send(probe(11));
    for (let seq = 2; seq <= 50; seq++) c1.send({ sequence: seq, sport: 4000, dport: 4000 }, payload(seq, 8));
    for (let k = 0; k < 49; k++) await a.recv({ timeout: 5000 });
    expect(A.connections()[0]!.paths[0]!.nextRxSeq).toBe(51);
    c1.sock.destroy();
    await until(() => A.connections()[0]!.paths[0]!.state !== 'UP', 'first carrier gone');
    // Second life: its first carrier died unread, so on this one its probe and first message come
    // again flagged RETRANSMITTED, numbered low in its new life.
    const c2 = await rawConnect('127.135.1.1', '127.135.1.2', TEST_TCP_PORT, false);
    cleanups.push(() => void c2.sock.destroy());
    c2.send(probe(22, constants.RDS_FLAG_RETRANSMITTED));
    c2.send(
      {
        sequence: 2,
        sport: 4000,
        dport: 4000,
        flags: constants.RDS_FLAG_RETRANSMITTED | constants.RDS_FLAG_ACK_REQUIRED,
      },
      Buffer.from('new life'),
    );
    expect((await a.recv({ timeout: 5000 })).data.toString()).toBe('new life');
    expect(A.counters.get('peer_restarted')).toBe(1);
    expect(A.counters.get('recv_drop_old_seq')).toBe(0);
    // Its acknowledgement names the new life's numbers only.
    const ack = await c2.nextMatching(
      (f) =>
        f.header.sequence === 0 &&
        f.header.sport === 0 &&
        f.header.dport === 0 &&
        f.header.flags !== 1 &&
        f.header.ack > 0,
    );
    expect(ack.header.ack).toBe(2);
  });
});

/** Starts a lazy receiver node process; adds what it reads to `delivered`. Resolves once bound. */
async function lazyReceiver(address: string, read: number, delivered: Set<number>): Promise<ChildProcess> {
  const p = spawn(
    process.execPath,
    [LAZY, '--bind', address, '--read', String(read), '--ack-delay', '100', '--tcp-port', String(TEST_TCP_PORT)],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  cleanups.push(() => {
    p.kill('SIGKILL');
  });
  let ready = false;
  let buf = '';
  p.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const ev = JSON.parse(buf.slice(0, nl)) as { ev: string; i?: number };
      buf = buf.slice(nl + 1);
      if (ev.ev === 'ready') ready = true;
      if (ev.ev === 'got') delivered.add(ev.i!);
    }
  });
  await until(() => ready, `receiver process on ${address} ready`);
  return p;
}
