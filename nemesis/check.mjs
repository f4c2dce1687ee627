#!/usr/bin/env node
// The nemesis checker: reads a run's histories (hist/*.jsonl, faults.jsonl, samples.jsonl,
// meta.json) and reports, per (sending socket, receiving socket) pair and in total, every
// breach of what RDS promises. See docs/nemesis.md for the precise definitions; in short:
//   duplicate       a message delivered twice to one receiving socket incarnation (for 0 B
//                   messages, which carry no sequence number: more read from a sender's socket
//                   than it sent)
//   reorder         a receiving incarnation read a pair's messages out of sequence order (from a
//                   kernel socket: only within one path and one connection; the rest are counted
//                   apart as kernel-path-order, below)
//   altered         a message read with another body hash than was sent, at another socket
//                   than it was sent to, or that no socket sent
//   confirm-unread  send({ confirm }) resolved, and no application read the message (not to
//                   the kernel peer: to a kernel, confirm means its TCP acknowledged the message,
//                   README's "What it guarantees"; a message it took and its application never
//                   read is held to `vanished` instead)
//   settle-late     a send() with a timeout settled more than SLACK (plus the event-loop delays
//                   its process reported meanwhile) after it (the sender's process and host
//                   node not paused meanwhile)
//   unsettled       a send() with confirm or timeout never settled, its socket open to the end
//   vanished        a message not read by anyone, with no error for it, sent by a socket open
//                   to the end (whose flush() at the end of sending succeeded: otherwise its
//                   messages may still be on their way) to a socket bound before the send and
//                   open to the end (a kernel socket: bound before the send by more than the
//                   guest clock's error), and not cancelled (RDS_CANCEL_SENT_TO) after it was sent
//   stuck-pair      after the last fault healed, a pair of sockets open to the end that did not
//                   exchange a message within livenessMs (from the heal, or the later opening)
//   app-mute        a host node's application process with no confirmed send after the heal
//   rss             a process whose RSS passed the bound
// Counted apart, not anomalies:
//   kernel-path-order  a kernel socket's message read after a later one of the same socket that
//                   came on another path (the receiver's RdsMessage.path), or with an rds_tcp
//                   reload of that kernel between the two reads (every carrier is new after one):
//                   the kernel orders a socket's messages per path and connection only
//                   (docs/nemesis.md, "The kernel's reorders")
//   kernel-flush    (a 7.x kernel peer) a kernel socket's unread message to a node of ours that had
//                   restarted, sent before that life's first path to the kernel came up: the kernel
//                   could only put it on a connection to the previous life, and when the new life's
//                   GEN_NUM reaches it the kernel drops what it holds in flight there, telling no
//                   one (test/interop/kernel-flush-new-life.test.ts; 6.x delivers it). Only for
//                   nodes whose histories carry their path events (embedded nodes)
// Usage: node nemesis/check.mjs DIR [--json]. Exit status 1 on any anomaly.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const ANOMALY_KINDS = [
  'duplicate',
  'reorder',
  'altered',
  'confirm-unread',
  'settle-late',
  'unsettled',
  'vanished',
  'stuck-pair',
  'app-mute',
  'rss',
];
const SLACK_MS = 2000;
// The least error assumed for the kernel guest's clock (its reads were seen up to 0.22 s early).
const KERNEL_CLOCK_SLACK_MS = 250;
const RSS_BOUND = 768 << 20;

const readJsonl = (file) => {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  const out = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    try {
      out.push(JSON.parse(line));
    } catch {
      // the last line of a killed process may be cut short
    }
  }
  return out;
};

/** Reads a run directory and checks it. */
export function check(dir) {
  const files = readdirSync(join(dir, 'hist')).filter((f) => f.endsWith('.jsonl'));
  const hist = files.map((f) => readJsonl(join(dir, 'hist', f)));
  const meta = JSON.parse(readFileSync(join(dir, 'meta.json'), 'utf8'));
  return analyse({
    hist,
    faults: readJsonl(join(dir, 'faults.jsonl')),
    samples: readJsonl(join(dir, 'samples.jsonl')),
    meta,
  });
}

/**
 * hist: one array of records per history file (file order is the order things happened in that
 * process); faults: faults.jsonl records; samples: samples.jsonl; meta: { seed, phases: { healed },
 * livenessMs, topo? }.
 */
