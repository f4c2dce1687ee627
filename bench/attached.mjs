#!/usr/bin/env node
// npm run bench:attached [-- --seconds S --runs N --pings N --warmup-ms MS --only 1k,64k,rtt,fan,bigbuf,floor --json FILE] [NODE_PROF=DIR: every process's CPU profile, see bench/profile-summary.mjs]
// (also a section of npm run bench)
// Attached sockets (issue 21) against in-process ones, in the same run: sender and receiver each
// in its own process; "attached": each attached to its own host node (rds-socketd) on
// 127.150.200.1 / .2; "in-process": each process its own embedded node on those addresses.
// 1 KiB and 64 KiB one-way throughput, 64 B round trip p50/p99; prints ratios and one
// met / not met line per target of the issue. Also measured in the same run, as floors for what
// any host node in another process can reach on this machine: a bare Unix-socket round trip
// between two Node processes (an attached round trip adds four such hops), and a bare byte relay
// (sender -> relay -unix/TCP/unix-> relay -> receiver, no RDS work at all) against the same bytes
// over one direct TCP connection.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RdsSocket, RdsStack } from '../dist/index.js';

const SELF = fileURLToPath(import.meta.url);
const DAEMON = fileURLToPath(new URL('../dist/cli/rds-socketd.js', import.meta.url));
const TCP_PORT = 26777;
const A = '127.150.200.1';
const B = '127.150.200.2';
// The floors' plain sockets (see floorRole).
const FLOOR_TCP_PORT = 26778;
const FA = '127.150.201.1';
const FB = '127.150.201.2';
const arg = (n, d) => {
  const i = process.argv.indexOf(n);
  return i >= 0 ? Number(process.argv[i + 1]) : d;
};

/**
 * Every run's warm-up before anything is counted: the steady state a long-running service sees.
 * An attached path has four processes to compile (and on two cores they compile in turn): a 1 KiB
 * job queue took about 3 s to reach its steady rate, a round trip's p99 about 3 s to settle
 * (1.5 s: 1.35-1.48 ms; 3 s or more: 0.38-0.47 ms; in-process 0.15 ms after either), while an
 * in-process pair settles within a second (docs/performance.md, session 34).
 */
const WARMUP_MS = 4000;

/** The cores this process may run on (taskset narrows it): what a CPU-bound row can use at most. */
const NCORES = availableParallelism();

const role = process.argv[2];
if (role === 'sender' || role === 'receiver') await peer(role, JSON.parse(process.argv[3]));
else if (role?.startsWith('floor-')) floorRole(role, JSON.parse(process.argv[3]));
else await main();

async function open(cfg, address, port) {
  const stack = cfg.node ? await RdsStack.attach(cfg.node) : new RdsStack({ tcpPort: TCP_PORT });
  const s = new RdsSocket({ stack });
  await s.bind({ address, port });
  s.setsockopt(1, 7, (cfg.bufMiB ?? 8) << 20);
  s.setsockopt(1, 8, (cfg.bufMiB ?? 8) << 20);
  return s;
}

async function peer(r, cfg) {
  const out = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
  // Profiled (NODE_PROF), the run stops its processes with SIGTERM: exit so V8 writes the profile.
  process.once('SIGTERM', () => process.exit(0));
  const idx = cfg.idx ?? 0;
  const s = await open(cfg, r === 'sender' ? A : B, (r === 'sender' ? 4000 : 5000) + idx);
  const to = { address: r === 'sender' ? B : A, port: (r === 'sender' ? 5000 : 4000) + idx };
  if (cfg.test === 'rtt') {
    if (r === 'receiver') {
      out({ ready: true });
      for await (const m of s) s.sendmsg(m.data, { address: m.address, port: m.port });
    } else {
      const d = Buffer.alloc(64);
      const lat = [];
      // Warm up for a time, not a count: until every process on the path has compiled its hot
      // code (about 0.7 s here), 1% of round trips take 1 to 5 ms, so a short warm-up measures
      // the JIT, not the steady state a long-running service sees.
      const warm = performance.now() + cfg.warmupMs;
      for (let i = 0; i < 500 || performance.now() < warm; i++) {
        await s.send(d, to);
        await s.recv();
      }
      for (let i = 0; i < cfg.pings; i++) {
        const t = process.hrtime.bigint();
        await s.send(d, to);
        await s.recv();
        lat.push(Number(process.hrtime.bigint() - t) / 1000);
      }
      lat.sort((x, y) => x - y);
      out({ p50: lat[Math.floor(lat.length / 2)], p99: lat[Math.floor(lat.length * 0.99)] });
      process.exit(0);
    }
    return;
  }
  if (r === 'receiver') {
    let bytes = 0;
    let t0 = 0;
    // Counted from the end of the warm-up (see WARMUP_MS; the clock is read every 256 messages
    // or 1 MiB, not per message), which the receiver announces so the run takes CPU figures from
    // there.
    let warmEnd = 0;
    let warming = (cfg.warmupMs ?? 0) > 0;
    let n = 0;
    let seen = 0;
    out({ ready: true });
    for await (const m of s) {
      if (m.data.length === 1 && m.data[0] === 0xff) {
        // A warm-up that outlasted the stream measured nothing: say so (0), rather than hang.
        if (warming) out({ warm: true, cpuUs: cpuUsNow() });
        // Its own CPU too: a receiver exits at once, before a parent could read /proc for it.
        out({
          mibPerSec: bytes / (1 << 20) / ((performance.now() - t0) / 1000),
          mib: bytes / (1 << 20),
          cpuUs: cpuUsNow(),
        });
        process.exit(0);
      }
      if (warming) {
        seen += m.data.length;
        if (warmEnd === 0) warmEnd = performance.now() + cfg.warmupMs;
        else if (++n >= 256 || seen >= 1 << 20) {
          n = 0;
          seen = 0;
          if (performance.now() >= warmEnd) {
            warming = false;
            t0 = performance.now();
            out({ warm: true, cpuUs: cpuUsNow() });
          }
        }
      } else if (t0 === 0) t0 = performance.now();
      else bytes += m.data.length;
    }
    return;
  }
  const d = Buffer.alloc(cfg.size, 7);
  out({ started: true });
  const end = performance.now() + (cfg.warmupMs ?? 0) + cfg.ms;
  while (performance.now() < end) {
    for (let k = 0; k < 64; k++) await s.send(d, to);
  }
  await s.send(Buffer.from([0xff]), to);
  await s.flush();
  out({ done: true });
  await new Promise((r) => setTimeout(r, 100000));
}

