// One application process of the nemesis cluster (or, with cfg.worker, also a worker_thread of
// one): an embedded RdsStack of its own, or sockets attached to the node's rds-socketd. Every
// socket sends to random destinations of its group (mixed sizes, some with confirm, some with
// timeouts, RDS_CANCEL_SENT_TO on 'peer-down'), reads (slowly on "slow" ports), and appends what
// it did to a JSONL history, written synchronously so a SIGKILL loses at most the record of the
// call it interrupted. Records (t = Date.now(), one clock for every process of the host):
//   start {proc, epoch, pid}                  a process life begins
//   open {s, sock}                            socket incarnation s bound at sock ("addr:port")
//   close {s, why}                            it died (its host node went away, ENETDOWN)
//   end {s}                                   it was still open at the end of the run
//   send {s, d, q, h, n, m, c?, to?}          message q (per (s, d), from 1) to d; h: body hash;
//                                             m: 'msg' (sendmsg) | 'send' (send()) | 'probe'
//   ok {s, d, q} / err {s, d, q, code}        outcome of send() (or a sendmsg() that threw)
//   cancel {s, d}                             RDS_CANCEL_SENT_TO to d
//   recv {r, sock, from, s?, q?, h, n, p}     read by incarnation r (s, q absent for 0 B; p: the
//                                             path that carried it, RdsMessage.path)
//   flushed {s, ok, code?}                    after sending stopped: all acknowledged (or not)
//   stat {rss, lag, paths?}                   once a second (lag: longest event-loop delay, ms)
// stdin (or the parent thread's messages): probe | quiet (stop sending, flush) | drain | end.
import { createHash } from 'node:crypto';
import { openSync, writeSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { LoopTransport, RdsSocket, RdsStack, TcpTransport, constants } from '../dist/index.js';
import { rng } from './schedule.mjs';

const cfg = isMainThread ? JSON.parse(process.argv[2]) : workerData;
const hist = openSync(`${cfg.dir}/hist/${cfg.proc}.${cfg.epoch}.jsonl`, 'a');
const log = (rec) => writeSync(hist, `${JSON.stringify({ t: Date.now(), ...rec })}\n`);
const r = rng((cfg.seed * 7919 + cfg.epoch * 104729 + hashStr(cfg.proc)) >>> 0);
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
const BIG = Buffer.alloc(2 << 20);
for (let i = 0; i < BIG.length; i += 4) BIG.writeUInt32LE((r.next() * 2 ** 32) >>> 0, i);

function hashStr(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}
export const bodyHash = (b) => createHash('sha1').update(b).digest('hex').slice(0, 16);

/** Message size: mostly small, 0 B and 1 MiB included. */
function size() {
  const x = r.next();
  if (x < 0.02) return 0;
  if (x < 0.62) return r.int(32, 256);
  if (x < 0.87) return r.int(257, 8192);
  if (x < 0.97) return r.int(8193, 65536);
  if (x < 0.995) return r.int(65537, 512 << 10);
  return 1 << 20;
}
/** A body carrying (incarnation, seq) at its start: 'NM', length, incarnation, seq (u32 BE). */
function body(inc, q, n) {
  if (n === 0) return Buffer.alloc(0);
  const b = Buffer.allocUnsafe(n);
  BIG.copy(b, 0, (q * 7919) % (BIG.length - n), ((q * 7919) % (BIG.length - n)) + n);
  b[0] = 0x4e;
  b[1] = 0x4d;
  b[2] = inc.length;
  b.write(inc, 3, 'latin1');
  b.writeUInt32BE(q, 3 + inc.length);
  return b;
}
function parse(b) {
  if (b.length < 7 || b[0] !== 0x4e || b[1] !== 0x4d) return null;
  const L = b[2];
  if (b.length < 7 + L) return null;
  return { s: b.toString('latin1', 3, 3 + L), q: b.readUInt32BE(3 + L) };
}

let phase = 'run'; // run | probe | quiet
let drain = false;
let stack = null;
let opened = 0;
const socks = []; // { port, slow, cancelOnDown, s, sock, name, seq: Map, busy: Set, alive }
const dests = cfg.dests; // "addr:port" of every socket of the group
const destOf = (d) => {
  const [address, port] = d.split(':');
  return { address, port: Number(port) };
};

async function makeStack() {
  if (cfg.mode === 'attached') return RdsStack.attach(cfg.path);
  const tcp = { tcpPort: cfg.tcpPort, ...(cfg.tls ? { tls: cfg.tls } : {}) };
  const st = new RdsStack({
    heartbeatIntervalMs: 1000,
    transports: [new TcpTransport(tcp), new LoopTransport()],
    ...(cfg.rails ? { rails: cfg.rails } : {}),
  });
  logPathEvents(st);
  return st;
}

/**
 * An embedded node's paths in its history (`path` records: up, down with why, failover with where
 * to and how many moved), so an anomaly's excerpt shows what its sender's paths did (a host
 * node's are in its log, dN.log). Connect attempts that fail are not logged (one a second per
 * dead peer).
 */
function logPathEvents(st) {
  const at = (ev) => ({ ev: 'path', peer: ev.peerAddress, i: ev.path });
  const up = new Set(); // peer#i of the paths up: a drop of one that was not (a poke) is no news
  st.on('state', (ev) => {
    if (ev.to !== 'UP') return;
    up.add(`${ev.peerAddress}#${ev.path}`);
    log({ ...at(ev), what: 'up' });
  });
  st.on('drop', (ev) => {
    if (up.delete(`${ev.peerAddress}#${ev.path}`)) log({ ...at(ev), what: 'down', why: ev.reason });
  });
  st.on('failover', (ev) => log({ ...at(ev), what: 'failover', to: ev.to, moved: ev.moved }));
}

async function openSockets() {
  for (const S of socks) {
    const sock = new RdsSocket({ stack });
    await sock.bind({ address: cfg.addr, port: S.port });
    sock.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 4 << 20);
    if (!S.slow) sock.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 4 << 20);
    S.sock = sock;
    S.s = `${cfg.proc}.${cfg.epoch}.${++opened}`;
    S.seq = new Map();
    S.busy = new Set();
    S.alive = true;
    if (S.cancelOnDown) sock.on('peer-down', (ev) => cancelAll(S, ev.address));
    log({ ev: 'open', s: S.s, sock: S.name });
    void receiver(S);
  }
}

