// Shared pieces of the admission attacks (tls-refusal-crash, tls-idle-flood, slot-flood-known-peer,
// stranger-churn): a victim node in a child process, a good peer doing round trips against it,
// TLS material, and the figures every attack reports. Loopback only: 127.106-109.x.y.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { LoopTransport, RdsSocket, RdsStack, TcpTransport } from '../../dist/index.js';

export { tlsMaterial } from './tls-material.mjs';

const VICTIM = fileURLToPath(new URL('./admission-victim.mjs', import.meta.url));

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts the victim: { address, tcpPort, stack, tls? (file paths) }. Resolves once it is bound.
 * peakRssMiB() reads VmHWM (the kernel's peak RSS) while the process lives, else the highest sample.
 */
export async function startVictim(cfg) {
  const proc = spawn(process.execPath, [VICTIM, JSON.stringify(cfg)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let exited = null;
  let stderr = '';
  let last = null;
  let maxRss = 0;
  let buf = '';
  let ready;
  const readyP = new Promise((res, rej) => {
    ready = res;
    setTimeout(() => rej(new Error(`victim not ready in 10 s: ${stderr}`)), 10000).unref();
  });
  proc.stderr.setEncoding('utf8').on('data', (d) => {
    stderr = (stderr + d).slice(-4000);
  });
  proc.stdout.setEncoding('utf8').on('data', (d) => {
    buf += d;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line === 'ready') ready();
      else {
        try {
          last = JSON.parse(line);
          maxRss = Math.max(maxRss, last.rssMiB);
        } catch {
          /* partial or foreign line */
        }
      }
    }
  });
  proc.on('exit', (code, signal) => {
    exited = { code, signal };
  });
  await readyP;
  const hwm = () => {
    try {
      const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${proc.pid}/status`, 'utf8'));
      if (m) maxRss = Math.max(maxRss, Number(m[1]) / 1024);
    } catch {
      /* gone, or not Linux */
    }
    return +maxRss.toFixed(1);
  };
  return {
    pid: proc.pid,
    alive: () => exited === null,
    exit: () => exited,
    stderr: () => stderr,
    /** The victim's latest figures line ({ rssMiB, conns, dials, counters }). */
    stats: () => last,
    peakRssMiB: hwm,
    async stop() {
      hwm();
      if (exited === null) {
        proc.kill('SIGKILL');
        await new Promise((r) => proc.once('exit', r));
      }
    },
  };
}

/** Waits for the victim's next figures line (at most `ms`). */
export async function nextStats(victim, ms = 1000) {
  const first = victim.stats();
  const deadline = Date.now() + ms;
  while (Date.now() < deadline && victim.stats() === first) await sleep(20);
  return victim.stats();
}

/** What an attack reports: the victim's peak RSS and life, the good peer's figures, then `detail`. */
export function attackReport(victim, good, detail) {
  const g = good.figures();
  return {
    peakRssMiB: victim.peakRssMiB(),
    goodP99Ms: good.p99(),
    goodIdleP99Ms: good.idleP99(),
    goodRoundTrips: g.roundTrips,
    goodTimeouts: g.timeouts,
    victimUp: victim.alive(),
    detail: { ...detail, good: g },
  };
}

/**
 * A good peer at `address` (TLS with `tls` buffers, if given) doing one round trip at a time
 * against the victim, each bounded by `timeoutMs` (a timed-out one counts as timeoutMs).
 */
export async function startGoodPeer({ address, victimAddress, tcpPort, tls, timeoutMs = 5000, stack: stackOpts = {} }) {
  const make = async () => {
    const transports = tls ? [new TcpTransport({ tls }), new LoopTransport()] : undefined;
    const stack = new RdsStack({
      tcpPort,
      reconnectMaxDelayMs: 100,
      ...stackOpts,
      ...(transports ? { transports } : {}),
    });
    stack.on('error', () => {});
    const sock = new RdsSocket({ stack });
    await sock.bind({ address, port: 4000 });
    return { stack, sock };
  };
  let node = await make();
  const rtts = [];
  let timeouts = 0;
  let seq = 0;
  /** One round trip: ms, or timeoutMs if no answer came. */
  async function roundTrip() {
    const tag = Buffer.alloc(8);
    tag.writeDoubleBE(++seq);
    const t0 = performance.now();
    try {
      node.sock.sendmsg(tag, { address: victimAddress, port: 4000 });
      for (;;) {
        const m = await node.sock.recv({ timeout: Math.max(1, Math.ceil(timeoutMs - (performance.now() - t0))) });
        if (m.data.length === 8 && m.data.readDoubleBE(0) === seq) break; // late answers to earlier ones are skipped
      }
      const ms = performance.now() - t0;
      rtts.push(ms);
      return ms;
    } catch (e) {
      if (process.env.ATTACK_DEBUG) console.error(e);
      timeouts++;
      rtts.push(timeoutMs);
      return timeoutMs;
    }
  }
  let running = false;
  let loop = null;
  let idleP99 = null;
  return {
    roundTrip,
    /**
     * `n` round trips paced like start()'s before the attack begins: their p99 is the yardstick
     * the attack's p99 is held to (same process, same machine load). They are then forgotten.
     */
    async measureIdle(n = 40) {
      rtts.length = 0; // first contact (connection set-up, handshake) is neither idle nor attack
      for (let i = 0; i < n; i++) {
        await roundTrip();
        await sleep(5);
      }
      idleP99 = percentile(rtts.splice(0), 99);
      return idleP99;
    },
    idleP99: () => idleP99,
    /** Round trips back to back until stop(). */
    start() {
      running = true;
      loop = (async () => {
        while (running) {
          await roundTrip();
          await sleep(5);
        }
      })();
    },
    async stop() {
      running = false;
      await loop;
    },
    /** The peer restarts (a new stack on the same address: its connections drop). */
    async restart() {
      await node.stack.close();
      node = await make();
    },
    figures: () => ({ roundTrips: rtts.length, timeouts, p50Ms: percentile(rtts, 50), p99Ms: percentile(rtts, 99) }),
    p99: () => percentile(rtts, 99),
    close: () => node.stack.close(),
  };
}

export function percentile(xs, p) {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return +s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)].toFixed(2);
}

/** Runs `fn` until `ms` have passed (bounded attack loops). */
export async function forMs(ms, fn) {
  const end = Date.now() + ms;
  while (Date.now() < end) await fn(end);
}