function run(args) {
  const p = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = [];
  let wake = null;
  let buf = '';
  p.stdout.setEncoding('utf8');
  p.stdout.on('data', (d) => {
    buf += d;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const l = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      try {
        lines.push(JSON.parse(l));
      } catch {
        lines.push({ text: l });
      }
      wake?.();
    }
  });
  const next = async (pred) => {
    const deadline = Date.now() + 120000;
    for (;;) {
      const l = lines.find(pred);
      if (l) return l;
      if (Date.now() > deadline) throw new Error(`${args.join(' ')}: no answer`);
      await new Promise((r) => {
        wake = r;
        setTimeout(r, 200);
      });
    }
  };
  return { p, next, kill: () => p.kill('SIGKILL') };
}

async function once(mode, test, size, ms, bufMiB = 8) {
  const procs = [];
  let dir = null;
  const cfgA = { test, size, ms, bufMiB, pings: arg('--pings', 5000), warmupMs: arg('--warmup-ms', WARMUP_MS) };
  const cfgB = { ...cfgA };
  if (mode === 'attached') {
    dir = mkdtempSync(join(tmpdir(), 'rds-bench-attached-'));
    for (const [cfg, addr] of [
      [cfgA, 'a'],
      [cfgB, 'b'],
    ]) {
      cfg.node = join(dir, `${addr}.sock`);
      const d = run([
        ...profArgs(mode, size, addr === 'a' ? 'sending-node' : 'receiving-node'),
        DAEMON,
        '--path',
        cfg.node,
        '--tcp-port',
        String(TCP_PORT),
        '--quiet',
      ]);
      procs.push(d);
    }
    for (let i = 0; i < 200; i++) {
      try {
        await (await RdsStack.attach(cfgA.node)).close();
        await (await RdsStack.attach(cfgB.node)).close();
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 25));
      }
    }
  }
  const rx = run([...profArgs(mode, size, 'receiver'), SELF, 'receiver', JSON.stringify(cfgB)]);
  procs.push(rx);
  await rx.next((l) => l.ready);
  const tx = run([...profArgs(mode, size, 'sender'), SELF, 'sender', JSON.stringify(cfgA)]);
  procs.push(tx);
  // CPU from the moment the sender starts sending (process start-up left out).
  let cpu0 = procs.map(() => 0);
  if (test !== 'rtt') {
    await tx.next((l) => l.started);
    if (cfgA.warmupMs > 0) await rx.next((l) => l.warm);
    cpu0 = procs.map((p) => cpuOf(p.p.pid));
  }
  const r =
    test === 'rtt' ? await tx.next((l) => l.p50 !== undefined) : await rx.next((l) => l.mibPerSec !== undefined);
  // CPU seconds per GiB moved, all processes of the run together (host nodes included): on this
  // 2-core machine a mode that needs more CPU per byte cannot keep up, whatever it waits for.
  // Each process's own share (host nodes first when attached), to see which one the time goes to.
  if (r.mib !== undefined) {
    const each = procs.map((p, i) => ((cpuOf(p.p.pid) - cpu0[i]) / r.mib) * 1024);
    r.cpuPerGiBEach = each.map((c) => Number(c.toFixed(2)));
    r.cpuPerGiB = each.reduce((a, c) => a + c, 0);
  }
  if (process.env.NODE_PROF) {
    // A profiled process must stop on SIGTERM to write its profile, and is waited for (before the
    // next run, or exit). The applications first: a host node going first would fail their
    // sockets' calls in progress (ENETDOWN) before their own SIGTERM arrived.
    const stop = (ps) =>
      Promise.all(
        ps.map(({ p }) => {
          if (p.exitCode !== null) return null;
          p.kill('SIGTERM');
          return new Promise((res) => p.once('exit', res));
        }),
      );
    await stop([rx, tx]);
    await stop(procs.filter((p) => p !== rx && p !== tx));
  } else for (const p of procs) p.kill();
  if (dir !== null) rmSync(dir, { recursive: true, force: true });
  return r;
}

