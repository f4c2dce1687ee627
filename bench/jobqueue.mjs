#!/usr/bin/env node
// node bench/jobqueue.mjs [--runs N --seconds S --warmup-ms MS --in-flight N --json FILE]   (a section of npm run bench)
// A job queue as a new user writes it: a dispatcher (the cluster primary) keeps 256 jobs of 1 KiB
// in flight to 4 `cluster` workers, each worker answers every job with a 64 B reply, and the
// dispatcher counts a job done when its reply is back. Three contenders in the same run, run by
// run in turn:
//   rds          the dispatcher on its own embedded node (127.151.0.1), the workers attached to one
//                host node (rds-socketd, 127.151.0.2), jobs by sendmsg() round-robin
//   rds-confirm  the same, each job sent with send({ confirm: true }); a job is done when its reply
//                is back and its confirmation (the worker read it) resolved
//   zmq          zeromq.js: the dispatcher's DEALER bound on TCP, each worker a ROUTER connected to it
//                (DEALER deals jobs round-robin, ROUTER replies to the dispatcher); no confirmation
// Prints jobs/s per contender (median, min-max) and CPU per job of all processes (from /proc).
import cluster from 'node:cluster';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jsonLines } from './json-lines.mjs';

const DAEMON = fileURLToPath(new URL('../dist/cli/rds-socketd.js', import.meta.url));
const DISPATCHER = '127.151.0.1';
const WORKERS_ADDR = '127.151.0.2';
const WORKERS = 4;
/** Jobs the dispatcher keeps in flight: the issue's pattern (npm run bench); --in-flight for a sweep. */
const IN_FLIGHT = 256;
const JOB = 1024;
const REPLY = 64;
const arg = (n, d) => {
  const i = process.argv.indexOf(n);
  return i >= 0 ? Number(process.argv[i + 1]) : d;
};
const cpuOf = (pid) => {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
};

if (cluster.isWorker) await worker(JSON.parse(process.env.JOBQ));
else if (process.argv[2] === 'dispatch') await dispatch(JSON.parse(process.argv[3]));
else await main();

/** A cluster worker: answers each job with a reply carrying the job's number. */
async function worker(cfg) {
  const reply = Buffer.alloc(REPLY, 1);
  if (cfg.kind === 'zmq') {
    const { Router } = await import('zeromq');
    const r = new Router();
    r.connect(`tcp://${DISPATCHER}:${cfg.zmqPort}`);
    process.send({ ready: true });
    for await (const [id, job] of r) {
      job.copy(reply, 0, 0, 4);
      await r.send([id, reply]);
    }
    return;
  }
  const { RdsSocket, RdsStack } = await import('../dist/index.js');
  const s = new RdsSocket({ stack: await RdsStack.attach(cfg.node) });
  await s.bind({ address: WORKERS_ADDR, port: 5000 + cluster.worker.id });
  s.setsockopt(1, 7, 4 << 20);
  s.setsockopt(1, 8, 4 << 20);
  process.send({ ready: true, port: 5000 + cluster.worker.id });
  for await (const m of s) {
    m.data.copy(reply, 0, 0, 4);
    s.sendmsg(reply, { address: m.address, port: m.port });
  }
}

