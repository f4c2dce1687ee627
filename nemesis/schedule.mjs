// The nemesis's fault schedule: a pure function of (seed, run length, cluster shape), so the same
// seed replays the same faults at the same offsets. Every kind appears at least once; more are
// drawn at random until the run holds about one fault start every `gapMs`. Faults overlap freely,
// except two on the same process (a kill and a pause of one process cannot overlap) or two of the
// same kind on the same target (one link flap cannot bring up what another holds down).

/** mulberry32: small, fast, good enough to draw a schedule; the same seed gives the same stream. */
export function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: (xs) => xs[Math.floor(next() * xs.length)],
  };
}

/** Fault kinds, what they need of the cluster, and their durations in ms. */
export const KINDS = {
  'kill-app': { dur: [1000, 4000] }, // SIGKILL an application process of a host node; restarted at the end
  'kill-host': { dur: [2000, 5000] }, // SIGKILL an rds-socketd; restarted at the end
  'kill-embedded-low': { dur: [1000, 4000] }, // SIGKILL the embedded node with the smallest address
  'kill-embedded-high': { dur: [1000, 4000] }, // ... with the largest
  pause: { dur: [10000, 13000] }, // SIGSTOP .. SIGCONT, past the heartbeat (8 s) and peer-down (5 s)
  'partition-sym': { dur: [3000, 12000] },
  'partition-asym': { dur: [3000, 12000] },
  isolate: { dur: [3000, 12000] },
  halves: { dur: [3000, 12000] },
  'link-flap': { dur: [1000, 10000] },
  loss: { dur: [2000, 8000] },
  reset: { dur: [0, 0] }, // ss -K: instant
  slow: { dur: [3000, 8000] }, // tc tbf 2 Mbit/s on the node's egress
  dup: { dur: [2000, 8000] }, // nft dup of 10-50% of the node's outgoing packets
  reorder: { dur: [2000, 8000] }, // 10-50% of the node's outgoing packets held back in a 4 Mbit/s htb class
  'rail-cut': { dur: [2000, 8000] },
  'kernel-reload': { dur: [2000, 5000] }, // the kernel peer's application killed, rds_tcp unloaded and loaded again
};
/** Kinds made by a node's own inet rules, which the kernel peer's bridged traffic bypasses. */
const NOT_ON_KERNEL = new Set(['loss', 'reorder']);

/**
 * only: the kinds to draw from (default all).
 * topo: { n, hosts: [node], embedded: [node] (ascending address), apps: [proc name of an
 * application process of a host node], pausable: [{ proc, node }], rails: [a, b] | null }
 */
export function schedule({ seed, seconds, topo, gapMs = 4000, startMs = 4000, only = null }) {
  const r = rng(seed);
  const endMs = seconds * 1000;
  const kinds = Object.keys(KINDS).filter((k) => {
    if (only && !only.includes(k)) return false;
    if (k === 'rail-cut') return topo.rails !== null;
    if (k === 'kernel-reload') return topo.kernel != null;
    if (k === 'kill-host') return topo.hosts.length > 0;
    if (k === 'kill-app') return topo.apps.length > 0;
    if (k.startsWith('kill-embedded')) return topo.embedded.length > 0;
    return true;
  });
  const busy = new Map(); // key -> [start, end][]
  const free = (keys, s, e) => keys.every((k) => (busy.get(k) ?? []).every(([a, b]) => e + 500 <= a || s >= b + 500));
  const take = (keys, s, e) => {
    for (const k of keys) busy.set(k, [...(busy.get(k) ?? []), [s, e]]);
  };
  const nodes = Array.from({ length: topo.n }, (_, i) => i);
  const ruled = topo.kernel == null ? nodes : nodes.filter((i) => i !== topo.kernel);
  /** Draws the target and parameters of one fault of `kind`, and the keys it occupies. */
  const draw = (kind) => {
    const f = { kind };
    let keys;
    switch (kind) {
      case 'kill-app':
        f.proc = r.pick(topo.apps);
        keys = [`p:${f.proc}`];
        break;
      case 'kill-host':
        f.node = r.pick(topo.hosts);
        keys = [`p:d${f.node}`];
        break;
      case 'kill-embedded-low':
      case 'kill-embedded-high':
        f.node = kind.endsWith('low') ? topo.embedded[0] : topo.embedded[topo.embedded.length - 1];
        keys = [`p:e${f.node}`];
        break;
      case 'pause': {
        const t = r.pick(topo.pausable);
        f.proc = t.proc;
        f.node = t.node;
        keys = [`p:${f.proc}`];
        break;
      }
      case 'partition-sym':
      case 'partition-asym': {
        const shuffled = [...nodes];
        for (let i = shuffled.length - 1; i > 0; i--) {
          const j = r.int(0, i);
          [shuffled[i], shuffled[j]] = [shuffled[j], shuffled[i]];
        }
        const cut = r.int(1, topo.n - 1);
        f.from = shuffled.slice(0, cut).sort((x, y) => x - y);
        f.to = shuffled.slice(cut).sort((x, y) => x - y);
        keys = [`k:${kind}`];
        break;
      }
      case 'isolate':
        f.node = r.pick(nodes);
        keys = [`k:isolate:${f.node}`];
        break;
      case 'halves': {
        const h = Math.floor(topo.n / 2);
        f.from = nodes.slice(0, h);
        f.to = nodes.slice(h);
        keys = ['k:halves'];
        break;
      }
      case 'kernel-reload':
        f.node = topo.kernel;
        f.proc = `k${topo.kernel}`;
        keys = [`p:${f.proc}`];
        break;
      case 'loss':
      case 'dup':
        f.node = r.pick(NOT_ON_KERNEL.has(kind) ? ruled : nodes);
        f.pct = r.int(10, 50);
        keys = [`k:${kind}:${f.node}`];
        break;
      case 'reorder': // the node's root qdisc, as slow's
        f.node = r.pick(ruled);
        f.pct = r.int(10, 50);
        keys = [`k:qdisc:${f.node}`];
        break;
      case 'slow':
        f.node = r.pick(nodes);
        keys = [`k:qdisc:${f.node}`];
        break;
      case 'rail-cut':
        f.node = r.pick(topo.rails);
        keys = ['k:rail'];
        break;
      default: // link-flap, reset
        f.node = r.pick(nodes);
        keys = [`k:${kind}:${f.node}`];
    }
    const [lo, hi] = KINDS[kind].dur;
    f.dur = r.int(lo, hi);
    return { f, keys };
  };
  const faults = [];
  const place = (kind, tries) => {
    for (let t = 0; t < tries; t++) {
      const { f, keys } = draw(kind);
      const latest = endMs - f.dur - 1000;
      if (latest < startMs) return false;
      f.at = r.int(startMs, latest);
      if (!free(keys, f.at, f.at + f.dur)) continue;
      take(keys, f.at, f.at + f.dur);
      faults.push(f);
      return true;
    }
    return false;
  };
  for (const k of kinds) place(k, 50);
  const target = Math.max(kinds.length, Math.floor((endMs - startMs) / gapMs));
  for (let guard = 0; faults.length < target && guard < target * 20; guard++) place(r.pick(kinds), 1);
  faults.sort((a, b) => a.at - b.at || a.kind.localeCompare(b.kind));
  faults.forEach((f, i) => {
    f.id = `f${i}`;
  });
  const missing = kinds.filter((k) => !faults.some((f) => f.kind === k));
  return { faults, kinds, missing };
}