function cancel(S, d) {
  if (!S.alive) return;
  log({ ev: 'cancel', s: S.s, d });
  try {
    S.sock.setsockopt(constants.SOL_RDS, constants.RDS_CANCEL_SENT_TO, destOf(d));
  } catch (e) {
    lost(e);
  }
}
function cancelAll(S, address) {
  for (const d of dests) if (d.startsWith(`${address}:`)) cancel(S, d);
}

/** The node went away (ENETDOWN): every socket is dead; attach again once it is back. */
let reattaching = false;
function lost(e) {
  if (e?.code !== 'ENETDOWN' && e?.code !== 'EBADF') return false;
  if (cfg.mode !== 'attached') return e?.code === 'EBADF';
  for (const x of socks) {
    if (x.alive) log({ ev: 'close', s: x.s, why: e.code });
    x.alive = false;
  }
  if (!reattaching) {
    reattaching = true;
    void (async () => {
      const old = stack;
      old?.close().catch(() => {});
      for (;;) {
        await sleep(300);
        try {
          stack = await makeStack();
          await openSockets();
          break;
        } catch {
          // not back yet
        }
      }
      reattaching = false;
    })();
  }
  return true;
}

function logRecv(S, m) {
  if (m.address === '') return;
  const from = `${m.address}:${m.port}`;
  const p = parse(m.data);
  const rec = { ev: 'recv', r: S.s, sock: S.name, from, h: bodyHash(m.data), n: m.data.length, p: m.path };
  if (p) Object.assign(rec, p);
  log(rec);
}

