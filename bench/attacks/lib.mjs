// Shared helpers for the attack modules (bench/attacks/*.mjs, run by bench/attack.mjs): a victim
// node in a child process, a good peer in another child process doing round trips to it, peak
// RSS of the victim, and raw RDS/TCP frames for attackers. Run as a script, this file is the
// victim (--victim) or the good peer (--good).
import { fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { RdsSocket, RdsStack, constants, wire } from '../../dist/index.js';

/** RDS/TCP port of every attack's nodes: away from the kernel's 16385 and the tests' 26385. */
export const ATTACK_TCP_PORT = 27110;
/** The victim's sockets: ECHO_PORT answers the good peer, SINK_PORT is never read. */
export const ECHO_PORT = 4000;
export const SINK_PORT = 4001;

const SELF = fileURLToPath(import.meta.url);

/** One header (and payload) as bytes on the wire. */
export function frame(h, payload = Buffer.alloc(0)) {
  const b = Buffer.alloc(48 + payload.length);
  wire.encodeHeader(b, 0, { ...h, len: h.len ?? payload.length });
  payload.copy(b, 48);
  return b;
}

/** rds-socket's hello claiming acknowledgements: the victim then keeps what it sends until acked. */
export function helloClaimingAcks() {
  const caps = constants.RDSSOCK_CAP_ACK | (1 << constants.RDSSOCK_CAP_PATHS_SHIFT);
  return frame({
    sequence: 0,
    flags: 4,
    sport: 1,
    dport: 0,
    exthdr: wire.packExtensions([wire.rdsCapsExtension(caps)]),
  });
}

/** A plain TCP connection from `from` to the victim's RDS port (from < victim: a carrier, not a poke). */
export function rawConnect(from, to) {
  return new Promise((resolve, reject) => {
    const s = connect({ host: to, port: ATTACK_TCP_PORT, localAddress: from });
    s.once('connect', () => {
      s.removeListener('error', reject);
      s.on('error', () => {});
      resolve(s);
    });
    s.once('error', reject);
  });
}

/** Writes make(i) for i = 0, 1, ... while `go()` holds, waiting for 'drain' when the socket says so. */
export async function pour(s, go, make) {
  let i = 0;
  while (go() && !s.destroyed) {
    if (!s.write(make(i++))) {
      await new Promise((res) => {
        const t = setInterval(() => {
          if (!go() || s.destroyed) done();
        }, 50);
        const done = () => {
          clearInterval(t);
          s.removeListener('drain', done);
          res();
        };
        s.once('drain', done);
      });
    }
  }
  return i;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function rssOf(pid) {
  try {
    const st = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kib = (k) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(st)?.[1] ?? 0);
    return { rss: kib('VmRSS') / 1024, hwm: kib('VmHWM') / 1024 };
  } catch {
    return null;
  }
}

function child(args, execArgv = []) {
  const c = fork(SELF, args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv });
  const waiting = new Map();
  c.on('message', (m) => {
    const w = waiting.get(m.type);
    if (w) {
      waiting.delete(m.type);
      w(m);
    }
  });
  const exited = new Promise((res) => c.once('exit', res));
  return {
    proc: c,
    exited,
    /** Sends { type } and resolves with the reply of type `reply` (null if the child is gone). */
    ask(type, reply, extra = {}, ms = 10000) {
      return new Promise((res) => {
        if (c.exitCode !== null || c.signalCode !== null || !c.connected) return res(null);
        const t = setTimeout(() => {
          waiting.delete(reply);
          res(null);
        }, ms);
        waiting.set(reply, (m) => {
          clearTimeout(t);
          res(m);
        });
        exited.then(() => {
          clearTimeout(t);
          res(null);
        });
        c.send({ type, ...extra });
      });
    },
    async kill() {
      if (c.exitCode === null && c.signalCode === null) {
        c.kill('SIGKILL');
        await exited;
      }
    },
  };
}

/**
 * The victim: an RdsStack (default options unless `options`) on `address`, echoing on ECHO_PORT
 * and never reading SINK_PORT. `alive()` asks it over IPC; `stats()` returns its counters.
 */
