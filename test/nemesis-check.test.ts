import { describe, expect, it } from 'vitest';
import { analyse } from '../nemesis/check.mjs';

// The nemesis checker (nemesis/check.mjs) fed small hand-made histories: a clean one reports
// nothing, and each breach it claims to catch is caught, alone, and only where it should be.

type Rec = Record<string, unknown>;
const A = '10.77.0.1:4000';
const B = '10.77.0.2:4000';
const T0 = 1_000_000;
const HEAL = T0 + 50_000;
const END = T0 + 70_000;

/** Sender a (incarnation e0.0.1 at A) and receiver b (e1.0.1 at B), both open from T0 to END. */
function base(): { a: Rec[]; b: Rec[] } {
  return {
    a: [
      { t: T0, ev: 'start', proc: 'e0', epoch: 0 },
      { t: T0 + 1, ev: 'open', s: 'e0.0.1', sock: A },
    ],
    b: [
      { t: T0, ev: 'start', proc: 'e1', epoch: 0 },
      { t: T0 + 1, ev: 'open', s: 'e1.0.1', sock: B },
    ],
  };
}
const send = (t: number, q: number, extra: Rec = {}): Rec => ({
  t,
  ev: 'send',
  s: 'e0.0.1',
  d: B,
  q,
  h: `h${q}`,
  n: 100,
  m: 'msg',
  ...extra,
});
const recv = (t: number, q: number, extra: Rec = {}): Rec => ({
  t,
  ev: 'recv',
  r: 'e1.0.1',
  sock: B,
  from: A,
  s: 'e0.0.1',
  q,
  h: `h${q}`,
  n: 100,
  ...extra,
});
const ends = (h: { a: Rec[]; b: Rec[] }): Rec[][] => [
  [...h.a, { t: END, ev: 'end', s: 'e0.0.1' }],
  [...h.b, { t: END, ev: 'end', s: 'e1.0.1' }],
];
/** A history in which the pair also exchanged a message after the heal (so it is not stuck). */
function healthy(): { a: Rec[]; b: Rec[] } {
  const h = base();
  for (let q = 1; q <= 3; q++) {
    h.a.push(send(T0 + 1000 * q, q));
    h.b.push(recv(T0 + 1000 * q + 5, q));
  }
  h.a.push(send(HEAL + 100, 4, { m: 'probe', c: 1, to: 2000 }), { t: HEAL + 120, ev: 'ok', s: 'e0.0.1', d: B, q: 4 });
  h.b.push(recv(HEAL + 110, 4));
  return h;
}
const meta = { seed: 7, phases: { healed: HEAL }, livenessMs: 5000 };
const run = (hist: Rec[][], faults: Rec[] = []) => analyse({ hist, faults, samples: [], meta });
const nonZero = (counts: Record<string, number>) => Object.fromEntries(Object.entries(counts).filter(([, n]) => n > 0));