/**
 * NODE_PROF=DIR: every process of a throughput or round-trip run (host nodes and applications)
 * writes a V8 CPU profile into DIR/<mode>-<size>-<role>/ when the run stops it;
 * bench/profile-summary.mjs DIR sums them up per process.
 */
function profArgs(mode, size, role) {
  if (!process.env.NODE_PROF) return [];
  return ['--cpu-prof', '--cpu-prof-dir', join(process.env.NODE_PROF, `${mode}-${size}-${role}`)];
}

/** This process's CPU so far, user and system, in microseconds. */
function cpuUsNow() {
  const u = process.cpuUsage();
  return u.user + u.system;
}

/** CPU seconds a process has used (utime + stime from /proc). */
function cpuOf(pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}

/** 8 sender processes on A to 8 receiver processes on B, attached to a host node each. */
async function fanout(ms) {
  const warmupMs = arg('--warmup-ms', WARMUP_MS);
  const dir = mkdtempSync(join(tmpdir(), 'rds-bench-fanout-'));
  const nodes = ['a', 'b'].map((n) => join(dir, `${n}.sock`));
  const daemons = nodes.map((path) => run([DAEMON, '--path', path, '--tcp-port', String(TCP_PORT), '--quiet']));
  for (let i = 0; i < 200; i++) {
    try {
      await (await RdsStack.attach(nodes[0])).close();
      await (await RdsStack.attach(nodes[1])).close();
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 25));
    }
  }
  const procs = [...daemons];
  const rxs = [];
  for (let i = 0; i < 8; i++) {
    const rx = run([
      SELF,
      'receiver',
      JSON.stringify({ test: 'tput', size: 1024, ms, warmupMs, idx: i, node: nodes[1] }),
    ]);
    procs.push(rx);
    rxs.push(rx);
  }
  for (const rx of rxs) await rx.next((l) => l.ready);
  const cpu0 = daemons.map((d) => cpuOf(d.p.pid));
  const t0 = performance.now();
  for (let i = 0; i < 8; i++)
    procs.push(
      run([SELF, 'sender', JSON.stringify({ test: 'tput', size: 1024, ms, warmupMs, idx: i, node: nodes[0] })]),
    );
  // Every process's CPU over the counted part (from the last receiver's end of warm-up to the
  // last result): how many of the machine's cores the 18 processes keep busy, and their CPU per
  // message, to set beside the one attached pair's.
  const warm = warmupMs > 0 ? await Promise.all(rxs.map((rx) => rx.next((l) => l.warm))) : null;
  const others = procs.filter((p) => !rxs.includes(p));
  const allCpu0 = others.map((p) => cpuOf(p.p.pid));
  const tw = performance.now();
  const rates = await Promise.all(rxs.map((rx) => rx.next((l) => l.mibPerSec !== undefined)));
  const secs = (performance.now() - t0) / 1000;
  const cpu = daemons.map((d, i) => (cpuOf(d.p.pid) - cpu0[i]) / secs);
  const wSecs = (performance.now() - tw) / 1000;
  // A receiver's share over its own counted seconds (the receivers warm up at different moments).
  const rxCores =
    warm === null ? NaN : rates.reduce((a, r, i) => a + (r.cpuUs - warm[i].cpuUs) / 1e6 / (r.mib / r.mibPerSec), 0);
  const othersCores = others.map((p, i) => (cpuOf(p.p.pid) - allCpu0[i]) / wSecs);
  const coresBusy = othersCores.reduce((a, c) => a + c, 0) + rxCores;
  let tcp = NaN;
  try {
    const out = execFileSync('ss', ['-tn', 'state', 'established'], { encoding: 'utf8' });
    tcp =
      out.split('\n').filter((l) => l.includes(`${A}:`) && l.includes(`${B}:`) && l.includes(`:${TCP_PORT}`)).length /
      2;
  } catch {
    /* no ss */
  }
  for (const p of procs) p.kill();
  rmSync(dir, { recursive: true, force: true });
  const mibPerSec = rates.reduce((a, r) => a + r.mibPerSec, 0);
  // Per role, us of CPU per message: the two host nodes, the 8 senders together, the 8 receivers.
  const perMsg = (cores) => (cores * 1e6) / (mibPerSec * 1024);
  const cpuEach = {
    nodes: othersCores.slice(0, 2).map(perMsg),
    senders: perMsg(othersCores.slice(2).reduce((a, c) => a + c, 0)),
    receivers: perMsg(rxCores),
  };
  return { mibPerSec, cpu, tcp, coresBusy, cpuUsPerMsg: perMsg(coresBusy), cpuEach };
}

// Floors: plain Node sockets, no RDS. Roles run in processes of their own, like the real thing.