async function receiver(S) {
  const { sock, s } = S;
  for (;;) {
    let m;
    try {
      m = await sock.recv();
    } catch (e) {
      if (S.s === s) lost(e);
      return;
    }
    logRecv(S, m);
    if (S.slow && !drain) await sleep(r.int(20, 120));
  }
}

/** One message from S to d; resolves when its outcome is known (send()) or at once (sendmsg). */
async function sendOne(S, d, kind) {
  const q = (S.seq.get(d) ?? 0) + 1;
  S.seq.set(d, q);
  const x = r.next();
  const n = kind === 'probe' ? 64 : size();
  const m = kind === 'probe' ? 'probe' : n === 0 || x < 0.65 ? 'msg' : 'send';
  const c = m === 'probe' || (m === 'send' && x < 0.9);
  const to =
    m === 'probe'
      ? 2000
      : m === 'send' && x < 0.85
        ? r.int(1000, 6000)
        : m === 'send' && !c
          ? r.int(1000, 6000)
          : undefined;
  const b = body(S.s, q, n);
  const { s, sock, busy } = S; // this incarnation's, even if the node is lost meanwhile
  log({ ev: 'send', s, d, q, h: bodyHash(b), n, m, ...(c ? { c: 1 } : {}), ...(to ? { to } : {}) });
  if (m === 'msg') {
    try {
      sock.sendmsg(b, destOf(d));
    } catch (e) {
      log({ ev: 'err', s, d, q, code: e.code });
      lost(e);
    }
    return true;
  }
  busy.add(d);
  try {
    await sock.send(b, destOf(d), { confirm: c, ...(to ? { timeout: to } : {}) });
    log({ ev: 'ok', s, d, q });
    return true;
  } catch (e) {
    log({ ev: 'err', s, d, q, code: e.code });
    lost(e);
    return false;
  } finally {
    busy.delete(d);
  }
}

async function sender(S) {
  while (phase !== 'quiet') {
    await sleep(r.int(40, 200));
    if (!S.alive || phase === 'quiet') continue;
    const free = dests.filter((d) => d !== S.name && !S.busy.has(d));
    if (free.length === 0) continue;
    if (r.next() < 0.003) cancel(S, r.pick(free));
    else void sendOne(S, r.pick(free), 'msg');
  }
}

/** Liveness: one confirmed message to every destination, retried until it is confirmed. */
async function prober(S) {
  const todo = new Set(dests.filter((d) => d !== S.name));
  while (phase === 'probe' && todo.size > 0) {
    for (const d of todo) {
      if (!S.alive || S.busy.has(d) || phase !== 'probe') continue;
      void sendOne(S, d, 'probe').then((ok) => ok && todo.delete(d));
    }
    await sleep(300);
  }
}