/** The cluster primary: forks the workers, then deals jobs and counts replies for warm-up + window. */
async function dispatch(cfg) {
  const window = cfg.inFlight;
  const out = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
  cluster.setupPrimary({ exec: fileURLToPath(import.meta.url), args: [], silent: false });
  const ports = [];
  const ready = [];
  for (let i = 0; i < WORKERS; i++) {
    const w = cluster.fork({ JOBQ: JSON.stringify(cfg) });
    ready.push(new Promise((res) => w.once('message', (m) => res(ports.push(m.port)))));
  }
  const job = Buffer.alloc(JOB, 7);
  let counted = 0;
  let t0 = 0;
  const warmUntil = () => performance.now() + cfg.warmupMs;
  let warmEnd = Infinity;
  const finish = () => {
    const secs = (performance.now() - t0) / 1000;
    out({ jobs: counted, secs, pids: Object.values(cluster.workers).map((w) => w.process.pid) });
    process.exit(0);
  };
  const tick = () => {
    const now = performance.now();
    if (now < warmEnd) return;
    if (t0 === 0) {
      t0 = now;
      out({ cpuStart: Object.values(cluster.workers).map((w) => w.process.pid) });
      setTimeout(finish, cfg.ms);
    }
    counted++;
  };
  if (cfg.kind === 'zmq') {
    const { Dealer } = await import('zeromq');
    const d = new Dealer({ sendHighWaterMark: 100000 });
    await d.bind(`tcp://${DISPATCHER}:${cfg.zmqPort}`);
    await Promise.all(ready);
    // ZeroMQ deals round-robin among connected peers only: wait for all four connections.
    await new Promise((r) => setTimeout(r, 300));
    warmEnd = warmUntil();
    let inflight = 0;
    let wake = null;
    (async () => {
      for await (const _ of d) {
        inflight--;
        tick();
        wake?.();
      }
    })();
    for (let n = 0; ; n++) {
      while (inflight >= window) await new Promise((r) => (wake = r));
      job.writeUInt32LE(n, 0);
      inflight++;
      await d.send(job);
    }
  }
  const { RdsSocket, RdsStack } = await import('../dist/index.js');
  const s = new RdsSocket({ stack: new RdsStack({ tcpPort: cfg.tcpPort }) });
  await s.bind({ address: DISPATCHER, port: 4000 });
  s.setsockopt(1, 7, 8 << 20);
  s.setsockopt(1, 8, 8 << 20);
  await Promise.all(ready);
  warmEnd = warmUntil();
  // A job is done when its reply is back and (with confirm) its confirmation resolved.
  const pending = new Uint8Array(1 << 20);
  const need = cfg.confirm ? 2 : 1;
  let inflight = 0;
  let n = 0;
  const part = (id) => {
    if (++pending[id & 0xfffff] < need) return;
    pending[id & 0xfffff] = 0;
    inflight--;
    tick();
    pump();
  };
  const failed = (e) => {
    console.error(`job confirmation failed: ${e.code ?? e.message}`);
    process.exit(1);
  };
  const pump = () => {
    while (inflight < window) {
      const id = n++;
      const dest = { address: WORKERS_ADDR, port: ports[id % WORKERS] };
      job.writeUInt32LE(id, 0);
      inflight++;
      if (cfg.confirm) s.send(job, dest, { confirm: true }).then(() => part(id), failed);
      else s.sendmsg(job, dest);
    }
  };
  s.on('readable', () => {
    for (let m = s.recvmsg(); m !== null; m = s.recvmsg()) part(m.data.readUInt32LE(0));
  });
  pump();
}

function proc(args) {
  const p = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const next = jsonLines(p.stdout, args.join(' '), 120000);
  return { p, next };
}