export async function startVictim(address, options = {}, { echoSndbuf = 0 } = {}) {
  // --expose-gc: memory({ gc: true }) measures what is held, not what awaits collection.
  const c = child(['--victim', JSON.stringify({ address, options, echoSndbuf })], ['--expose-gc']);
  const ready = await c.ask('hello', 'ready', {}, 15000);
  if (ready === null) throw new Error('victim did not start');
  let peak = 0;
  const sampler = setInterval(() => {
    const r = rssOf(c.proc.pid);
    if (r !== null) peak = Math.max(peak, r.rss, r.hwm);
  }, 20);
  return {
    pid: c.proc.pid,
    address,
    /** Peak resident memory so far (VmHWM, and VmRSS sampled every 20 ms), MiB. */
    peakRssMiB() {
      const r = rssOf(c.proc.pid);
      if (r !== null) peak = Math.max(peak, r.rss, r.hwm);
      return peak;
    },
    async alive() {
      return (await c.ask('ping', 'pong', {}, 5000)) !== null;
    },
    async stats() {
      return (await c.ask('stats', 'stats', {}, 5000))?.counters ?? null;
    },
    /**
     * process.memoryUsage() of the victim; with `gc`, after two full collections (what is held,
     * not what awaits collection), plus the TCP transport's partialFrameBytes and when the
     * collections ran (gcAt, performance.timeOrigin-based, and gcMs).
     */
    async memory({ gc = false } = {}) {
      if (!gc) return (await c.ask('stats', 'stats', {}, 5000))?.memory ?? null;
      const m = await c.ask('memory', 'memory', {}, 5000);
      return m === null ? null : { ...m.memory, partialFrameBytes: m.partialFrameBytes, gcMs: m.gcMs, gcAt: m.gcAt };
    },
    async stop() {
      clearInterval(sampler);
      await c.kill();
    },
  };
}

/**
 * A good peer on `address` doing round trips (64-byte message, echoed) to the victim one after
 * another until stopped; stop() returns { count, timeouts, p50Ms, p99Ms }. A round trip that
 * takes more than 2 s counts as a timeout and as 2000 ms. With `bigEvery`, every bigEvery-th
 * round trip carries `bigBytes` instead (a large frame in progress at the victim), counted apart.
 */
export async function startGoodPeer(address, victimAddress, { bigBytes = 0, bigEvery = 0 } = {}) {
  const c = child(['--good', JSON.stringify({ address, victim: victimAddress, bigBytes, bigEvery })]);
  const ready = await c.ask('hello', 'ready', {}, 15000);
  if (ready === null) throw new Error('good peer did not start');
  return {
    /**
     * The round trips since the previous lap (or the start): { count, timeouts, p50Ms, p99Ms },
     * and with `bigEvery`, the large ones apart: { bigCount, bigTimeouts, bigMaxMs }.
     */
    async lap() {
      return (await c.ask('lap', 'lap', {}, 10000)) ?? { count: 0, timeouts: 0, p50Ms: Infinity, p99Ms: Infinity };
    },
    async stop() {
      const r = await c.ask('stop', 'result', {}, 10000);
      await c.kill();
      return r ?? { count: 0, timeouts: 0, p50Ms: Infinity, p99Ms: Infinity };
    },
  };
}

/**
 * One attack, start to end: victim and good peer up, a few round trips to warm up, then
 * `attack({ victim, seconds })` (which resolves when it is over) while the good peer measures.
 * Returns what attack.mjs prints and checks, with `detail` from the attack.
 */
export async function runAttack({ seconds, victimAddress, goodAddress, victimOptions = {}, attack }) {
  const victim = await startVictim(victimAddress, victimOptions);
  const good = await startGoodPeer(goodAddress, victimAddress);
  try {
    const detail = await attack({ victim, seconds });
    const rt = await good.stop();
    const victimUp = await victim.alive();
    const counters = victimUp ? await victim.stats() : null;
    return {
      peakRssMiB: victim.peakRssMiB(),
      goodP99Ms: rt.p99Ms,
      goodRoundTrips: rt.count,
      goodTimeouts: rt.timeouts,
      victimUp,
      detail: typeof detail === 'function' ? detail(counters) : detail,
    };
  } finally {
    await good.stop().catch(() => {});
    await victim.stop();
  }
}

// ---- the child processes ----

