#!/usr/bin/env node
// npm run nemesis -- [--nodes 5] [--seconds 150] [--seed N] [--out DIR] [--prefix nm]
//                    [--no-tls] [--no-rails] [--break-retransmit] [--liveness-ms 10000]
//                    [--kinds reset,loss,...] [--schedule-only] [--ci-json FILE]
//                    [--kernel 6.1|6.12|7] [--kernel-order high|low|middle]
// --kernel adds one more node: a Linux kernel under qemu (kernel-node.mjs) on the cluster's bridge,
// with an application using the kernel's own RDS sockets, and the fault kind kernel-reload;
// --kernel-order puts its address above every other node's (high, the default), below (low), or
// between them (middle: some nodes connect to it, it connects to the others).
// --ci-json writes the outcome as one test in the JSON form .ci/run sums up (vitest's).
// Builds a cluster of network namespaces (net.mjs), starts its processes (cluster.mjs), runs
// a seeded random fault schedule (schedule.mjs, faults.mjs) while every application records what
// it did (app.mjs), heals everything, asks every socket to reach every other (liveness), lets the
// traffic drain, stops, checks the histories (check.mjs) and writes report.json and report.html
// (report.mjs). Exit status: 0 no anomaly, 1 anomalies, 2 the run itself failed.
import { mkdirSync, openSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { tlsMaterial } from '../bench/attacks/tls-material.mjs';
import { check, printCheck } from './check.mjs';
import { Cluster, topology } from './cluster.mjs';
import { Nemesis } from './faults.mjs';
import { KernelNode } from './kernel-node.mjs';
import { Net, netUnavailable } from './net.mjs';
import { writeReport } from './report.mjs';
import { schedule } from './schedule.mjs';

const { values: a } = parseArgs({
  options: {
    nodes: { type: 'string', default: '5' },
    seconds: { type: 'string', default: '150' },
    seed: { type: 'string' },
    out: { type: 'string' },
    prefix: { type: 'string', default: 'nm' },
    'no-tls': { type: 'boolean' },
    'no-rails': { type: 'boolean' },
    'break-retransmit': { type: 'boolean' },
    'liveness-ms': { type: 'string', default: '10000' },
    'schedule-only': { type: 'boolean' },
    kinds: { type: 'string' },
    'ci-json': { type: 'string' },
    kernel: { type: 'string' },
    'kernel-order': { type: 'string', default: 'high' },
  },
});
const nodes = Number(a.nodes);
const seconds = Number(a.seconds);
const seed = a.seed !== undefined ? Number(a.seed) : Math.floor(Math.random() * 2 ** 31);
if (!(nodes >= 3 && nodes <= 16) || !(seconds >= 20) || !Number.isInteger(seed)) {
  console.error('nemesis: --nodes takes 3 to 16, --seconds at least 20, --seed an integer');
  process.exit(2);
}
const PROBE_MS = 12000;
const DRAIN_MS = 3000;
// The kernel peer is one node more, the last index (its address: --kernel-order, net.mjs).
const kernelAt = a.kernel ? nodes : null;
const net = new Net(a.prefix, nodes + (a.kernel ? 1 : 0), { kernel: kernelAt, kernelOrder: a['kernel-order'] });
const topo = topology(net, { tls: !a['no-tls'], rails: !a['no-rails'], kernel: kernelAt });
net.rails = topo.rails;
const sched = schedule({ seed, seconds, topo, only: a.kinds ? a.kinds.split(',') : null });
if (a['schedule-only']) {
  console.log(JSON.stringify(sched, null, 1));
  process.exit(0);
}
const why = netUnavailable();
if (why) {
  console.error(`nemesis: ${why}`);
  process.exit(2);
}
const dir = a.out ?? join(tmpdir(), `rds-nemesis-${seed}-${process.pid}`);
mkdirSync(join(dir, 'hist'), { recursive: true });
console.log(
  `nemesis: seed ${seed}, ${nodes} nodes, ${seconds} s of faults (${sched.faults.length}), histories in ${dir}`,
);

const env = { ...process.env, RDS_SOCKET_NODE: 'none' };
if (a['break-retransmit']) env.RDS_SOCKET_TEST_BREAK_RETRANSMIT = '1';
const kernelNode = a.kernel ? new KernelNode(net, kernelAt, a.kernel) : null;
const cluster = new Cluster(net, topo, dir, { seed, env, kernelNode });
let tls = null;
let cleaned = false;
async function cleanup() {
  if (cleaned) return;
  cleaned = true;
  await cluster.stopAll().catch(() => {});
  if (kernelNode) {
    kernelNode.collect(dir);
    await kernelNode.stop();
  }
  net.cleanup();
  tls?.remove();
}
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    console.error(`nemesis: ${sig}, cleaning up`);
    void cleanup().then(() => process.exit(130));
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const phases = {};
const nemesis = new Nemesis(net, cluster, dir);
try {
  net.up();
  if (kernelNode) console.log(`nemesis: kernel peer ${net.addr(kernelAt)} booted: Linux ${await kernelNode.boot()}`);
  if (topo.tlsNodes) {
    tls = tlsMaterial(['node']);
    const b = tls.buffers('node');
    cluster.setTls({ key: b.key.toString(), cert: b.cert.toString(), ca: b.ca.toString() });
  }
  await cluster.startAll();
  // Samples: RSS of every process each second, host nodes' paths every 2 s.
  const rssFd = openSync(join(dir, 'samples.jsonl'), 'a');
  let sampling = true;
  const sampler = (async () => {
    for (let k = 0; sampling; k++) {
      const t = Date.now();
      for (const x of cluster.rss()) writeSync(rssFd, `${JSON.stringify({ t, ev: 'rss', ...x })}\n`);
      if (k % 2 === 0)
        for (const x of await cluster.hostPaths()) writeSync(rssFd, `${JSON.stringify({ t, ev: 'paths', ...x })}\n`);
      await sleep(1000);
    }
  })();
  phases.start = Date.now();
  await sleep(3000); // traffic first, then faults
  phases.faults = Date.now();
  await nemesis.run(sched.faults.map((f) => ({ ...f, at: f.at - 3000 })));
  // Belt and braces: every rule gone, every link up, every process running.
  await net.healAll();
  for (let i = 0; i < net.n; i++) await net.link(i, true);
  for (const c of cluster.children.values()) c.signal('SIGCONT');
  phases.healed = Date.now();
  cluster.tell('probe');
  await sleep(PROBE_MS);
  phases.quiet = Date.now();
  cluster.tell('quiet');
  cluster.tell('drain');
  // Each process flushes its sockets (at most 30 s); then the read reports have DRAIN_MS.
  const flushed = cluster.apps().map((c) => c.saying('"ev":"flushed"'));
  await Promise.race([Promise.all(flushed), sleep(40000)]);
  phases.flushed = Date.now();
  await sleep(DRAIN_MS);
  phases.end = Date.now();
  cluster.tell('end');
  await Promise.race([Promise.all(cluster.apps().map((c) => c.exited)), sleep(15000)]);
  sampling = false;
  await sampler;
} catch (e) {
  console.error(`nemesis: the run failed: ${e.stack ?? e}`);
  nemesis.stop();
  await cleanup();
  if (a['ci-json']) ciJson(2, [`the run failed: ${e.message}`]);
  process.exit(2);
}
await cleanup();
const meta = {
  seed,
  nodes,
  seconds,
  livenessMs: Number(a['liveness-ms']),
  phases,
  topo,
  schedule: sched,
  errors: nemesis.errors,
  breakRetransmit: !!a['break-retransmit'],
  kernelOrder: a.kernel ? net.kernelOrder : undefined,
};
writeFileSync(join(dir, 'meta.json'), JSON.stringify(meta, null, 1));
if (nemesis.errors.length) console.error(`nemesis: faults that could not be made:\n  ${nemesis.errors.join('\n  ')}`);
const result = check(dir);
const lines = [];
printCheck(result, (l) => {
  lines.push(l);
  console.log(l);
});
const { json, html } = writeReport(dir, result);
console.log(`nemesis: report ${html} (${json})`);
const status = result.anomalyCount > 0 ? 1 : nemesis.errors.length ? 2 : 0;
if (a['ci-json']) ciJson(status, [...lines, ...nemesis.errors]);
// Once stdout has taken everything (a pipe is written asynchronously).
process.stdout.write('', () => process.exit(status));

/** One test named for the run, failed with the checker's lines when the run failed. */
function ciJson(st, msgs) {
  const ok = st === 0;
  const name = `nemesis --nodes ${nodes} --seconds ${seconds} --seed ${seed}`;
  writeFileSync(
    a['ci-json'],
    JSON.stringify({
      numPassedTests: ok ? 1 : 0,
      numFailedTests: ok ? 0 : 1,
      numPendingTests: 0,
      testResults: [
        {
          assertionResults: [
            { status: ok ? 'passed' : 'failed', fullName: name, failureMessages: ok ? [] : [msgs.join('\n')] },
          ],
        },
      ],
    }),
  );
}