async function once(kind, ms, warmupMs, n, inFlight) {
  const cfg = { kind: kind === 'zmq' ? 'zmq' : 'rds', confirm: kind === 'rds-confirm', ms, warmupMs, inFlight };
  cfg.tcpPort = 26900 + (n % 50);
  cfg.zmqPort = 26950 + (n % 50);
  let dir = null;
  let daemon = null;
  if (cfg.kind === 'rds') {
    dir = mkdtempSync(join(tmpdir(), 'rds-bench-jobq-'));
    cfg.node = join(dir, 'node.sock');
    daemon = proc([DAEMON, '--path', cfg.node, '--tcp-port', String(cfg.tcpPort), '--quiet']);
    const { RdsStack } = await import('../dist/index.js');
    for (let i = 0; i < 400; i++) {
      try {
        await (await RdsStack.attach(cfg.node)).close();
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 25));
      }
    }
  }
  const d = proc([fileURLToPath(import.meta.url), 'dispatch', JSON.stringify(cfg)]);
  const { cpuStart } = await d.next((l) => l.cpuStart);
  const pids = [d.p.pid, ...cpuStart, ...(daemon ? [daemon.p.pid] : [])];
  const cpu0 = pids.map(cpuOf);
  const r = await d.next((l) => 'jobs' in l);
  const cpu = pids.map((p, i) => cpuOf(p) - cpu0[i]);
  d.p.kill('SIGKILL');
  for (const p of cpuStart) process.kill(p, 'SIGKILL');
  daemon?.p.kill('SIGKILL');
  if (dir) rmSync(dir, { recursive: true, force: true });
  // Per role as well (which process is the ceiling): the dispatcher, the workers together, the
  // host node.
  const us = (c) => (c * 1e6) / r.jobs;
  const workers = cpu.slice(1, 1 + cpuStart.length).reduce((a, c) => a + c, 0);
  return {
    jobsPerSec: r.jobs / r.secs,
    cpuUsPerJob: us(cpu.reduce((a, c) => a + c, 0)),
    dispatcherUs: us(cpu[0]),
    workersUs: us(workers),
    nodeUs: daemon ? us(cpu[cpu.length - 1]) : NaN,
    dispatcherCore: cpu[0] / r.secs,
  };
}

async function main() {
  const runs = arg('--runs', 3);
  const ms = arg('--seconds', 2) * 1000;
  // The steady state, as for the attached rows (bench/attached.mjs WARMUP_MS): counted from
  // dispatcher start, rds-socket's rate climbed for about 3 s (to 4 s with confirm; six processes
  // compiling on two cores) and zeromq.js's was flat after 0.5 s. After a 1 s warm-up the 2 s
  // window took in that climb (docs/performance.md, session 34).
  const warmupMs = arg('--warmup-ms', 4000);
  const inFlight = arg('--in-flight', IN_FLIGHT);
  const kinds = ['rds', 'rds-confirm', 'zmq'];
  let zmqOk = true;
  try {
    await import('zeromq');
  } catch (e) {
    zmqOk = false;
    console.log(`zeromq.js baseline unavailable: ${e.message}`);
  }
  const res = Object.fromEntries(kinds.map((k) => [k, []]));
  let n = 0;
  for (let r = 0; r < runs; r++)
    for (let i = 0; i < kinds.length; i++) {
      const k = kinds[(i + r) % kinds.length];
      if (k === 'zmq' && !zmqOk) continue;
      res[k].push(await once(k, ms, warmupMs, n++, inFlight));
    }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const fig = (k, f) => (res[k].length ? median(res[k].map((x) => x[f])) : NaN);
  console.log(
    `job queue: dispatcher + ${WORKERS} cluster workers, ${inFlight} jobs in flight, ${JOB} B job, ${REPLY} B reply; ${runs} run(s), medians`,
  );
  for (const k of kinds) {
    const xs = res[k].map((x) => x.jobsPerSec);
    console.log(
      `  ${k.padEnd(12)} ${
        xs.length
          ? `${fig(k, 'jobsPerSec').toFixed(0)} jobs/s (${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)}), ${fig(k, 'cpuUsPerJob').toFixed(1)} us CPU per job, all processes: dispatcher ${fig(k, 'dispatcherUs').toFixed(1)} (${(100 * fig(k, 'dispatcherCore')).toFixed(0)}% of a core), ${WORKERS} workers ${fig(k, 'workersUs').toFixed(1)}${k === 'zmq' ? '' : `, host node ${fig(k, 'nodeUs').toFixed(1)}`}`
          : 'baseline unavailable'
      }`,
    );
  }
  const rows = Object.fromEntries(
    kinds.map((k) => [k, { jobsPerSec: fig(k, 'jobsPerSec'), cpuUsPerJob: fig(k, 'cpuUsPerJob') }]),
  );
  const ji = process.argv.indexOf('--json');
  if (ji >= 0) writeFileSync(process.argv[ji + 1], JSON.stringify({ runs, inFlight, rows, zmqAvailable: zmqOk }));
  process.exit(0);
}