// Each child listens for IPC at once (a message with no listener is lost) and answers 'hello'
// only once it is ready.
async function victimMain({ address, options, echoSndbuf }) {
  let stack = null;
  const up = (async () => {
    stack = new RdsStack({ tcpPort: ATTACK_TCP_PORT, ...options });
    stack.on('error', () => {});
    const echo = new RdsSocket({ stack });
    await echo.bind({ address, port: ECHO_PORT });
    if (echoSndbuf > 0) echo.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, echoSndbuf);
    const sink = new RdsSocket({ stack });
    await sink.bind({ address, port: SINK_PORT });
    (async () => {
      for (;;) {
        const m = await echo.recv();
        echo.sendmsg(m.data, { address: m.address, port: m.port });
      }
    })().catch(() => {});
  })();
  process.on('message', async (m) => {
    if (m.type === 'hello') {
      await up;
      process.send({ type: 'ready' });
    } else if (m.type === 'ping') {
      process.send({ type: 'pong' });
    } else if (m.type === 'stats') {
      process.send({ type: 'stats', counters: stack.counters.snapshot(), memory: process.memoryUsage() });
    } else if (m.type === 'memory') {
      const t0 = performance.now();
      globalThis.gc?.();
      globalThis.gc?.();
      const gcMs = performance.now() - t0;
      const gcAt = performance.timeOrigin + t0;
      const partialFrameBytes = stack.transports.get('tcp')?.partialFrameBytes ?? null;
      process.send({ type: 'memory', memory: process.memoryUsage(), partialFrameBytes, gcMs, gcAt });
    }
  });
}

async function goodMain({ address, victim, bigBytes = 0, bigEvery = 0 }) {
  const rtts = [];
  const bigRtts = [];
  /** When each of rtts (and bigRtts) began (performance.timeOrigin + now(): comparable across processes). */
  const starts = [];
  const bigStarts = [];
  let timeouts = 0;
  let bigTimeouts = 0;
  let running = true;
  let seq = 0;
  let s = null;
  const to = { address: victim, port: ECHO_PORT };
  const one = async (record) => {
    const id = seq++;
    const big = bigEvery > 0 && id % bigEvery === bigEvery - 1;
    const size = big ? bigBytes : 64;
    const into = big ? bigRtts : rtts;
    const msg = Buffer.alloc(size);
    msg.writeUInt32BE(id, 0);
    const t0 = performance.now();
    try {
      s.sendmsg(msg, to);
      for (;;) {
        const m = await s.recv({ timeout: Math.max(1, Math.ceil(2000 - (performance.now() - t0))) });
        if (m.data.length === size && m.data.readUInt32BE(0) === id) break; // a late echo of an earlier one is skipped
      }
      if (record) {
        into.push(performance.now() - t0);
        (big ? bigStarts : starts).push(performance.timeOrigin + t0);
      }
    } catch (e) {
      if (process.env.ATTACK_DEBUG) console.error('good peer:', e.message);
      if (record) {
        if (big) bigTimeouts++;
        else timeouts++;
        into.push(2000);
        (big ? bigStarts : starts).push(performance.timeOrigin + t0);
      }
      // A failure can be synchronous (a full send buffer): let the event loop turn.
      await sleep(Math.max(0, 2000 - (performance.now() - t0)));
    }
  };
  const up = (async () => {
    const stack = new RdsStack({ tcpPort: ATTACK_TCP_PORT });
    s = new RdsSocket({ stack });
    await s.bind({ address, port: ECHO_PORT });
    if (bigBytes > 0) s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 4 * bigBytes);
    // Warm up: the connection is up and the path count settled before the attack starts.
    for (let i = 0; i < 20; i++) await one(false);
  })();
  const summary = (from, bigFrom) => {
    const sorted = rtts.slice(from).sort((a, b) => a - b);
    const q = (p) =>
      sorted.length === 0 ? Infinity : sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
    const bigs = bigRtts.slice(bigFrom);
    return {
      count: sorted.length,
      timeouts,
      p50Ms: q(0.5),
      p99Ms: q(0.99),
      bigCount: bigs.length,
      bigTimeouts,
      bigMaxMs: bigs.length === 0 ? 0 : Math.max(...bigs),
      // Each small round trip: [start, ms] (an attack may leave out those its own measuring disturbed).
      each: rtts.slice(from).map((ms, i) => [starts[from + i], ms]),
      bigEach: bigs.map((ms, i) => [bigStarts[bigFrom + i], ms]),
    };
  };
  let lapFrom = 0;
  let bigLapFrom = 0;
  process.on('message', async (m) => {
    if (m.type === 'hello') {
      await up;
      process.send({ type: 'ready' });
      (async () => {
        while (running) await one(true);
      })();
    } else if (m.type === 'lap') {
      const r = summary(lapFrom, bigLapFrom);
      lapFrom = rtts.length;
      bigLapFrom = bigRtts.length;
      timeouts = bigTimeouts = 0;
      process.send({ type: 'lap', ...r });
    } else if (m.type === 'stop') {
      running = false;
      process.send({ type: 'result', ...summary(0, 0) });
    }
  });
}

const role = process.argv[2];
if (role === '--victim') await victimMain(JSON.parse(process.argv[3]));
else if (role === '--good') await goodMain(JSON.parse(process.argv[3]));
