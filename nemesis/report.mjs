// A run's report: report.json (the checker's result, the schedule, the series below) and
// report.html, one self-contained page (no script, no external resource) whose inline SVG shows
// the faults as bands on a timeline over messages read per second, confirmation latency
// (median and maximum per second) and paths UP per node.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ANOMALY_KINDS } from './check.mjs';

const readJsonl = (file) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .flatMap((l) => {
      try {
        return [JSON.parse(l)];
      } catch {
        return [];
      }
    });

/** Per-second series from the histories and samples. */
export function series(hist, samples, t0, t1) {
  const secs = Math.max(1, Math.ceil((t1 - t0) / 1000));
  const reads = new Array(secs).fill(0);
  const lat = Array.from({ length: secs }, () => []);
  const paths = new Map(); // node label -> per-second value (last sample of the second)
  const bin = (t) => Math.min(secs - 1, Math.max(0, Math.floor((t - t0) / 1000)));
  for (const recs of hist) {
    const sent = new Map();
    for (const x of recs) {
      if (x.ev === 'recv') reads[bin(x.t)]++;
      else if (x.ev === 'send' && x.c) sent.set(`${x.s}|${x.d}|${x.q}`, x.t);
      else if (x.ev === 'ok' && sent.has(`${x.s}|${x.d}|${x.q}`))
        lat[bin(x.t)].push(x.t - sent.get(`${x.s}|${x.d}|${x.q}`));
      else if (x.ev === 'stat' && x.paths && recs[0]?.proc) {
        const label = recs[0].proc;
        if (!paths.has(label)) paths.set(label, new Array(secs).fill(null));
        paths.get(label)[bin(x.t)] = x.paths.reduce((a, [, n]) => a + n, 0);
      }
    }
  }
  for (const x of samples) {
    if (x.ev !== 'paths') continue;
    const label = `d${x.node}`;
    if (!paths.has(label)) paths.set(label, new Array(secs).fill(null));
    paths.get(label)[bin(x.t)] = x.paths.reduce((a, [, n]) => a + n, 0);
  }
  const q = (xs, f) =>
    xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * f))] : null;
  return {
    t0,
    secs,
    reads,
    latencyP50: lat.map((xs) => q(xs, 0.5)),
    latencyMax: lat.map((xs) => q(xs, 1)),
    paths: Object.fromEntries(paths),
  };
}

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const COLORS = [
  '#d62728',
  '#1f77b4',
  '#2ca02c',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf',
  '#ff7f0e',
  '#393b79',
  '#637939',
  '#8c6d31',
  '#843c39',
];