describe('nemesis checker', () => {
  it('a clean history has no anomaly', () => {
    const res = run(ends(healthy()));
    expect(nonZero(res.counts)).toEqual({});
    expect(res.totals).toMatchObject({ sent: 4, delivered: 4, confirmed: 1 });
  });

  it('finds a message delivered twice to one receiving incarnation', () => {
    const h = healthy();
    h.b.splice(4, 0, recv(T0 + 2500, 2));
    const res = run(ends(h));
    expect(nonZero(res.counts)).toEqual({ duplicate: 1 });
    expect(res.first.anomaly).toMatchObject({ kind: 'duplicate', pair: `${A}->${B}` });
  });

  it('a message read again by a new incarnation of the receiver is no duplicate', () => {
    const h = healthy();
    h.b.push({ t: T0 + 4000, ev: 'open', s: 'e1.1.1', sock: B }, { ...recv(T0 + 4001, 3), r: 'e1.1.1' });
    const res = run([...ends(h), []]);
    expect(res.counts.duplicate).toBe(0);
  });

  it('finds messages read out of order', () => {
    const h = base();
    h.a.push(send(T0 + 1000, 1), send(T0 + 1001, 2));
    h.b.push(recv(T0 + 1100, 2), recv(T0 + 1101, 1));
    h.a.push(send(HEAL + 100, 3));
    h.b.push(recv(HEAL + 110, 3));
    expect(nonZero(run(ends(h)).counts)).toEqual({ reorder: 1 });
  });

  it("a kernel socket's messages read out of order across paths are counted apart, not as a reorder; within one path, or from one of ours, they are one", () => {
    // The 7.x kernel sends a non-blocking socket's new message on path 0 while its older ones wait
    // on the socket's lane (docs/nemesis.md); RdsMessage.path, logged as p, tells them apart.
    const kernelMeta = { ...meta, topo: { procs: [{ proc: 'e0', node: 0, mode: 'kernel', addr: A.split(':')[0] }] } };
    const history = (paths: [number, number, number]) => {
      const h = base();
      h.a.push(send(T0 + 1000, 1), send(T0 + 1001, 2), send(T0 + 1002, 3));
      h.b.push(
        recv(T0 + 1100, 3, { p: paths[2] }),
        recv(T0 + 1101, 1, { p: paths[0] }),
        recv(T0 + 1102, 2, { p: paths[1] }),
      );
      h.a.push(send(HEAL + 100, 4));
      h.b.push(recv(HEAL + 110, 4, { p: 3 }));
      return ends(h);
    };
    const k = analyse({ hist: history([3, 3, 0]), faults: [], samples: [], meta: kernelMeta });
    expect(nonZero(k.counts)).toEqual({});
    expect(k.kernelPathOrder.count).toBe(2);
    expect(k.kernelPathOrder.first[0].detail).toBe('e0.0.1 #1 read by e1.0.1 after #3 (path 3 after path 0)');
    // The same order on one path is a reorder even from a kernel.
    const same = analyse({ hist: history([3, 3, 3]), faults: [], samples: [], meta: kernelMeta });
    expect(nonZero(same.counts)).toEqual({ reorder: 2 });
    expect(same.kernelPathOrder.count).toBe(0);
    // From one of our nodes, different paths excuse nothing (failover keeps a socket's order).
    expect(nonZero(run(history([3, 3, 0])).counts)).toEqual({ reorder: 2 });
  });

  it("a kernel socket's messages read out of order on one path with an rds_tcp reload of that kernel between the reads are counted apart; without the reload they are a reorder", () => {
    // Seen in the nemesis (seed 2029, 7.x): #22 read on path 0 before the reload, #20 and #21
    // after it on the new connection's path 0.
    const kernelMeta = { ...meta, topo: { procs: [{ proc: 'k0', node: 0, mode: 'kernel', addr: A.split(':')[0] }] } };
    const h = base();
    h.a.push(send(T0 + 1000, 1), send(T0 + 1001, 2), send(T0 + 1002, 3));
    h.b.push(recv(T0 + 1100, 3, { p: 0 }), recv(T0 + 3000, 1, { p: 0 }), recv(T0 + 3001, 2, { p: 0 }));
    h.a.push(send(HEAL + 100, 4));
    h.b.push(recv(HEAL + 110, 4, { p: 0 }));
    const reload = (at: number) => [
      { t: at, ev: 'start', kind: 'kernel-reload', node: 0, proc: 'k0', dur: 3000, id: 'f1' },
      { t: at + 3000, ev: 'end', kind: 'kernel-reload', id: 'f1' },
    ];
    const between = analyse({ hist: ends(h), faults: reload(T0 + 2000), samples: [], meta: kernelMeta });
    expect(nonZero(between.counts)).toEqual({});
    expect(between.kernelPathOrder.first[0].detail).toBe(
      'e0.0.1 #1 read by e1.0.1 after #3 (path 0 after path 0), an rds_tcp reload between',
    );
    // A reload before both reads, or none, leaves it a reorder.
    const before = analyse({ hist: ends(h), faults: reload(T0 + 500), samples: [], meta: kernelMeta });
    expect(nonZero(before.counts)).toEqual({ reorder: 2 });
    expect(nonZero(analyse({ hist: ends(h), faults: [], samples: [], meta: kernelMeta }).counts)).toEqual({
      reorder: 2,
    });
  });

  it('finds an altered body', () => {
    const h = healthy();
    h.b[3] = recv(T0 + 2005, 2, { h: 'other' });
    expect(nonZero(run(ends(h)).counts)).toEqual({ altered: 1 });
  });

  it('finds a confirmation that resolved for a message nobody read', () => {
    const h = healthy();
    h.a.push(send(T0 + 5000, 5, { m: 'send', c: 1 }), { t: T0 + 5100, ev: 'ok', s: 'e0.0.1', d: B, q: 5 });
    const res = run(ends(h));
    expect(nonZero(res.counts)).toEqual({ 'confirm-unread': 1 });
    expect(res.first.anomaly.detail).toContain('e0.0.1 #5 confirmed, never read');
  });

  it('to a kernel peer, confirm means its TCP took the message: unread is vanished, not confirm-unread', () => {
    // README "What it guarantees": a kernel reports no reads, so a confirmed message its
    // application never read is held to the silent-loss rule instead.
    const h = healthy();
    h.a.push(send(T0 + 5000, 5, { m: 'send', c: 1 }), { t: T0 + 5100, ev: 'ok', s: 'e0.0.1', d: B, q: 5 });
    const kernelMeta = { ...meta, topo: { procs: [{ proc: 'k1', node: 1, mode: 'kernel', addr: B.split(':')[0] }] } };
    const res = analyse({ hist: ends(h), faults: [], samples: [], meta: kernelMeta });
    expect(nonZero(res.counts)).toEqual({ vanished: 1 });
    // The same history without a kernel peer is a lie.
    expect(nonZero(run(ends(h)).counts)).toEqual({ 'confirm-unread': 1 });
  });

  it("a kernel socket's opening is known to within the guest clock's error: a message sent just after it is not held to vanished", () => {
    // The kernel peer's application stamps its records with the host clock as it last read it,
    // early by that read's delay; a kernel drops a message for an unbound port and tells no one.
    const kernelMeta = { ...meta, topo: { procs: [{ proc: 'k1', node: 1, mode: 'kernel', addr: B.split(':')[0] }] } };
    const withLateOpen = (sentAfterOpen: number, earlyRead = 0) => {
      const h = base();
      const open = T0 + 10_000;
      h.b = h.b.map((x) => (x.ev === 'open' ? { ...x, t: open } : x));
      h.a.push(send(open + 5, 1), send(open + sentAfterOpen, 2), send(HEAL + 100, 3));
      h.b.push(recv(open + 5 - earlyRead, 1), recv(HEAL + 105, 3)); // #1 stamped `earlyRead` ms before its send
      return analyse({ hist: ends(h), faults: [], samples: [], meta: kernelMeta }).counts;
    };
    expect(nonZero(withLateOpen(100))).toEqual({});
    expect(nonZero(withLateOpen(1000))).toEqual({ vanished: 1 });
    // A run whose kernel reads were stamped up to 800 ms early widens the margin to that.
    expect(nonZero(withLateOpen(700, 800))).toEqual({});
    expect(nonZero(withLateOpen(900, 800))).toEqual({ vanished: 1 });
  });

  it("a 7.x kernel's unread message to a node's new life sent before that life's first path to the kernel is kernel-flush, not vanished", () => {
    // The nemesis, seed 7079: a 7.x kernel drops what it holds in flight on its connections to a
    // node's previous life when the new life's GEN_NUM reaches it (test/interop/kernel-flush-new-life.test.ts).
    const lives = (kernel: string, newLife: number, up: number, sends: [number, number, boolean][]) => {
      const a: Rec[] = [
        { t: T0, ev: 'start', proc: 'e0', epoch: 0 },
        { t: T0 + 1, ev: 'open', s: 'e0.0.1', sock: A },
      ];
      const old: Rec[] = [
        { t: T0, ev: 'start', proc: 'e1', epoch: 0 },
        { t: T0 + 1, ev: 'open', s: 'e1.0.1', sock: B },
      ];
      const b: Rec[] = [
        { t: newLife, ev: 'start', proc: 'e1', epoch: 1 },
        { t: newLife + 1, ev: 'open', s: 'e1.1.1', sock: B },
        { t: up, ev: 'path', peer: A.split(':')[0], i: 0, what: 'up' },
      ];
      for (const [t, q, read] of sends) {
        a.push(send(t, q));
        if (read) b.push(recv(t + 5, q, { r: 'e1.1.1' }));
      }
      const m = {
        ...meta,
        topo: {
          kernel,
          procs: [
            { proc: 'e0', node: 0, mode: 'kernel', addr: A.split(':')[0] },
            { proc: 'e1', node: 1, mode: 'embedded', addr: B.split(':')[0] },
          ],
        },
      };
      return analyse({
        hist: [[...a, { t: END, ev: 'end', s: 'e0.0.1' }], old, [...b, { t: END, ev: 'end', s: 'e1.1.1' }]],
        faults: [],
        samples: [],
        meta: m,
      });
    };
    const sends: [number, number, boolean][] = [
      [T0 + 5000, 1, false], // after the new life began, before its first path to the kernel
      [T0 + 9000, 2, true],
      [T0 + 10_000, 3, false], // after it: the kernel had the new life's generation
      [HEAL + 100, 4, true],
    ];
    const k7 = lives('7', T0 + 3000, T0 + 8000, sends);
    expect(nonZero(k7.counts)).toEqual({ vanished: 1 });
    expect(k7.anomalies[0].detail).toContain('e0.0.1 #3');
    expect(k7.kernelFlush.count).toBe(1);
    expect(k7.kernelFlush.first[0].detail).toBe('e0.0.1 #1 (100 B, msg)');
    // A 6.x kernel does not act on GEN_NUM: both are losses.
    const k6 = lives('6.1', T0 + 3000, T0 + 8000, sends);
    expect(nonZero(k6.counts)).toEqual({ vanished: 2 });
    expect(k6.kernelFlush.count).toBe(0);
    // The flushed message was the pair's first after the heal: the pair is held to its next send.
    const late: [number, number, boolean][] = [
      [HEAL + 100, 1, false],
      [HEAL + 9000, 2, true],
    ];
    const after = lives('7', HEAL - 1000, HEAL + 3000, late);
    expect(nonZero(after.counts)).toEqual({});
    expect(after.kernelFlush.count).toBe(1);
    expect(nonZero(lives('7', HEAL - 1000, HEAL + 50, late).counts)).toEqual({ vanished: 1, 'stuck-pair': 1 });
  });

  it('finds a silent loss, and only where the sender could have been told', () => {
    const lossy = () => {
      const h = healthy();
      h.a.push(send(T0 + 6000, 5), send(T0 + 6001, 6));
      h.b.push(recv(T0 + 6100, 6));
      return h;
    };
    const res = run(ends(lossy()));
    expect(nonZero(res.counts)).toEqual({ vanished: 1 });
    expect(res.anomalies[0].detail).toContain('e0.0.1 #5');
    // An error for it is a word.
    const told = lossy();
    told.a.push({ t: T0 + 6002, ev: 'err', s: 'e0.0.1', d: B, q: 5, code: 'ENOBUFS' });
    expect(run(ends(told)).counts.vanished).toBe(0);
    // Cancelled (RDS_CANCEL_SENT_TO) after it was sent.
    const cancelled = lossy();
    cancelled.a.push({ t: T0 + 6050, ev: 'cancel', s: 'e0.0.1', d: B });
    expect(run(ends(cancelled)).counts.vanished).toBe(0);
    // The receiving socket died (its host node went away) before the end.
    const died = lossy();
    died.b.push({ t: T0 + 7000, ev: 'close', s: 'e1.0.1', why: 'ENETDOWN' });
    expect(run(ends(died)).counts.vanished).toBe(0);
    // The sender could not flush at the end: its messages may still have been on their way.
    const unflushed = lossy();
    unflushed.a.push({ t: END - 1, ev: 'flushed', s: 'e0.0.1', ok: false, code: 'ETIMEDOUT' });
    expect(run(ends(unflushed)).counts.vanished).toBe(0);
    // The sender's process was killed: it never wrote its end record.
    const killed = lossy();
    expect(run([killed.a, [...killed.b, { t: END, ev: 'end', s: 'e1.0.1' }]]).counts.vanished).toBe(0);
  });

  it('finds a stuck pair after the heal, and a slow one', () => {
    const h = base();
    h.a.push(send(T0 + 1000, 1));
    h.b.push(recv(T0 + 1005, 1));
    const res = run(ends(h));
    expect(nonZero(res.counts)).toEqual({ 'stuck-pair': 1 });
    expect(res.anomalies[0]).toMatchObject({ pair: `${A}->${B}`, detail: 'no message read after the heal' });
    const slow = base();
    slow.a.push(send(T0 + 1000, 1), send(HEAL + 100, 2));
    slow.b.push(recv(T0 + 1005, 1), recv(HEAL + 6000, 2));
    expect(nonZero(run(ends(slow)).counts)).toEqual({ 'stuck-pair': 1 });
  });

  it('finds a confirmation that settled long after its timeout, or never, unless its process was stopped', () => {
    const h = healthy();
    h.a.push(send(T0 + 8000, 5, { m: 'send', c: 1, to: 1000 }), {
      t: T0 + 12000,
      ev: 'err',
      s: 'e0.0.1',
      d: B,
      q: 5,
      code: 'ETIMEDOUT',
    });
    h.a.push(send(T0 + 9000, 6, { m: 'send', c: 1 }));
    h.b.push(recv(T0 + 9100, 6));
    expect(nonZero(run(ends(h)).counts)).toEqual({ 'settle-late': 1, unsettled: 1 });
    const pause = [
      { t: T0 + 8500, ev: 'start', id: 'f0', kind: 'pause', proc: 'e0' },
      { t: T0 + 11500, ev: 'end', id: 'f0', kind: 'pause' },
    ];
    expect(run(ends(h), pause).counts['settle-late']).toBe(0);
  });

  it('names the faults active at the first anomaly', () => {
    const h = healthy();
    h.b.splice(4, 0, recv(T0 + 2500, 2));
    const faults = [
      { t: T0 + 2000, ev: 'start', id: 'f3', kind: 'isolate', node: 1 },
      { t: T0 + 3000, ev: 'end', id: 'f3', kind: 'isolate' },
    ];
    const res = run(ends(h), faults);
    expect(res.first.activeFaults.map((f: Rec) => f.id)).toEqual(['f3']);
    expect(res.first.records.length).toBeGreaterThan(0);
  });

  it("shows what the two nodes' paths to each other did before the first anomaly, and nothing else", () => {
    const h = healthy();
    // #3 read before #2: a reorder at T0 + 3005.
    h.b.splice(3, 2, recv(T0 + 3005, 3), recv(T0 + 3006, 2));
    const path = (t: number, peer: string, rest: Rec): Rec => ({ t, ev: 'path', peer, i: 5, ...rest });
    h.a.push(
      path(T0 + 1500, '10.77.0.2', { what: 'down', why: 'heartbeat timed out' }),
      path(T0 + 1600, '10.77.0.9', { what: 'down', why: 'another peer' }),
      path(T0 + 2500, '10.77.0.2', { what: 'failover', to: 0, moved: 2 }),
    );
    h.b.push(path(T0 + 2900, '10.77.0.1', { what: 'up' }));
    const topo = {
      procs: [
        { proc: 'e0', addr: '10.77.0.1' },
        { proc: 'e1', addr: '10.77.0.2' },
      ],
    };
    const res = analyse({ hist: ends(h), faults: [], samples: [], meta: { ...meta, topo } });
    expect(nonZero(res.counts)).toEqual({ reorder: 1 });
    expect(res.first.paths.map((x: Rec) => [x.at, x.what])).toEqual([
      ['10.77.0.1', 'down'],
      ['10.77.0.1', 'failover'],
      ['10.77.0.2', 'up'],
    ]);
  });
});