function floorRole(r, cfg) {
  const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
  if (r === 'floor-echo') {
    // Echoes every chunk back: the far end of a bare Unix round trip.
    const c = net.connect(cfg.path, () => c.setNoDelay?.(true));
    c.on('data', (d) => c.write(d));
    return;
  }
  if (r === 'floor-sink') {
    // Counts bytes until the sender ends (over TCP when direct, else over the second relay's Unix
    // socket), and its own CPU seconds meanwhile.
    let n = 0;
    let t0 = 0;
    let c0;
    const on = (c) => {
      c.on('data', (d) => {
        if (t0 === 0) {
          t0 = performance.now();
          c0 = process.cpuUsage();
        } else n += d.length;
      });
      c.on('end', () => {
        const u = process.cpuUsage(c0);
        say({
          mibPerSec: n / (1 << 20) / ((performance.now() - t0) / 1000),
          mib: n / (1 << 20),
          cpu: (u.user + u.system) / 1e6,
        });
        process.exit(0);
      });
    };
    const srv = net.createServer(on);
    if (cfg.direct) srv.listen(FLOOR_TCP_PORT, FB, () => say({ ready: true }));
    else srv.listen(cfg.u2, () => say({ ready: true }));
    return;
  }
  if (r === 'floor-relay-b') {
    net.createServer((t) => t.pipe(net.connect(cfg.u2))).listen(FLOOR_TCP_PORT, FB, () => say({ ready: true }));
    return;
  }
  if (r === 'floor-relay-a') {
    net
      .createServer((u) => {
        const t = net.connect({ port: FLOOR_TCP_PORT, host: FB, localAddress: FA });
        t.setNoDelay(true);
        u.pipe(t);
      })
      .listen(cfg.u1, () => say({ ready: true }));
    return;
  }
  if (r === 'floor-app-reader') {
    // The receiving application's floor at 1 KiB: frames (u32 length, payload) read from a Unix
    // socket, one Buffer view per message handed through an async iterator, as an attached
    // receiver's loop takes them; only a frame split across reads is copied. A 0-length frame ends.
    const q = [];
    let wake = null;
    // A 1-byte frame marks the end of the writer's warm-up: counting starts there.
    const deliver = (m) => q.push(m.length === 0 ? null : m.length === 1 ? 'mark' : m);
    net
      .createServer((c) => {
        let part = null;
        c.on('data', (d) => {
          let o = 0;
          if (part !== null) {
            if (part.length < 4) {
              const t = Math.min(4 - part.length, d.length);
              part = Buffer.concat([part, d.subarray(0, t)]);
              o = t;
              if (part.length < 4) return;
            }
            const need = 4 + part.readUInt32BE(0) - part.length;
            const t = Math.min(need, d.length - o);
            part = Buffer.concat([part, d.subarray(o, o + t)]);
            o += t;
            if (t < need) return;
            deliver(part.subarray(4));
            part = null;
          }
          while (d.length - o >= 4) {
            const len = d.readUInt32BE(o);
            if (d.length - o - 4 < len) break;
            deliver(d.subarray(o + 4, o + 4 + len));
            o += 4 + len;
          }
          if (o < d.length) part = d.subarray(o);
          wake?.();
        });
      })
      .listen(cfg.u1, () => say({ ready: true }));
    const messages = async function* () {
      for (;;) {
        while (q.length > 0) yield q.shift();
        await new Promise((r) => (wake = r));
        wake = null;
      }
    };
    (async () => {
      let n = 0;
      let c0 = null;
      let sum = 0;
      for await (const m of messages()) {
        if (m === null) break;
        if (m === 'mark') c0 = process.cpuUsage();
        else if (c0 !== null) {
          sum += m[0];
          n++;
        }
      }
      const u = process.cpuUsage(c0);
      say({ readerUs: (u.user + u.system) / n, n, sum });
    })();
    return;
  }
  if (r === 'floor-app-writer') {
    // The sending application's floor at 1 KiB: each message framed and copied into a batch, one
    // Unix write per 256 messages (an attached sender's frames leave in one write per turn).
    const c = net.connect(cfg.u1, () => {
      const payload = Buffer.alloc(1024, 7);
      // Warmed up first (the code is compiled within a fraction of this), then counted.
      const warmEnd = performance.now() + cfg.warmMs;
      const end = warmEnd + cfg.ms;
      let c0 = null;
      let n = 0;
      const go = () => {
        // At least one batch is counted, even when a wait for drain outlasted the window.
        while (c0 === null || performance.now() < end) {
          if (c0 === null && performance.now() >= warmEnd) {
            c.write(Buffer.from([0, 0, 0, 1, 0]));
            c0 = process.cpuUsage();
            n = 0;
          }
          const batch = Buffer.allocUnsafe(256 * 1028);
          for (let k = 0, o = 0; k < 256; k++, o += 1028, n++) {
            batch.writeUInt32BE(1024, o);
            payload.copy(batch, o + 4);
          }
          if (!c.write(batch)) return void c.once('drain', go);
        }
        const u = process.cpuUsage(c0);
        say({ writerUs: (u.user + u.system) / n, n });
        c.end(Buffer.alloc(4));
      };
      go();
    });
    return;
  }
  if (r === 'floor-src') {
    const c = cfg.direct ? net.connect({ port: FLOOR_TCP_PORT, host: FB, localAddress: FA }) : net.connect(cfg.u1);
    c.on('connect', () => {
      const b = Buffer.alloc(cfg.size, 7);
      const end = performance.now() + cfg.ms;
      const c0 = process.cpuUsage();
      const go = () => {
        while (performance.now() < end) if (!c.write(b)) return void c.once('drain', go);
        const u = process.cpuUsage(c0);
        say({ cpu: (u.user + u.system) / 1e6 });
        c.end();
      };
      go();
    });
  }
}