let worker = null;
async function command(cmd) {
  worker?.postMessage(cmd);
  if (cmd === 'probe') {
    // Liveness is about the network, not about a backlog a slow reader built: read fast from now.
    drain = true;
    phase = 'probe';
    for (const S of socks) void prober(S);
  } else if (cmd === 'quiet') {
    phase = 'quiet';
    // Every socket's messages acknowledged (or given up) before the end, so what is not read by
    // then was not merely still on its way; a socket that cannot flush says so.
    await Promise.all(
      socks.map(async (S) => {
        if (!S.alive) return;
        const { s, sock } = S;
        try {
          await sock.flush({ timeout: 30000 });
          log({ ev: 'flushed', s, ok: true });
        } catch (e) {
          log({ ev: 'flushed', s, ok: false, code: e.code });
        }
      }),
    );
    if (isMainThread) console.log(JSON.stringify({ ev: 'flushed', proc: cfg.proc }));
  } else if (cmd === 'drain') {
    drain = true;
  } else if (cmd === 'end') {
    // For a stuck pair's post-mortem: what this node believes of each destination's port
    // (congested in the peer's map as we hold it) and the state of every path (not checked).
    if (isMainThread && cfg.mode === 'embedded' && stack) {
      const congested = dests.filter((d) => {
        const { address, port } = destOf(d);
        return address !== cfg.addr && stack.congMap(address).test(port);
      });
      const conns = stack.connections().map((c) => ({
        peer: c.peerAddress,
        paths: c.paths
          .filter((p) => p.state !== 'DOWN' || p.sendQueue + p.retransQueue > 0)
          .map((p) => [p.index, p.state, p.sendQueue, p.retransQueue, p.held, p.failedOverTo]),
      }));
      const k = stack.counters.snapshot();
      // Congestion, and what says a peer's numbering started over or a frame was dropped as old.
      const counters = Object.fromEntries(
        Object.entries(k).filter(
          ([n, v]) => v > 0 && /cong|peer_restarted|recv_drop_old_seq|accept_lane_misplaced/.test(n),
        ),
      );
      log({ ev: 'diag', congested, conns, counters });
    }
    for (const S of socks) {
      if (!S.alive) continue;
      // What is already here is read (and recorded) before the socket is declared open to the end.
      for (let m = S.sock.recvmsg(); m !== null; m = S.sock.recvmsg()) logRecv(S, m);
      log({ ev: 'end', s: S.s });
    }
    const w = worker ? new Promise((res) => worker.once('exit', res)) : null;
    await w;
    if (isMainThread) process.exit(0);
    process.exit(0);
  }
}

log({ ev: 'start', proc: cfg.proc, epoch: cfg.epoch, pid: process.pid, thread: !isMainThread });
cfg.ports.forEach((port, k) => {
  socks.push({ port, name: `${cfg.addr}:${port}`, slow: cfg.slow.includes(port), cancelOnDown: k === 1, alive: false });
});
for (;;) {
  try {
    stack = await makeStack();
    await openSockets();
    break;
  } catch (e) {
    if (cfg.mode !== 'attached') throw e;
    await sleep(300); // the host node is not (yet) there
  }
}
for (const S of socks) void sender(S);
if (cfg.worker) {
  worker = new Worker(new URL(import.meta.url), {
    workerData: { ...cfg.worker, dir: cfg.dir, seed: cfg.seed, epoch: cfg.epoch },
  });
  worker.on('error', (e) => console.error(`worker: ${e.stack}`));
}
if (isMainThread) {
  // The longest event-loop delay of each second: a timer that fires late because the machine did
  // not run this process is not the library's lateness (the checker allows for it).
  const lag = monitorEventLoopDelay({ resolution: 20 });
  lag.enable();
  // Counters a post-mortem of a loss or a duplicate asks for, as what changed in each second
  // (an embedded node's counters are otherwise gone with its life).
  const watched =
    /peer_restarted|recv_drop_(old_seq|moved_dup|no_sock|dead_sock)|accept_lane|accept_moved|tcp_connect_raced|withdrawn|conn_reset/;
  let before = {};
  setInterval(() => {
    const paths = cfg.mode === 'embedded' ? stack.peers().map((p) => [p.address, p.pathsUp]) : undefined;
    let ctr;
    if (cfg.mode === 'embedded') {
      const now = stack.counters.snapshot();
      for (const [n, v] of Object.entries(now))
        if (watched.test(n) && v !== (before[n] ?? 0)) (ctr ??= {})[n] = v - (before[n] ?? 0);
      before = now;
    }
    log({
      ev: 'stat',
      rss: process.memoryUsage.rss(),
      lag: Math.round(lag.max / 1e6),
      ...(paths ? { paths } : {}),
      ...(ctr ? { ctr } : {}),
    });
    lag.reset();
  }, 1000);
  createInterface({ input: process.stdin }).on('line', (l) => void command(l.trim()));
  process.stdin.on('end', () => process.exit(3)); // the orchestrator is gone: leave no process behind
  console.log(JSON.stringify({ ev: 'ready', proc: cfg.proc }));
} else {
  parentPort.on('message', (cmd) => void command(cmd));
  setInterval(() => {}, 1 << 30);
}