export function analyse({ hist, faults = [], samples = [], meta }) {
  const kernelAddrs = new Set((meta.topo?.procs ?? []).filter((p) => p.mode === 'kernel').map((p) => p.addr));
  const incs = new Map(); // s -> { sock, open, close, ended, proc }
  const sends = new Map(); // s|d|q -> send record (+ out, delivered)
  const cancels = new Map(); // s|d -> [t]
  const recvsByInc = new Map(); // r -> [recv]
  const okByProc = new Map(); // proc -> last ok time
  const lags = new Map(); // proc -> [t, lag ms] (once a second)
  const procOf = (s) => s.split('.')[0];
  // The kernel peer's records are stamped with the host's clock as the guest last read it
  // (kernel-app.py), which runs early by that read's delay: at least as much as any of its reads
  // was stamped before its send (below), and never taken as less than KERNEL_CLOCK_SLACK_MS.
  let kernelEarly = 0;
  for (const recs of hist) {
    const proc = recs[0]?.proc;
    for (const x of recs) {
      switch (x.ev) {
        case 'stat':
          if (proc && x.lag !== undefined) {
            if (!lags.has(proc)) lags.set(proc, []);
            lags.get(proc).push([x.t, x.lag]);
          }
          break;
        case 'open':
          incs.set(x.s, { sock: x.sock, open: x.t, proc: procOf(x.s) });
          break;
        case 'close':
          if (incs.has(x.s)) incs.get(x.s).close = x.t;
          break;
        case 'end':
          if (incs.has(x.s)) incs.get(x.s).ended = x.t;
          break;
        case 'flushed':
          if (incs.has(x.s)) incs.get(x.s).flushed = x.ok;
          break;
        case 'send':
          sends.set(`${x.s}|${x.d}|${x.q}`, { ...x, delivered: 0 });
          break;
        case 'ok':
        case 'err': {
          const m = sends.get(`${x.s}|${x.d}|${x.q}`);
          if (m) m.out = x;
          if (x.ev === 'ok' && m?.c) okByProc.set(procOf(x.s), Math.max(okByProc.get(procOf(x.s)) ?? 0, x.t));
          break;
        }
        case 'cancel': {
          const k = `${x.s}|${x.d}`;
          cancels.set(k, [...(cancels.get(k) ?? []), x.t]);
          break;
        }
        case 'recv':
          if (!recvsByInc.has(x.r)) recvsByInc.set(x.r, []);
          recvsByInc.get(x.r).push(x);
          break;
      }
    }
  }
  const stayed = (s) => {
    const i = incs.get(s);
    return i !== undefined && i.ended !== undefined && i.close === undefined;
  };
  const sockOf = (s) => incs.get(s)?.sock;
  const anomalies = [];
  const pairs = new Map();
  const pair = (from, to) => {
    const k = `${from}->${to}`;
    if (!pairs.has(k)) pairs.set(k, { sent: 0, delivered: 0, confirmed: 0, errors: 0, anomalies: 0 });
    return pairs.get(k);
  };
  const flag = (kind, t, from, to, detail, s, d) => {
    anomalies.push({ kind, t, pair: `${from}->${to}`, detail, s, d });
    pair(from, to).anomalies++;
  };

  // Receives: duplicates, order, integrity.
  const emptyRecv = new Map();
  const lastEmpty = new Map();
  const kernelPathOrder = [];
  const kernelFlush = [];
  // rds_tcp reloads of a kernel peer, by its address: every carrier of its connections is new after one.
  const kernelAddrOf = new Map(
    (meta.topo?.procs ?? []).filter((p) => p.mode === 'kernel').map((p) => [p.proc, p.addr]),
  );
  const reloads = faultSpans(faults)
    .filter((f) => f.kind === 'kernel-reload')
    .map((f) => ({ addr: kernelAddrOf.get(f.proc), start: f.start }));
  for (const [r, list] of recvsByInc) {
    const seen = new Set();
    const last = new Map();
    const lastPath = new Map(); // sender incarnation -> the path of its highest-numbered read
    const lastAt = new Map(); // sender incarnation -> when its highest-numbered message was read
    const at = sockOf(r) ?? list[0].sock;
    for (const x of list) {
      if (x.s === undefined) {
        // Per receiving incarnation: a restarted receiver may get again what its last life read.
        if (x.n === 0) {
          emptyRecv.set(`${x.from}->${at}->${r}`, (emptyRecv.get(`${x.from}->${at}->${r}`) ?? 0) + 1);
          lastEmpty.set(`${x.from}->${at}->${r}`, x.t);
        } else flag('altered', x.t, x.from, at, `${x.n} B with no header from ${x.from}`);
        continue;
      }
      const from = sockOf(x.s) ?? x.from;
      const m = sends.get(`${x.s}|${at}|${x.q}`);
      if (!m) {
        flag('altered', x.t, from, at, `${x.s} #${x.q} read by ${r}, never sent to ${at}`, x.s, at);
        continue;
      }
      if (m.h !== x.h || m.n !== x.n)
        flag('altered', x.t, from, at, `${x.s} #${x.q}: sent ${m.n} B ${m.h}, read ${x.n} B ${x.h}`, x.s, at);
      const key = `${x.s}|${x.q}`;
      if (seen.has(key)) {
        flag('duplicate', x.t, from, at, `${x.s} #${x.q} read twice by ${r}`, x.s, at);
        continue;
      }
      seen.add(key);
      const prev = last.get(x.s) ?? 0;
      if (x.q < prev) {
        const detail = `${x.s} #${x.q} read by ${r} after #${prev}`;
        const p = lastPath.get(x.s);
        const paths = p === undefined ? '' : ` (path ${x.p} after path ${p})`;
        const kernel = kernelAddrs.has(from.split(':')[0]);
        const crossPath = x.p !== undefined && p !== undefined && x.p !== p;
        const reload =
          kernel && reloads.some((f) => f.addr === from.split(':')[0] && f.start > lastAt.get(x.s) && f.start <= x.t);
        if (kernel && (crossPath || reload))
          kernelPathOrder.push({
            t: x.t,
            pair: `${from}->${at}`,
            detail: `${detail}${paths}${reload && !crossPath ? ', an rds_tcp reload between' : ''}`,
          });
        else flag('reorder', x.t, from, at, `${detail}${paths}`, x.s, at);
      } else {
        last.set(x.s, x.q);
        lastPath.set(x.s, x.p);
        lastAt.set(x.s, x.t);
      }
      if (m.delivered++ === 0) pair(from, at).delivered++;
      // A read stamped before its send shows how far the kernel guest's clock runs early.
      if (kernelAddrs.has(at.split(':')[0])) kernelEarly = Math.max(kernelEarly, m.t - x.t);
    }
  }

  // The lives of each embedded node (by address): when each began, and when its first path to
  // the kernel came up (the moment the kernel could learn its GEN_NUM).
  const flushes = Number.parseInt(String(meta.topo?.kernel ?? '0'), 10) >= 7;
  const addrOf = new Map((meta.topo?.procs ?? []).map((p) => [p.proc, p.addr]));
  const lives = new Map(); // addr -> [{ start, kernelUp }] in order
  if (flushes)
    for (const recs of hist) {
      const st = recs[0];
      const addr = st?.ev === 'start' ? addrOf.get(st.proc) : undefined;
      if (addr === undefined) continue;
      const up = recs.find((x) => x.ev === 'path' && x.what === 'up' && kernelAddrs.has(x.peer));
      if (!lives.has(addr)) lives.set(addr, []);
      lives.get(addr).push({ start: st.t, kernelUp: up?.t ?? Number.POSITIVE_INFINITY });
    }
  for (const l of lives.values()) l.sort((x, y) => x.start - y.start);
  /** A kernel's message the kernel itself dropped at a restart of its destination (kernel-flush). */
  function flushedByKernel(m, from) {
    if (!kernelAddrs.has(from.split(':')[0])) return false;
    const l = lives.get(m.d.split(':')[0]);
    if (l === undefined) return false;
    let i = -1;
    while (i + 1 < l.length && l[i + 1].start <= m.t) i++;
    return i >= 1 && m.t < l[i].kernelUp;
  }

  // Sends: confirmations, settling, silent loss.
  const emptySent = new Map();
  const paused = pauseWindows(faults, meta);
  for (const m of sends.values()) {
    const from = sockOf(m.s) ?? m.s;
    const p = pair(from, m.d);
    p.sent++;
    if (m.out?.ev === 'ok' && m.c) p.confirmed++;
    if (m.out?.ev === 'err') p.errors++;
    if (m.n === 0) {
      emptySent.set(`${from}->${m.d}`, (emptySent.get(`${from}->${m.d}`) ?? 0) + 1);
      continue;
    }
    const lied = m.out?.ev === 'ok' && m.c && m.delivered === 0 && !kernelAddrs.has(m.d.split(':')[0]);
    if (lied)
      flag(
        'confirm-unread',
        m.out.t,
        from,
        m.d,
        `${m.s} #${m.q} confirmed, never read${sameNode(from, m.d) ? ' (both sockets on one node)' : ''}`,
        m.s,
        m.d,
      );
    if (m.c || m.to) {
      if (
        m.out &&
        m.to &&
        m.out.t - m.t > m.to + SLACK_MS + lagDuring(procOf(m.s), m.t, m.out.t + 1000) &&
        !paused(procOf(m.s), m.t, m.out.t)
      )
        flag(
          'settle-late',
          m.out.t,
          from,
          m.d,
          `${m.s} #${m.q}: timeout ${m.to} ms, settled after ${m.out.t - m.t} ms`,
          m.s,
          m.d,
        );
      if (!m.out && stayed(m.s))
        flag('unsettled', m.t, from, m.d, `${m.s} #${m.q} (${m.m}${m.c ? ', confirm' : ''}) never settled`, m.s, m.d);
    }
    if (
      !lied &&
      m.delivered === 0 &&
      m.out?.ev !== 'err' &&
      stayed(m.s) &&
      incs.get(m.s).flushed !== false &&
      receiverStayed(m.d, m.t) &&
      !cancelledAfter(m)
    ) {
      if (flushedByKernel(m, from)) {
        kernelFlush.push({ t: m.t, pair: `${from}->${m.d}`, detail: `${m.s} #${m.q} (${m.n} B, ${m.m})` });
        continue;
      }
      flag(
        'vanished',
        m.t,
        from,
        m.d,
        `${m.s} #${m.q} (${m.n} B, ${m.m}${m.c ? ', confirm' : ''}) neither read nor reported failed`,
        m.s,
        m.d,
      );
    }
  }
  for (const [k, n] of emptyRecv) {
    const [from, to, r] = k.split('->');
    const sent = emptySent.get(`${from}->${to}`) ?? 0;
    if (n > sent) flag('duplicate', lastEmpty.get(k), from, to, `${n} empty messages read by ${r}, ${sent} sent`);
  }
  /** The sum of the event-loop delays the sender's process (its main thread) reported over [a, b]. */
  function lagDuring(proc, a, b) {
    let sum = 0;
    for (const [t, l] of lags.get(proc.replace(/w$/, '')) ?? []) if (t >= a && t <= b) sum += l;
    return sum;
  }
  function receiverStayed(d, t) {
    // A kernel socket's opening is known only to within the guest clock's error: a message sent
    // just after its stamp may have reached the kernel before the bind (the kernel drops it,
    // recv_drop_no_sock, and tells no one, as it does for any unbound port).
    const slack = kernelAddrs.has(d.split(':')[0]) ? Math.max(KERNEL_CLOCK_SLACK_MS, kernelEarly) : 0;
    for (const [s, i] of incs) if (i.sock === d && i.open + slack < t && stayed(s)) return true;
    return false;
  }
  function cancelledAfter(m) {
    return (cancels.get(`${m.s}|${m.d}`) ?? []).some((t) => t >= m.t);
  }

  // Liveness after the heal.
  const healT = meta.phases?.healed;
  const bound = meta.livenessMs ?? 10000;
  let lateOpened = 0;
  if (healT !== undefined) {
    const finalInc = new Map(); // sock -> open time of its incarnation open to the end
    for (const [s, i] of incs) if (stayed(s)) finalInc.set(i.sock, i.open);
    const firstAfter = new Map(); // from->to -> first read time after the heal
    for (const list of recvsByInc.values())
      for (const x of list) {
        if (x.t < healT) continue;
        const k = `${x.s !== undefined ? (sockOf(x.s) ?? x.from) : x.from}->${x.sock}`;
        if (!firstAfter.has(k) || firstAfter.get(k) > x.t) firstAfter.set(k, x.t);
      }
    const wanted = new Map(); // from->to -> send times
    for (const m of sends.values()) {
      const k = `${sockOf(m.s) ?? m.s}->${m.d}`;
      if (!wanted.has(k)) wanted.set(k, []);
      wanted.get(k).push(m.t);
    }
    // A pair whose messages after the heal the kernel dropped (kernel-flush) is held to its first
    // send after the last of them: the kernel's application does not send those again.
    const flushedUntil = new Map();
    for (const f of kernelFlush)
      if (f.t >= healT) flushedUntil.set(f.pair, Math.max(flushedUntil.get(f.pair) ?? 0, f.t));
    for (const [k, times] of wanted) {
      const [from, to] = k.split('->');
      if (!finalInc.has(from) || !finalInc.has(to) || from === to) continue;
      let start = Math.max(healT, finalInc.get(from), finalInc.get(to));
      const flushed = flushedUntil.get(k);
      if (flushed !== undefined) start = Math.max(start, Math.min(...times.filter((t) => t > flushed)));
      // A socket that opened too late to be probed before sending stopped cannot be held to it.
      if (meta.phases.quiet !== undefined && start + bound > meta.phases.quiet) {
        lateOpened++;
        continue;
      }
      const got = firstAfter.get(k);
      if (got === undefined || got > start + bound)
        flag(
          'stuck-pair',
          start,
          from,
          to,
          got === undefined ? 'no message read after the heal' : `first read ${got - start} ms after the heal`,
        );
    }
    for (const proc of meta.topo?.apps ?? []) {
      const last = okByProc.get(proc) ?? 0;
      if (last < healT) flag('app-mute', healT, proc, '*', `${proc} had no confirmed send after the heal`);
    }
  }
  for (const x of samples) {
    if (x.ev === 'rss' && x.rss > (meta.rssBound ?? RSS_BOUND))
      flag('rss', x.t, x.proc, '*', `${x.proc} (life ${x.epoch}) RSS ${(x.rss / 2 ** 20).toFixed(0)} MiB`);
  }
  // One rss line per process is enough.
  const seenRss = new Set();
  const kept = anomalies.filter((x) => x.kind !== 'rss' || (!seenRss.has(x.pair) && seenRss.add(x.pair)));
  kept.sort((x, y) => x.t - y.t);
  const counts = Object.fromEntries(ANOMALY_KINDS.map((k) => [k, kept.filter((x) => x.kind === k).length]));
  const totals = { sent: 0, delivered: 0, confirmed: 0, errors: 0 };
  for (const p of pairs.values()) for (const k of Object.keys(totals)) totals[k] += p[k];
  const first = kept[0];
  return {
    seed: meta.seed,
    counts,
    kernelPathOrder: { count: kernelPathOrder.length, first: kernelPathOrder.slice(0, 20) },
    kernelFlush: { count: kernelFlush.length, first: kernelFlush.slice(0, 20) },
    anomalyCount: kept.length,
    anomalies: kept.slice(0, 200),
    byKindPair: countByKindPair(kept),
    totals,
    livenessUnchecked: lateOpened,
    pairs: Object.fromEntries(pairs),
    faults: faultSpans(faults),
    first: first ? excerpt(first, hist, faults, meta) : null,
  };
}