/** p50 of a bare Unix-socket round trip (64 B) between this process and a child. */
async function floorUnixRtt() {
  const dir = mkdtempSync(join(tmpdir(), 'rds-bench-floor-'));
  const path = join(dir, 'rt.sock');
  const p50 = await new Promise((resolve) => {
    const srv = net.createServer((c) => {
      const lat = [];
      const b = Buffer.alloc(64);
      let t = 0;
      let n = 0;
      c.on('data', () => {
        if (n >= 500) lat.push(Number(process.hrtime.bigint() - t) / 1000);
        if (++n < 5500) {
          t = process.hrtime.bigint();
          c.write(b);
          return;
        }
        lat.sort((x, y) => x - y);
        c.destroy();
        srv.close();
        resolve(lat[lat.length >> 1]);
      });
      t = process.hrtime.bigint();
      c.write(b);
    });
    srv.listen(path, () => {
      const echo = run([SELF, 'floor-echo', JSON.stringify({ path })]);
      srv.once('close', () => echo.kill());
    });
  });
  rmSync(dir, { recursive: true, force: true });
  return p50;
}

/**
 * 64 KiB writes, direct TCP or through two relays (Unix, TCP, Unix) doing no RDS work: MiB/s, and
 * the CPU seconds per GiB of all the processes (the source and sink from their own accounting
 * while the bytes moved, the relays from /proc over the same span).
 */
async function floorRelay(direct, ms) {
  const dir = mkdtempSync(join(tmpdir(), 'rds-bench-floor-'));
  const cfg = { direct, ms, size: 65536, u1: join(dir, 'u1.sock'), u2: join(dir, 'u2.sock') };
  const c = JSON.stringify(cfg);
  const sink = run([SELF, 'floor-sink', c]);
  const procs = [sink];
  await sink.next((l) => l.ready);
  if (!direct) {
    for (const r of ['floor-relay-b', 'floor-relay-a']) {
      const p = run([SELF, r, c]);
      procs.push(p);
      await p.next((l) => l.ready);
    }
  }
  const relays = procs.slice(1);
  const cpu0 = relays.map((p) => cpuOf(p.p.pid));
  const src = run([SELF, 'floor-src', c]);
  procs.push(src);
  const r = await sink.next((l) => l.mibPerSec !== undefined);
  const relayCpu = relays.reduce((a, p, i) => a + cpuOf(p.p.pid) - cpu0[i], 0);
  const srcCpu = (await src.next((l) => l.cpu !== undefined)).cpu;
  for (const p of procs) p.kill();
  rmSync(dir, { recursive: true, force: true });
  return { mibPerSec: r.mibPerSec, cpuPerGiB: ((r.cpu + srcCpu + relayCpu) / r.mib) * 1024 };
}

/**
 * The two attached applications' floor at 1 KiB, no RDS: CPU per message of a process writing
 * framed 1 KiB messages to a Unix socket in batches and of one reading them into a message per
 * Buffer through an async iterator (floor-app-writer / floor-app-reader).
 */
