import { describe, expect, it } from 'vitest';
import { CreditLedger, CREDIT_UPDATE_THRESHOLD } from '../lib/core/credits.js';

describe('credit ledger (spec §7.3)', () => {
  it('spends one credit per fragment and keeps the last one for a credit update', () => {
    const l = new CreditLedger();
    l.grant(3);
    expect(l.tryConsume(1)).toBe(true);
    expect(l.tryConsume(1)).toBe(true);
    expect(l.sendCredits).toBe(1);
    expect(l.tryConsume(1)).toBe(false); // the reserve
    expect(l.stalled).toBe(true);
    expect(l.tryConsumeForUpdate()).toBe(true);
    expect(l.sendCredits).toBe(0);
  });

  it('may use the last credit when the message itself advertises credits', () => {
    const l = new CreditLedger();
    l.grant(1);
    l.posted(1);
    expect(l.tryConsume(1)).toBe(true);
    expect(l.advertise()).toBe(1);
  });

  it('a message of several fragments needs that many credits', () => {
    const l = new CreditLedger();
    l.grant(4);
    expect(l.tryConsume(4)).toBe(false);
    expect(l.tryConsume(3)).toBe(true);
  });

  it('resumes a stalled sender when credits arrive', () => {
    let resumed = 0;
    const l = new CreditLedger(() => resumed++);
    l.grant(1);
    expect(l.tryConsume(1)).toBe(false);
    l.grant(0);
    expect(resumed).toBe(0);
    l.grant(5);
    expect(resumed).toBe(1);
    expect(l.stalled).toBe(false);
    l.grant(5);
    expect(resumed).toBe(1);
  });

  it('advertises at most 255 credits per header', () => {
    const l = new CreditLedger();
    l.posted(600);
    expect(l.advertise()).toBe(255);
    expect(l.advertise()).toBe(255);
    expect(l.advertise()).toBe(90);
    expect(l.advertise()).toBe(0);
  });

  it('requests a credit update when 16 posted credits are unadvertised, once per crossing', () => {
    let wanted = 0;
    const l = new CreditLedger(
      () => {},
      () => wanted++,
    );
    l.posted(CREDIT_UPDATE_THRESHOLD - 1);
    expect(wanted).toBe(0);
    expect(l.updateWanted).toBe(false);
    l.posted(1);
    expect(wanted).toBe(1);
    expect(l.updateWanted).toBe(true);
    l.posted(10);
    expect(wanted).toBe(1);
    l.advertise();
    l.posted(CREDIT_UPDATE_THRESHOLD);
    expect(wanted).toBe(2);
  });
});

/**
 * Two endpoints over a simulated reliable link with a fixed-size receive ring per side, as an RC
 * queue pair has: a fragment that arrives needs a posted buffer (a credit), is handed up, and its
 * buffer is posted again. Credits travel in h_credit of data and of ack-only frames; a sender down
 * to its reserve sets ACK_REQUIRED so the receiver answers even with nothing else to send.
 */
class RingEndpoint {
  readonly ledger: CreditLedger;
  readonly received: number[] = [];
  /** Posted buffers not yet filled. */
  free: number;
  minFree: number;
  queue: number[] = [];
  peer!: RingEndpoint;
  wire: (() => void)[];

  constructor(
    readonly ringSize: number,
    wire: (() => void)[],
  ) {
    this.wire = wire;
    this.free = ringSize;
    this.minFree = ringSize;
    this.ledger = new CreditLedger(
      () => this.pump(),
      () => this.sendUpdate(),
    );
    this.ledger.posted(ringSize); // the ring is posted before connecting
  }

  connect(peer: RingEndpoint): void {
    this.peer = peer;
    // Connection private data carries the initial credits (dp_credit).
    peer.ledger.grant(this.ledger.advertise());
  }

  pump(): void {
    while (this.queue.length > 0) {
      if (!this.ledger.tryConsume(1)) return;
      const msg = this.queue.shift()!;
      const credit = this.ledger.advertise();
      const ackRequired = this.ledger.low;
      this.wire.push(() => this.peer.arrive({ msg, credit, ackRequired }));
    }
  }

  private sendUpdate(): void {
    if (!this.ledger.tryConsumeForUpdate()) return;
    const credit = this.ledger.advertise();
    this.wire.push(() => this.peer.arrive({ msg: null, credit, ackRequired: false }));
  }

  arrive(f: { msg: number | null; credit: number; ackRequired: boolean }): void {
    if (this.free === 0) throw new Error('receive ring overrun: a fragment arrived with no posted buffer');
    this.free--;
    this.minFree = Math.min(this.minFree, this.free);
    this.ledger.grant(f.credit);
    if (f.msg !== null) this.received.push(f.msg);
    // Handed up; the buffer is posted again later, after other fragments may have arrived.
    this.wire.push(() => {
      this.free++;
      this.ledger.posted(1);
      if (f.ackRequired) this.sendUpdate();
    });
  }
}

describe('credit flow control through a fixed-size receive ring', () => {
  it.each([4, 8, 32])(
    'ring of %i: no overrun, every message delivered in order, the sender stalls and resumes',
    (ring) => {
      const wire: (() => void)[] = [];
      const a = new RingEndpoint(ring, wire);
      const b = new RingEndpoint(ring, wire);
      a.connect(b);
      b.connect(a);
      const N = 500;
      for (let i = 0; i < N; i++) a.queue.push(i);
      a.pump();
      for (let steps = 0; wire.length > 0 && steps < 100_000; steps++) wire.shift()!();
      expect(b.received).toEqual(Array.from({ length: N }, (_, i) => i));
      expect(b.minFree).toBeGreaterThanOrEqual(0);
      expect(b.minFree).toBeLessThan(ring); // the ring really filled up at times
      expect(a.ledger.stalls).toBeGreaterThan(0);
      expect(a.queue).toHaveLength(0);
    },
  );
});