/** Anomaly counts per kind and (sending node -> receiving node), for the report. */
function countByKindPair(list) {
  const out = {};
  for (const a of list) {
    const k = `${a.kind} ${a.pair.replace(/:\d+/g, '')}`;
    out[k] = (out[k] ?? 0) + 1;
  }
  return out;
}

function sameNode(a, b) {
  return a.split(':')[0] === b.split(':')[0];
}

/** Whether `proc` (or the host node it is attached to) was stopped at any time in [a, b]. */
function pauseWindows(faults, meta) {
  const spans = faultSpans(faults).filter((f) => f.kind === 'pause');
  const nodeOf = new Map(
    (meta.topo?.procs ?? []).flatMap((p) => [[p.proc, p.node], ...(p.worker ? [[p.worker.proc, p.node]] : [])]),
  );
  return (proc, a, b) =>
    spans.some((f) => f.start <= b && f.end >= a && (f.proc === proc || f.proc === `d${nodeOf.get(proc)}`));
}

/** Faults as { id, kind, start, end, ...target } from their start and end records. */
export function faultSpans(faults) {
  const spans = new Map();
  for (const x of faults) {
    if (x.ev === 'start') spans.set(x.id, { ...x, start: x.t, end: x.t });
    if (x.ev === 'end' && spans.has(x.id)) spans.get(x.id).end = x.t;
  }
  return [...spans.values()].map(({ ev, t, t0, ...f }) => f);
}