async function floorApps(ms) {
  const dir = mkdtempSync(join(tmpdir(), 'rds-bench-floor-'));
  const c = JSON.stringify({ ms, warmMs: Math.min(1000, ms), u1: join(dir, 'app.sock') });
  const reader = run([SELF, 'floor-app-reader', c]);
  await reader.next((l) => l.ready);
  const writer = run([SELF, 'floor-app-writer', c]);
  const w = await writer.next((l) => l.writerUs !== undefined);
  const r = await reader.next((l) => l.readerUs !== undefined);
  reader.kill();
  writer.kill();
  rmSync(dir, { recursive: true, force: true });
  return { writerUs: w.writerUs, readerUs: r.readerUs, messages: r.n };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function main() {
  const runs = arg('--runs', 3);
  const ms = arg('--seconds', 2) * 1000;
  const res = {};
  // --only picks rows (a quicker look while working on one of them); the targets need them all.
  const oi = process.argv.indexOf('--only');
  const only = oi >= 0 ? process.argv[oi + 1].split(',') : null;
  if (only !== null) {
    for (const [name, test, size, key] of [
      ['1 KiB', 'tput', 1024, '1k'],
      ['64 KiB', 'tput', 65536, '64k'],
      ['rtt', 'rtt', 64, 'rtt'],
    ]) {
      if (!only.includes(key)) continue;
      for (let i = 0; i < runs; i++)
        for (const mode of ['in-process', 'attached'])
          console.log(`${name} ${mode}: ${JSON.stringify(await once(mode, test, size, ms))}`);
    }
    if (only.includes('fan')) for (let i = 0; i < runs; i++) console.log(`8->8: ${JSON.stringify(await fanout(ms))}`);
    if (only.includes('bigbuf'))
      for (let i = 0; i < runs; i++)
        for (const mib of [8, 32])
          console.log(
            `1 KiB attached, SO_SNDBUF ${mib} MiB: ${JSON.stringify(await once('attached', 'tput', 1024, ms, mib))}`,
          );
    if (only.includes('floor'))
      for (let i = 0; i < runs; i++)
        console.log(
          `floors: ${JSON.stringify({ unixRttP50: await floorUnixRtt(), direct: await floorRelay(true, ms), relay: await floorRelay(false, ms), apps: await floorApps(ms) })} (MiB/s, CPU s per GiB; apps: us per 1 KiB message)`,
        );
    process.exit(0);
  }
  for (const [name, test, size] of [
    ['1 KiB', 'tput', 1024],
    ['64 KiB', 'tput', 65536],
    ['rtt', 'rtt', 64],
  ]) {
    for (const mode of ['in-process', 'attached']) res[`${name} ${mode}`] = [];
    for (let i = 0; i < runs; i++) {
      for (const mode of ['in-process', 'attached']) res[`${name} ${mode}`].push(await once(mode, test, size, ms));
    }
  }
  // A bigger send buffer must cost nothing per message (the node's send backlog once shifted an
  // array of up to SO_SNDBUF of messages per message handed on: 0.4x with 32 MiB).
  res['1 KiB attached 32 MiB'] = [];
  for (let i = 0; i < runs; i++) res['1 KiB attached 32 MiB'].push(await once('attached', 'tput', 1024, ms, 32));
  const fan = [];
  for (let i = 0; i < runs; i++) fan.push(await fanout(ms));
  const floors = [];
  for (let i = 0; i < runs; i++)
    floors.push({
      rtt: await floorUnixRtt(),
      direct: await floorRelay(true, ms),
      relay: await floorRelay(false, ms),
      apps: await floorApps(ms),
    });
  const tput = (k) => median(res[k].map((r) => r.mibPerSec));
  const lat = (k, q) => median(res[k].map((r) => r[q]));
  console.log(`attached vs in-process, ${runs} run(s) each, medians`);
  const rows = [
    ['1 KiB throughput MiB/s', tput('1 KiB in-process'), tput('1 KiB attached')],
    ['64 KiB throughput MiB/s', tput('64 KiB in-process'), tput('64 KiB attached')],
    ['round trip p50 us', lat('rtt in-process', 'p50'), lat('rtt attached', 'p50')],
    ['round trip p99 us', lat('rtt in-process', 'p99'), lat('rtt attached', 'p99')],
  ];
  console.log(`${'metric'.padEnd(28)}${'in-process'.padEnd(14)}${'attached'.padEnd(14)}attached/in-process`);
  for (const [m, a, b] of rows)
    console.log(`${m.padEnd(28)}${a.toFixed(1).padEnd(14)}${b.toFixed(1).padEnd(14)}${(b / a).toFixed(2)}x`);
  // CPU per message, from each process's own accounting (/proc utime + stime), all processes of a
  // run together and each one: in-process [receiver, sender], attached [sender's node, receiver's
  // node, receiver, sender]. A figure that does not depend on how many cores the machine has.
  const usPerMsg = (cpuPerGiB, size) => (cpuPerGiB * size * 1e6) / 2 ** 30;
  const cpuMsg = (k, size) => usPerMsg(median(res[k].map((r) => r.cpuPerGiB)), size);
  const cpuEach = (k, size) =>
    res[k][0].cpuPerGiBEach.map((_, i) => usPerMsg(median(res[k].map((r) => r.cpuPerGiBEach[i])), size));
  const cpuRows = {};
  for (const [n, size] of [
    ['1 KiB', 1024],
    ['64 KiB', 65536],
  ]) {
    const ip = cpuMsg(`${n} in-process`, size);
    const at = cpuMsg(`${n} attached`, size);
    const ipEach = cpuEach(`${n} in-process`, size);
    const atEach = cpuEach(`${n} attached`, size);
    cpuRows[n] = { inProcess: ip, attached: at, inProcessEach: ipEach, attachedEach: atEach };
    console.log(
      `${`${n} CPU us per message`.padEnd(28)}${ip.toFixed(2).padEnd(14)}${at.toFixed(2).padEnd(14)}${(at / ip).toFixed(2)}x  (all processes of a run)`,
    );
    console.log(
      `${''.padEnd(4)}per process: in-process receiver ${ipEach[0].toFixed(2)}, sender ${ipEach[1].toFixed(2)}; attached sender's node ${atEach[0].toFixed(2)}, receiver's node ${atEach[1].toFixed(2)}, receiver ${atEach[2].toFixed(2)}, sender ${atEach[3].toFixed(2)} us`,
    );
  }
  const fRtt = median(floors.map((f) => f.rtt));
  // The bare two-hop floor: an attached round trip crosses two Unix round trips (each process to
  // its node and back) that no host node in another process can avoid; measured in this run.
  const twoHop = 2 * fRtt;
  const targets = [
    [
      '1 KiB CPU per message attached (4 processes) <= 1.5x in-process',
      cpuRows['1 KiB'].attached / cpuRows['1 KiB'].inProcess,
      '<= 1.5x',
      cpuRows['1 KiB'].attached <= 1.5 * cpuRows['1 KiB'].inProcess,
    ],
    [
      '64 KiB CPU per message attached (4 processes) <= 1.5x in-process',
      cpuRows['64 KiB'].attached / cpuRows['64 KiB'].inProcess,
      '<= 1.5x',
      cpuRows['64 KiB'].attached <= 1.5 * cpuRows['64 KiB'].inProcess,
    ],
    [
      '1 KiB throughput attached >= 0.7x in-process',
      rows[0][2] / rows[0][1],
      '>= 0.7x',
      rows[0][2] >= 0.7 * rows[0][1],
    ],
    [
      '64 KiB throughput attached >= 0.6x in-process',
      rows[1][2] / rows[1][1],
      '>= 0.6x',
      rows[1][2] >= 0.6 * rows[1][1],
    ],
    [
      `round trip p50 attached <= in-process + 1.2 x two-hop floor (${(rows[2][1] + 1.2 * twoHop).toFixed(0)} us)`,
      rows[2][2],
      `<= ${(rows[2][1] + 1.2 * twoHop).toFixed(0)} us`,
      rows[2][2] <= rows[2][1] + 1.2 * twoHop,
    ],
    ['round trip p99 attached <= 3x in-process', rows[3][2] / rows[3][1], '<= 3x', rows[3][2] <= 3 * rows[3][1]],
  ];
  const fanMib = median(fan.map((f) => f.mibPerSec));
  const onePair = rows[0][1];
  const f0 = fan[fan.length - 1];
  const fanCores = median(fan.map((f) => f.coresBusy));
  const fanCpu = median(fan.map((f) => f.cpuUsPerMsg));
  console.log(
    `\n8 processes on ${A} -> 8 on ${B}, 1 KiB, through their host nodes: ${fanMib.toFixed(1)} MiB/s total, ${(fanMib / onePair).toFixed(2)}x one in-process pair; host nodes' CPU ${f0.cpu.map((c) => `${(c * 100).toFixed(0)}%`).join(' / ')} of a core; TCP connections between the hosts (ss -tn): ${f0.tcp}\n` +
      `  all 18 processes: ${fanCores.toFixed(2)} of ${NCORES} cores busy, ${fanCpu.toFixed(2)} us of CPU per message (one attached pair: ${cpuRows['1 KiB'].attached.toFixed(2)} us); per message: sending node ${median(fan.map((f) => f.cpuEach.nodes[0])).toFixed(2)}, receiving node ${median(fan.map((f) => f.cpuEach.nodes[1])).toFixed(2)}, the 8 receivers ${median(fan.map((f) => f.cpuEach.receivers)).toFixed(2)}, the 8 senders ${median(fan.map((f) => f.cpuEach.senders)).toFixed(2)} us`,
  );
  targets.push([
    '8+8 processes total >= 0.6x one in-process pair',
    fanMib / onePair,
    '>= 0.6x',
    fanMib >= 0.6 * onePair,
  ]);
  // Lanes open on demand between rds-socket nodes (issue 23): 8 ports that hash to 6 lanes open
  // 6. The point is one set of paths per pair of hosts, not one per pair of processes (8 x 8 x 8).
  targets.push(['8+8 processes: at most npaths (8) TCP connections', f0.tcp, '<= 8', f0.tcp >= 1 && f0.tcp <= 8]);
  const big = tput('1 KiB attached 32 MiB');
  console.log(
    `\n1 KiB attached with SO_SNDBUF 32 MiB: ${big.toFixed(1)} MiB/s, ${(big / rows[0][2]).toFixed(2)}x the same with 8 MiB`,
  );
  targets.push([
    '1 KiB attached, SO_SNDBUF 32 MiB >= 0.8x 8 MiB',
    big / rows[0][2],
    '>= 0.8x',
    big >= 0.8 * rows[0][2],
  ]);
  const fDirect = median(floors.map((f) => f.direct.mibPerSec));
  const fRelay = median(floors.map((f) => f.relay.mibPerSec));
  // CPU per 64 KiB message of the floors: what moving the bytes through two more processes costs
  // with no RDS work at all, against in-process RDS (which does all of its work).
  const fDirectCpu = (median(floors.map((f) => f.direct.cpuPerGiB)) * 65536 * 1e6) / 2 ** 30;
  const fRelayCpu = (median(floors.map((f) => f.relay.cpuPerGiB)) * 65536 * 1e6) / 2 ** 30;
  const ip64 = cpuRows['64 KiB'].inProcess;
  // At 1 KiB: an attached path whose host nodes cost what the in-process pair does and whose
  // applications cost the bare floor (framing, a Unix socket, a Buffer per message) would spend
  // the in-process CPU plus these two.
  const fAppW = median(floors.map((f) => f.apps.writerUs));
  const fAppR = median(floors.map((f) => f.apps.readerUs));
  const ip1 = cpuRows['1 KiB'].inProcess;
  console.log(
    `\nfloors on this machine, no RDS at all (medians):\n` +
      `  bare Unix round trip between two Node processes: p50 ${fRtt.toFixed(1)} us; an attached round trip adds two such round trips (the two-hop floor): ${twoHop.toFixed(0)} us\n` +
      `  64 KiB writes, one direct TCP connection: ${fDirect.toFixed(0)} MiB/s; through two relay processes (Unix, TCP, Unix): ${fRelay.toFixed(0)} MiB/s = ${(fRelay / rows[1][1]).toFixed(2)}x in-process RDS (target for attached RDS: 0.6x)\n` +
      `  CPU per 64 KiB write, all processes: direct ${fDirectCpu.toFixed(2)} us (2 processes), through the relays ${fRelayCpu.toFixed(2)} us (4) = ${(fRelayCpu / ip64).toFixed(2)}x in-process RDS's ${ip64.toFixed(2)} us (target for attached RDS: 1.5x); the relays' bytes alone cost ${(fRelayCpu - fDirectCpu).toFixed(2)} us = ${((fRelayCpu - fDirectCpu) / ip64).toFixed(2)}x in-process RDS\n` +
      `  1 KiB messages between two processes over a Unix socket (framed, batched writes, a Buffer per message through an async iterator): writer ${fAppW.toFixed(2)} us, reader ${fAppR.toFixed(2)} us per message; in-process RDS's ${ip1.toFixed(2)} us plus these = ${((ip1 + fAppW + fAppR) / ip1).toFixed(2)}x in-process RDS (target for attached RDS: 1.5x)`,
  );
  // Throughput is CPU per message against the cores there are: a row that keeps every core busy
  // can go no faster without costing less per message. Each throughput row's cores busy (its CPU
  // over its counted seconds), and what the attached path could move with every core busy at its
  // own CPU per message and at the floors' (in-process RDS plus the applications' floor at 1 KiB;
  // the bare relay at 64 KiB), against in-process RDS's measured throughput.
  const coresOf = (k) => median(res[k].map((r) => (r.cpuPerGiB * r.mibPerSec) / 1024));
  const ceiling = (usPerMsg, size) => (NCORES * 1e6 * size) / usPerMsg / 2 ** 20;
  const ceil = [
    ['1 KiB', 1024, rows[0][1], ip1 + fAppW + fAppR, "in-process RDS + the applications' floor"],
    ['64 KiB', 65536, rows[1][1], fRelayCpu, 'the bare relay'],
  ].map(([n, size, ipMib, floorUs, floorName]) => {
    const at = cpuRows[n].attached;
    return {
      n,
      ipCores: coresOf(`${n} in-process`),
      atCores: coresOf(`${n} attached`),
      atCeil: ceiling(at, size) / ipMib,
      floorCeil: ceiling(floorUs, size) / ipMib,
      floorName,
    };
  });
  console.log(
    `\nthroughput against the ${NCORES} cores this run may use (a row with every core busy is bound by its CPU per message):\n` +
      ceil
        .map(
          (c) =>
            `  ${c.n}: in-process ${c.ipCores.toFixed(2)} cores busy, attached ${c.atCores.toFixed(2)}; with all ${NCORES} busy the attached path could move at most ${c.atCeil.toFixed(2)}x in-process at its own CPU per message, ${c.floorCeil.toFixed(2)}x at ${c.floorName}'s`,
        )
        .join('\n'),
  );
  console.log('\ntargets');
  for (const [n, f, t, met] of targets)
    console.log(`${n.padEnd(72)}${f.toFixed(2).padEnd(10)}target ${t.padEnd(10)}${met ? 'met' : 'not met'}`);
  // --json FILE: the same for npm run bench, which runs this as one of its sections.
  const ji = process.argv.indexOf('--json');
  if (ji >= 0)
    writeFileSync(
      process.argv[ji + 1],
      JSON.stringify({
        runs,
        rows: rows.map(([metric, inProcess, attached]) => ({ metric, inProcess, attached })),
        fanout: {
          mibPerSec: fanMib,
          hostNodeCpu: f0.cpu,
          tcpConnections: f0.tcp,
          coresBusy: fanCores,
          cpuUsPerMsg: fanCpu,
        },
        cores: NCORES,
        throughputCeilings: ceil,
        cpuPerMessageUs: cpuRows,
        floors: {
          unixRttP50us: fRtt,
          twoHopUs: twoHop,
          directMiBps: fDirect,
          relayMiBps: fRelay,
          directCpuUsPer64KiB: fDirectCpu,
          relayCpuUsPer64KiB: fRelayCpu,
          appWriterUsPer1KiB: fAppW,
          appReaderUsPer1KiB: fAppR,
        },
        targets: targets.map(([name, figure, target, met]) => ({ name, figure, target, met })),
      }),
    );
  process.exit(0);
}
