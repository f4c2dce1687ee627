import { describe, expect, it } from 'vitest';
import { timelineSvg, series } from '../nemesis/report.mjs';
import { KINDS, schedule } from '../nemesis/schedule.mjs';
import { Net } from '../nemesis/net.mjs';

// The nemesis's schedule (same seed, same faults; every kind present) and its report's SVG
// timeline (well-formed XML with one band per fault and finite coordinates).

const topo = {
  n: 5,
  hosts: [2, 3],
  embedded: [0, 1, 4],
  apps: ['a20', 'a21', 'a22', 'a30', 'a31'],
  pausable: [
    { proc: 'e0', node: 0 },
    { proc: 'd2', node: 2 },
  ],
  rails: [0, 1],
};

/** A minimal XML well-formedness check: every tag closes in order, attributes are quoted. */
function parseXml(s: string): { tags: string[]; depthMax: number } {
  const stack: string[] = [];
  const tags: string[] = [];
  let depthMax = 0;
  const re = /<(\/?)([a-zA-Z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>|<!--[\s\S]*?-->/g;
  let last = 0;
  for (let m = re.exec(s); m !== null; m = re.exec(s)) {
    const between = s.slice(last, m.index);
    if (between.includes('<') || /&(?!amp;|lt;|gt;|quot;|#\d+;)/.test(between))
      throw new Error(`bad text near ${m.index}: ${between.slice(0, 40)}`);
    last = re.lastIndex;
    if (!m[2]) continue;
    if (m[1]) {
      const open = stack.pop();
      if (open !== m[2]) throw new Error(`</${m[2]}> closes <${open}>`);
    } else {
      tags.push(m[2]);
      if (!m[4]) stack.push(m[2]);
      depthMax = Math.max(depthMax, stack.length);
    }
  }
  if (s.slice(last).trim() !== '') throw new Error(`trailing text: ${s.slice(last, last + 40)}`);
  if (stack.length) throw new Error(`unclosed: ${stack.join(',')}`);
  return { tags, depthMax };
}

describe('nemesis schedule', () => {
  it('is the same for the same seed, differs for another, and holds every kind', () => {
    const a = schedule({ seed: 42, seconds: 60, topo });
    const b = schedule({ seed: 42, seconds: 60, topo });
    const c = schedule({ seed: 43, seconds: 60, topo });
    expect(a).toEqual(b);
    expect(a.faults).not.toEqual(c.faults);
    expect(a.missing).toEqual([]);
    // kernel-reload needs the kernel peer (--kernel), which this cluster has not.
    const kinds = Object.keys(KINDS).filter((k) => k !== 'kernel-reload');
    expect(new Set(a.faults.map((f: { kind: string }) => f.kind))).toEqual(new Set(kinds));
    for (const f of a.faults) expect(f.at + f.dur).toBeLessThanOrEqual(60_000);
  });

  it('never overlaps two faults on one process', () => {
    for (let seed = 1; seed <= 20; seed++) {
      const { faults } = schedule({ seed, seconds: 120, topo });
      const byProc = new Map<string, [number, number][]>();
      for (const f of faults) {
        const key =
          f.proc ?? (f.kind === 'kill-host' ? `d${f.node}` : f.kind.startsWith('kill-embedded') ? `e${f.node}` : null);
        if (!key) continue;
        for (const [s, e] of byProc.get(key) ?? []) expect(f.at >= e || f.at + f.dur <= s).toBe(true);
        byProc.set(key, [...(byProc.get(key) ?? []), [f.at, f.at + f.dur]]);
      }
    }
  });

  it('never overlaps slow and reorder on one node (both replace its root qdisc)', () => {
    let both = 0;
    for (let seed = 1; seed <= 20; seed++) {
      const { faults } = schedule({ seed, seconds: 120, topo });
      const q = faults.filter((f: { kind: string }) => f.kind === 'slow' || f.kind === 'reorder');
      if (q.some((f: { kind: string }) => f.kind === 'slow') && q.some((f: { kind: string }) => f.kind === 'reorder'))
        both++;
      for (const f of q)
        for (const g of q)
          if (f !== g && f.node === g.node) expect(f.at >= g.at + g.dur || f.at + f.dur <= g.at).toBe(true);
    }
    expect(both).toBe(20);
  });
});

describe('nemesis schedule with a kernel peer (--kernel)', () => {
  // The kernel peer is the last node; its traffic is bridged in its namespace, so the faults made
  // by a node's own inet rules (loss, reorder) must never be drawn for it.
  const topoK = { ...topo, n: 6, kernel: 5 };
  it('draws kernel-reload for it and every other kind, never loss or reorder on it', () => {
    const a = schedule({ seed: 42, seconds: 60, topo: topoK });
    expect(a.missing).toEqual([]);
    expect(new Set(a.faults.map((f: { kind: string }) => f.kind))).toEqual(new Set(Object.keys(KINDS)));
    let onKernel = 0;
    for (let seed = 1; seed <= 30; seed++) {
      const { faults } = schedule({ seed, seconds: 120, topo: topoK });
      for (const f of faults) {
        if (f.kind === 'loss' || f.kind === 'reorder') expect(f.node).not.toBe(5);
        if (f.kind === 'kernel-reload') expect(f).toMatchObject({ node: 5, proc: 'k5' });
        if (f.node === 5 && f.kind !== 'kernel-reload') onKernel++;
      }
    }
    // It is still a target of the faults that work on it (partitions, link-flap, slow, dup, reset).
    expect(onKernel).toBeGreaterThan(0);
  });

  it("leaves a cluster without a kernel peer its old schedule (CI's seed 1)", () => {
    // CI's cluster (--nodes 4 --seconds 45 --seed 1) and the faults its schedule had before the
    // kernel peer existed (read from a run's meta.json on bc757fd): seeds must keep replaying.
    const ci = {
      n: 4,
      hosts: [2, 3],
      embedded: [0, 1],
      apps: ['a20', 'a21', 'a22', 'a30', 'a31'],
      pausable: ['e0', 'e1', 't0', 't2', 'd2', 'd3'].map((proc) => ({ proc, node: Number(proc.slice(1)) })),
      rails: [0, 1],
    };
    const { faults } = schedule({ seed: 1, seconds: 45, topo: ci });
    expect(faults.map((f: { kind: string; at: number }) => `${f.kind}@${f.at}`)).toEqual([
      'pause@7964',
      'slow@9437',
      'isolate@11057',
      'loss@11666',
      'reorder@11824',
      'dup@13855',
      'kill-host@13865',
      'reset@16933',
      'rail-cut@17553',
      'partition-sym@18362',
      'halves@20971',
      'partition-asym@23574',
      'kill-app@24566',
      'kill-embedded-low@30784',
      'link-flap@30866',
      'kill-embedded-high@41528',
    ]);
  });
});

describe('nemesis report', () => {
  it('draws a well-formed SVG timeline: a band per fault, finite points, the phases', () => {
    const t0 = 1_000_000;
    const hist = [
      [
        { t: t0, ev: 'start', proc: 'e0' },
        { t: t0 + 100, ev: 'send', s: 'e0.0.1', d: 'x', q: 1, c: 1 },
        { t: t0 + 150, ev: 'ok', s: 'e0.0.1', d: 'x', q: 1 },
        { t: t0 + 1200, ev: 'recv', r: 'e0.0.1', s: 'y', q: 1 },
        { t: t0 + 2000, ev: 'stat', rss: 1, paths: [['10.77.0.2', 3]] },
      ],
    ];
    const s = series(hist, [{ t: t0 + 3000, ev: 'paths', node: 2, paths: [['10.77.0.1', 8]] }], t0, t0 + 10_000);
    expect(s.reads[1]).toBe(1);
    expect(s.latencyP50[0]).toBe(50);
    const faults = [
      { id: 'f0', kind: 'isolate', node: 1, start: t0 + 1000, end: t0 + 4000 },
      { id: 'f1', kind: 'kill-app', proc: 'a<20>&', start: t0 + 2000, end: t0 + 2500 },
    ];
    const svg = timelineSvg(s, faults, { healed: t0 + 5000, quiet: t0 + 8000 });
    const { tags } = parseXml(svg);
    expect(tags[0]).toBe('svg');
    expect((svg.match(/<rect class="fault"/g) ?? []).length).toBe(2);
    for (const id of ['faults', 'reads', 'latency', 'paths']) expect(svg).toContain(`<g id="${id}">`);
    expect(tags.filter((t) => t === 'polyline').length).toBe(5); // reads, median, max, paths of e0 and d2
    for (const m of svg.matchAll(/points="([^"]*)"/g))
      for (const p of m[1].split(' ')) for (const v of p.split(',')) expect(Number.isFinite(Number(v))).toBe(true);
    expect(svg).toContain('healed');
  });
});

describe('nemesis kernel peer address order (--kernel-order)', () => {
  // RDS/TCP's smaller address connects, so the kernel peer must be met in both roles; only the
  // last octet moves, the kernel stays the last node index (the same topology and schedule).
  const octets = (order?: string) => {
    const net = new Net('zz', 5, { kernel: 4, kernelOrder: order });
    return Array.from({ length: 5 }, (_, i) => Number(net.addr(i).split('.')[3]));
  };
  it('high (the default) puts it above every node, low below, middle between them; addresses stay distinct', () => {
    expect(octets()).toEqual([1, 2, 3, 4, 5]);
    expect(octets('high')).toEqual([1, 2, 3, 4, 5]);
    expect(octets('low')).toEqual([2, 3, 4, 5, 1]);
    const mid = octets('middle');
    expect(mid).toEqual([1, 2, 4, 5, 3]);
    const k = mid[4]!;
    expect(mid.slice(0, 4).some((o) => o < k) && mid.slice(0, 4).some((o) => o > k)).toBe(true);
    for (const group of [1, 2]) {
      const net = new Net('zz', 5, { kernel: 4, kernelOrder: 'middle' });
      expect(new Set(Array.from({ length: 5 }, (_, i) => net.addr(i, group))).size).toBe(5);
    }
  });
  it('refuses an order it does not know', () => {
    expect(() => new Net('zz', 5, { kernel: 4, kernelOrder: 'sideways' })).toThrow(/high, low or middle/);
  });
  it('a cluster without a kernel peer keeps i + 1', () => {
    const net = new Net('zz', 4, {});
    expect(Array.from({ length: 4 }, (_, i) => net.addr(i))).toEqual([
      '10.77.0.1',
      '10.77.0.2',
      '10.77.0.3',
      '10.77.0.4',
    ]);
  });
});