/**
 * The history around an anomaly: the pair's records from 2 s before to 0.5 s after, the faults
 * active then, and what the two nodes' paths to each other did in the 30 s before (`path` records
 * of embedded nodes; a host node's are in its log, dN.log).
 */
function excerpt(a, hist, faults, meta = {}) {
  const [from, to] = a.pair.split('->');
  const addrOf = new Map((meta.topo?.procs ?? []).map((p) => [p.proc, p.addr]));
  const fromAddr = from.split(':')[0];
  const toAddr = to.split(':')[0];
  const lines = [];
  const paths = [];
  for (const recs of hist) {
    const own = addrOf.get(recs[0]?.proc);
    for (const x of recs) {
      if (x.ev === 'path') {
        const between = (own === fromAddr && x.peer === toAddr) || (own === toAddr && x.peer === fromAddr);
        if (between && x.t >= a.t - 30000 && x.t <= a.t + 500) paths.push({ ...x, at: own });
        continue;
      }
      if (x.t < a.t - 2000 || x.t > a.t + 500) continue;
      const hit =
        (a.s && (x.s === a.s || x.r === a.s)) || x.sock === to || x.d === to || x.sock === from || x.from === from;
      if (hit && x.ev !== 'stat') lines.push(x);
    }
  }
  lines.sort((x, y) => x.t - y.t);
  paths.sort((x, y) => x.t - y.t);
  const active = faultSpans(faults).filter((f) => f.start <= a.t && f.end >= a.t);
  return { anomaly: a, records: lines.slice(-14), paths: paths.slice(-20), activeFaults: active };
}