/** The timeline as an SVG string (also used by the test that validates it). */
export function timelineSvg(s, faults, phases) {
  const W = 1000;
  const L = 110; // room for the fault lanes' names
  const x = (t) => L + ((t - s.t0) / 1000 / s.secs) * (W - L - 10);
  const kinds = [...new Set(faults.map((f) => f.kind))].sort();
  const laneH = 12;
  const fh = kinds.length * laneH + 20;
  const chartH = 110;
  const charts = [
    { id: 'reads', title: 'messages read per second', lines: [{ v: s.reads, c: '#1f77b4' }] },
    {
      id: 'latency',
      title: 'confirm latency, ms (median, max)',
      lines: [
        { v: s.latencyP50, c: '#2ca02c' },
        { v: s.latencyMax, c: '#d62728' },
      ],
    },
    {
      id: 'paths',
      title: 'paths UP per node',
      lines: Object.entries(s.paths).map(([label, v], i) => ({ v, c: COLORS[i % COLORS.length], label })),
    },
  ];
  const H = fh + charts.length * (chartH + 20) + 20;
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="10">`,
  ];
  out.push(`<g id="faults"><text x="4" y="12">faults</text>`);
  kinds.forEach((k, i) => out.push(`<text x="4" y="${24 + i * laneH + 9}">${esc(k)}</text>`));
  for (const f of faults) {
    const i = kinds.indexOf(f.kind);
    const w = Math.max(2, x(f.end) - x(f.start));
    out.push(
      `<rect class="fault" x="${x(f.start).toFixed(1)}" y="${24 + i * laneH}" width="${w.toFixed(1)}" height="${laneH - 2}" fill="${COLORS[i % COLORS.length]}" fill-opacity="0.6"><title>${esc(`${f.id} ${f.kind} ${JSON.stringify({ node: f.node, proc: f.proc, from: f.from, to: f.to, pct: f.pct })} ${f.end - f.start} ms`)}</title></rect>`,
    );
  }
  out.push('</g>');
  let y0 = fh;
  for (const c of charts) {
    const all = c.lines.flatMap((l) => l.v).filter((v) => v !== null);
    const max = Math.max(1, ...all);
    out.push(`<g id="${c.id}"><text x="4" y="${y0 + 12}">${esc(c.title)} (max ${max})</text>`);
    out.push(`<rect x="${L}" y="${y0 + 16}" width="${W - L - 10}" height="${chartH}" fill="none" stroke="#ccc"/>`);
    for (const l of c.lines) {
      const pts = [];
      l.v.forEach((v, k) => {
        if (v !== null)
          pts.push(`${x(s.t0 + k * 1000 + 500).toFixed(1)},${(y0 + 16 + chartH - (v / max) * chartH).toFixed(1)}`);
      });
      if (pts.length)
        out.push(
          `<polyline fill="none" stroke="${l.c}" stroke-width="1.2" points="${pts.join(' ')}">${l.label ? `<title>${esc(l.label)}</title>` : ''}</polyline>`,
        );
    }
    out.push('</g>');
    y0 += chartH + 20;
  }
  for (const [name, t] of Object.entries(phases ?? {})) {
    if (t === undefined || t < s.t0) continue;
    out.push(
      `<g class="phase"><line x1="${x(t).toFixed(1)}" x2="${x(t).toFixed(1)}" y1="0" y2="${H}" stroke="#000" stroke-dasharray="3,3"/><text x="${(x(t) + 2).toFixed(1)}" y="${H - 4}">${esc(name)}</text></g>`,
    );
  }
  out.push('</svg>');
  return out.join('\n');
}

export function writeReport(dir, result) {
  const meta = JSON.parse(readFileSync(join(dir, 'meta.json'), 'utf8'));
  const hist = readdirSync(join(dir, 'hist'))
    .filter((f) => f.endsWith('.jsonl'))
    .map((f) => readJsonl(join(dir, 'hist', f)));
  let samples = [];
  try {
    samples = readJsonl(join(dir, 'samples.jsonl'));
  } catch {
    // none
  }
  const t0 = meta.phases.start;
  const t1 = meta.phases.end ?? Date.now();
  const s = series(hist, samples, t0, t1);
  const svg = timelineSvg(s, result.faults, meta.phases);
  const json = join(dir, 'report.json');
  const html = join(dir, 'report.html');
  const { topo, schedule, ...params } = meta;
  writeFileSync(json, JSON.stringify({ params, schedule: schedule.faults, check: result, series: s }, null, 1));
  const byKind = {};
  for (const f of result.faults) byKind[f.kind] = (byKind[f.kind] ?? 0) + 1;
  const pairRows = Object.entries(result.pairs)
    .sort((a, b) => b[1].anomalies - a[1].anomalies || b[1].sent - a[1].sent)
    .slice(0, 40);
  const page = `<!doctype html>
<html><head><meta charset="utf-8"><title>rds-socket nemesis, seed ${esc(meta.seed)}</title>
<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child,th:first-child{text-align:left}pre{background:#f6f6f6;padding:6px;overflow:auto}.bad{color:#b00;font-weight:bold}</style>
</head><body>
<h1>rds-socket nemesis: ${result.anomalyCount === 0 ? 'no anomaly' : `<span class="bad">${result.anomalyCount} anomalies</span>`}</h1>
<p>seed ${esc(meta.seed)}, ${esc(meta.nodes)} nodes, ${esc(meta.seconds)} s of faults; reproduce: <code>npm run nemesis -- --nodes ${esc(meta.nodes)} --seconds ${esc(meta.seconds)} --seed ${esc(meta.seed)}</code></p>
<p>${result.totals.sent} messages sent, ${result.totals.delivered} read, ${result.totals.confirmed} confirmed, ${result.totals.errors} reported failed</p>
<table><tr><th>anomaly</th><th>count</th></tr>${ANOMALY_KINDS.map((k) => `<tr><td>${k}</td><td${result.counts[k] ? ' class="bad"' : ''}>${result.counts[k]}</td></tr>`).join('')}</table>
<h2>Timeline</h2>
${svg}
<h2>Faults</h2>
<table><tr><th>kind</th><th>count</th></tr>${Object.entries(byKind)
    .map(([k, n]) => `<tr><td>${esc(k)}</td><td>${n}</td></tr>`)
    .join('')}</table>
${result.first ? `<h2>First anomaly</h2><pre>${esc(JSON.stringify(result.first, null, 1))}</pre>` : ''}
<h2>Pairs (40 with the most anomalies, then the busiest)</h2>
<table><tr><th>pair</th><th>sent</th><th>read</th><th>confirmed</th><th>failed</th><th>anomalies</th></tr>${pairRows
    .map(
      ([k, p]) =>
        `<tr><td>${esc(k)}</td><td>${p.sent}</td><td>${p.delivered}</td><td>${p.confirmed}</td><td>${p.errors}</td><td>${p.anomalies}</td></tr>`,
    )
    .join('')}</table>
</body></html>
`;
  writeFileSync(html, page);
  return { json, html, svg };
}