export function printCheck(res, out = console.log) {
  const t = res.totals;
  out(
    `nemesis check (seed ${res.seed}): ${t.sent} messages sent, ${t.delivered} read, ${t.confirmed} confirmed, ${t.errors} reported failed, ${res.faults.length} faults`,
  );
  for (const k of ANOMALY_KINDS) out(`  ${k.padEnd(15)} ${String(res.counts[k]).padStart(6)}  (seed ${res.seed})`);
  const kpo = res.kernelPathOrder;
  if (kpo.count > 0) {
    out(
      `  not anomalies: kernel-path-order ${kpo.count} (a kernel socket's messages on different paths, or across an rds_tcp reload: the kernel orders them per path and connection only; docs/nemesis.md)`,
    );
    out(`    e.g. ${kpo.first[0].pair}: ${kpo.first[0].detail}`);
  }
  const kf = res.kernelFlush;
  if (kf.count > 0) {
    out(
      `  not anomalies: kernel-flush ${kf.count} (a 7.x kernel's messages to a node's new life sent before that life's first path to it: the kernel dropped them with its connections to the old life; docs/nemesis.md)`,
    );
    out(`    e.g. ${kf.first[0].pair}: ${kf.first[0].detail}`);
  }
  if (res.first) {
    const { anomaly: a, records, activeFaults } = res.first;
    out(`first anomaly: ${a.kind} ${a.pair} at ${new Date(a.t).toISOString()}: ${a.detail}`);
    out(
      `  faults active then: ${activeFaults.length ? activeFaults.map((f) => `${f.id} ${f.kind}${f.node !== undefined ? ` node ${f.node}` : ''}${f.proc ? ` ${f.proc}` : ''}`).join(', ') : 'none'}`,
    );
    for (const x of records) out(`  ${JSON.stringify(x)}`);
    const paths = res.first.paths ?? [];
    if (paths.length > 0) {
      out('  paths between the two nodes before it:');
      for (const x of paths) out(`    ${JSON.stringify(x)}`);
    }
  }
  if (res.livenessUnchecked) out(`  (${res.livenessUnchecked} pairs opened too late to be checked for liveness)`);
  out(res.anomalyCount === 0 ? 'nemesis check: no anomaly' : `nemesis check: ${res.anomalyCount} anomalies`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const dir = process.argv[2];
  if (!dir) {
    console.error('usage: node nemesis/check.mjs DIR [--json]');
    process.exit(2);
  }
  const res = check(dir);
  if (process.argv.includes('--json')) console.log(JSON.stringify(res, null, 1));
  else printCheck(res);
  process.exitCode = res.anomalyCount > 0 ? 1 : 0; // not exit(): a pipe may still hold the output
}
