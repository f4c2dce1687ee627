#!/usr/bin/env node
/**
 * rds-stress, speaking rds-tools' rds-stress protocol (2.0.7), so it runs against the real tool on
 * a kernel node in either role: the options struct and the go byte on a TCP control connection,
 * then tasks exchanging REQ/ACK messages with the 63-byte header (stress-wire.ts, stress-run.ts).
 *   passive: rds-stress [-r ADDR] [-p PORT]
 *   active:  rds-stress -s DEST [-r ADDR] [-p PORT] [-q REQ] [-a ACK] [-d DEPTH] [-t TASKS] [-T SECS] [-o] [-v] [-z] [-Q TOS] [--async]
 *            [-D BYTES [-I IOVECS] [-M MODE] [--rdma-use-once 0|1] [--rdma-use-get-mr 0|1] [--rdma-use-fence 0|1] [--rdma-cache-mrs 0|1]]
 * -D (an RDMA op with each request, stress-rdma.ts) runs over InfiniBand: the sockets take the IB
 * transport with -D (or --transport ib), and the passive takes it when the active asks for RDMA.
 * Output as rds-tools': "Starting up....", the table header, a row per second, a dashed line and
 * the (average) row. Extras rds-tools lacks, behind flags: --histogram (round-trip p50/p99 and a
 * power-of-two histogram), --tcp-port, --startup SECONDS, --timeout SECONDS.
 */
import { connect, createServer, type Socket } from 'node:net';
import { RdsSocket, RdsStack, constants } from '../index.js';
import { parseFlags } from './format.js';
import { RttHistogram } from './stress-histogram.js';
import { StressRun, StressStats } from './stress-run.js';
import {
  decodeStressOptions,
  defaultStressOptions,
  encodeStressOptions,
  stressOptionsLength,
  stressOptionsProblem,
  STRESS_HEADER_BYTES,
  STRESS_LIMITS,
  type StressOptions,
} from './stress-wire.js';
import { Perfdata, type PerfdataRun } from './stress-perfdata.js';

const USAGE =
  'usage: rds-stress [-s dest] [-r local] [-p port] [-q req] [-a ack] [-d depth] [-t tasks] [-T seconds] [-o] [-v] [-z] [-Q tos] [--async]\n' +
  '                  [-D rdma-bytes] [-I iovecs] [-M 0|1|2] [--rdma-use-once 0|1] [--rdma-use-get-mr 0|1] [--rdma-use-fence 0|1]\n' +
  '                  [--rdma-cache-mrs 0|1] [--transport tcp|ib]\n' +
  '                  [--connect-retries N] [--tcp-port P] [--histogram] [--show-perfdata] [--startup SECONDS] [--timeout SECONDS]';

export const HEADER = 'tsks   tx/s   rx/s  tx+rx K/s    mbi K/s    mbo K/s tx us/c   rtt us cpu %';

const f2 = (v: number, w: number): string => (Number.isFinite(v) ? v : 0).toFixed(2).padStart(w);
const avg = (sum: number, n: number): number => (n > 0 ? sum / n : 0);

/** A row as rds-tools prints it: "%4u %6u %6u %10.2f %10.2f %10.2f %7.2f %8.2f %5.2f". */
function row(tasks: number, s: StressStats, scale: number, perSecondCounts: boolean): string {
  const tx = perSecondCounts ? s.reqTx : Math.trunc(scale * s.reqTx);
  const rx = perSecondCounts ? s.reqRx : Math.trunc(scale * s.reqRx);
  return (
    `${String(tasks).padStart(4)} ${String(tx).padStart(6)} ${String(rx).padStart(6)} ${f2((scale * s.bytes) / 1024, 10)} ${f2((scale * s.rdmaIn) / 1024, 10)} ${f2((scale * s.rdmaOut) / 1024, 10)} ` +
    `${f2(avg(s.sendUsSum, s.sendN), 7)} ${f2(avg(s.rttUsSum, s.rttN), 8)} ${f2(-1, 5)}`
  );
}

class UsageError extends Error {}

/**
 * Reads exact byte counts from the control connection. Whatever goes wrong (the peer closes, sends
 * too little, goes silent) is reported with the bytes that did arrive, so a mismatched peer shows
 * what it sent instead of hanging or crashing the command.
 */
class ControlReader {
  private buf = Buffer.alloc(0);
  private ended: string | null = null;
  private wake: (() => void) | null = null;

  constructor(readonly sock: Socket) {
    sock.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.wake?.();
    });
    sock.on('end', () => this.end('closed the control connection'));
    sock.on('close', () => this.end('closed the control connection'));
    sock.on('error', (e) => this.end(`control connection failed: ${e.message}`));
  }

  private end(why: string): void {
    this.ended ??= why;
    this.wake?.();
  }

  /** Bytes received so far and not consumed, for error messages. */
  get pending(): Buffer {
    return this.buf;
  }

  async read(n: number, timeoutMs: number, what: string): Promise<Buffer> {
    const deadline = Date.now() + timeoutMs;
    while (this.buf.length < n) {
      if (this.ended !== null)
        throw new Error(`the peer ${this.ended} while we waited for ${what} (${describe(this.buf)})`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${timeoutMs / 1000} s (${describe(this.buf)})`);
      await new Promise<void>((res) => {
        const t = setTimeout(res, left);
        this.wake = () => {
          clearTimeout(t);
          res();
        };
      });
      this.wake = null;
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  /** Resolves when anything more arrives or the connection ends (the passive's end of run). */
  async anything(): Promise<void> {
    while (this.buf.length === 0 && this.ended === null) await new Promise<void>((res) => (this.wake = res));
    this.wake = null;
  }
}

function describe(b: Buffer): string {
  if (b.length === 0) return 'got no bytes';
  const hex = b.subarray(0, 80).toString('hex').replace(/(..)/g, '$1 ').trim();
  return `got ${b.length} byte${b.length === 1 ? '' : 's'}: ${hex}${b.length > 80 ? ' ...' : ''}`;
}

const plainAddress = (a: string | undefined): string => (a ?? '').replace(/^::ffff:(?=\d+\.)/, '');

interface RunFlags {
  tcpPort: number;
  histogram: boolean;
  /** --show-perfdata: the "::" CSV lines instead of the table rows. */
  perfdata: boolean;
  startupSecs: number;
  timeoutMs: number;
  /** --transport, if given (else IB with RDMA, TCP without). */
  transport: 'tcp' | 'ib' | null;
}

/** Why RDMA cannot run over TCP, for both roles. */
const RDMA_NEEDS_IB =
  'RDMA (-D) needs an InfiniBand/RoCE transport: RDS/TCP cannot register memory or post RDMA ops (the kernel refuses RDS_CMSG_RDMA_* on TCP with EOPNOTSUPP); run with --transport ib and addresses of an RDMA device';

async function main(): Promise<number> {
  let o: StressOptions;
  let flags: RunFlags;
  let dest: string | null;
  let local: string | null;
  let full: boolean;
  try {
    const p = parseFlags(process.argv.slice(2), {
      '-s': 'value',
      '-r': 'value',
      '-p': 'value',
      '-q': 'value',
      '-a': 'value',
      '-d': 'value',
      '-t': 'value',
      '-T': 'value',
      '-Q': 'value',
      '-D': 'value',
      '-I': 'value',
      '-M': 'value',
      '--rdma-use-once': 'value',
      '--rdma-use-get-mr': 'value',
      '--rdma-use-fence': 'value',
      '--rdma-cache-mrs': 'value',
      '--rdma-use-notify': 'value',
      '--rdma-alignment': 'value',
      '--rdma-key-o-meter': 'flag',
      '--transport': 'value',
      '-o': 'flag',
      '-v': 'flag',
      '-z': 'flag',
      '--async': 'flag',
      '--connect-retries': 'value',
      '--tcp-port': 'value',
      '--histogram': 'flag',
      '--show-perfdata': 'flag',
      '--startup': 'value',
      '--timeout': 'value',
      '-h': 'flag',
      '--help': 'flag',
    });
    const a = p.opts;
    if (a['-h'] || a['--help']) {
      console.log(USAGE);
      return 0;
    }
    if (p.rest.length > 0) throw new UsageError(`unexpected argument ${p.rest[0]}`);
    const num = (k: string, d: number, min: number, max: number): number => {
      if (typeof a[k] !== 'string') return d;
      const v = Number(a[k]);
      if (!Number.isInteger(v) || v < min || v > max)
        throw new UsageError(`${k} needs an integer ${min}..${max}, got ${String(a[k])}`);
      return v;
    };
    o = defaultStressOptions();
    o.startingPort = num('-p', 4000, 1, 65534);
    o.reqSize = num('-q', 1024, STRESS_HEADER_BYTES, 1 << 20);
    o.ackSize = num('-a', STRESS_HEADER_BYTES, STRESS_HEADER_BYTES, 1 << 20);
    o.reqDepth = num('-d', 1, 1, 4096);
    o.nrTasks = num('-t', 1, 1, 256);
    o.runTime = num('-T', 0, 0, 0xffffffff);
    o.tos = num('-Q', 0, 0, 255);
    o.connectRetries = num('--connect-retries', 0, 0, 1_000_000);
    o.rdmaSize = num('-D', 0, 0, STRESS_LIMITS.maxRdmaOp);
    o.rdmaVector = num('-I', 1, 1, STRESS_LIMITS.maxRdmaVector);
    o.rwMode = num('-M', 0, 0, 2);
    o.rdmaUseOnce = num('--rdma-use-once', 0, 0, 1);
    o.rdmaUseGetMr = num('--rdma-use-get-mr', 0, 0, 1);
    o.rdmaUseFence = num('--rdma-use-fence', 1, 0, 1);
    o.rdmaCacheMrs = num('--rdma-cache-mrs', 0, 0, 1);
    // rds-tools parses --rdma-use-notify and ignores it: every op asks for its status.
    num('--rdma-use-notify', 0, 0, 1);
    if (o.rdmaCacheMrs && o.rdmaUseOnce) throw new UsageError('option --rdma-cache-mrs conflicts with --rdma-use-once');
    if (o.rdmaCacheMrs && !o.rdmaUseGetMr)
      throw new UsageError(
        'option --rdma-cache-mrs conflicts with --rdma-use-get-mr=0 (cached regions come from RDS_GET_MR)',
      );
    if (a['--rdma-alignment'] !== undefined)
      throw new UsageError(
        "--rdma-alignment is not supported: it places rds-tools' RDMA buffers at an offset in a page, and a Node Buffer cannot be placed at an address",
      );
    if (a['--rdma-key-o-meter'] !== undefined)
      throw new UsageError(
        "--rdma-key-o-meter is not supported: it times the reuse of the kernel's R_Keys, which the verbs provider chooses here",
      );
    const tr = a['--transport'];
    if (tr !== undefined && tr !== 'tcp' && tr !== 'ib')
      throw new UsageError(`--transport takes tcp or ib, got ${String(tr)}`);
    if (o.rdmaSize > 0 && tr === 'tcp') throw new UsageError(RDMA_NEEDS_IB);
    const rdmaProblem = o.rdmaSize > 0 ? stressOptionsProblem(o) : null;
    if (rdmaProblem !== null) throw new UsageError(rdmaProblem);
    o.simplex = a['-o'] === true ? 1 : 0;
    o.verify = a['-v'] === true ? 1 : 0;
    o.summaryOnly = a['-z'] === true ? 1 : 0;
    o.async = a['--async'] === true ? 1 : 0;
    o.showPerfdata = a['--show-perfdata'] === true ? 1 : 0;
    full = o.tos !== 0 || o.async !== 0;
    flags = {
      tcpPort: num('--tcp-port', constants.RDS_TCP_PORT, 1, 65535),
      histogram: a['--histogram'] === true,
      perfdata: a['--show-perfdata'] === true,
      startupSecs: num('--startup', 4, 0, 60),
      timeoutMs: num('--timeout', 30, 1, 3600) * 1000,
      transport: tr === undefined ? null : tr,
    };
    dest = typeof a['-s'] === 'string' ? a['-s'] : null;
    local = typeof a['-r'] === 'string' ? a['-r'] : null;
  } catch (e) {
    console.error(`rds-stress: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  try {
    return dest === null ? await passive(o, local, flags) : await active(o, dest, local, full, flags);
  } catch (e) {
    console.error(`rds-stress: ${(e as Error).message}`);
    return 1;
  }
}

/** Waits for one connection on the control port, then closes the listener (as rds-tools). */
async function acceptOne(host: string, port: number): Promise<Socket> {
  const server = createServer({ pauseOnConnect: false });
  await new Promise<void>((res, rej) => server.once('error', rej).listen({ host, port, backlog: 255 }, () => res()));
  const ctl = await new Promise<Socket>((res) => server.once('connection', res));
  server.close();
  return ctl;
}

async function passive(o: StressOptions, local: string | null, flags: RunFlags): Promise<number> {
  const ctl = await acceptOne(local ?? '0.0.0.0', o.startingPort);
  const reader = new ControlReader(ctl);
  const peer = `${plainAddress(ctl.remoteAddress)}:${ctl.remotePort ?? 0}`;
  const first = await reader.read(16, flags.timeoutMs, `options from ${peer}`);
  const rest = await reader.read(
    stressOptionsLength(first)! - 16,
    flags.timeoutMs,
    `the rest of the options from ${peer} (after ${first.toString('hex')})`,
  );
  const raw = Buffer.concat([first, rest]);
  const { options: theirs } = decodeStressOptions(raw);
  const problem = stressOptionsProblem(theirs);
  if (problem !== null) throw new Error(`${peer} sent options we cannot run: ${problem} (${describe(raw)})`);
  if (theirs.rdmaSize > 0 && flags.transport === 'tcp')
    throw new Error(`${peer} asked for RDMA (-D ${theirs.rdmaSize}): ${RDMA_NEEDS_IB}`);
  // Our view: we send to the active's address and receive on ours.
  const mine: StressOptions = {
    ...theirs,
    sendAddr: theirs.receiveAddr,
    receiveAddr: local ?? plainAddress(ctl.localAddress),
  };
  return await runSide(mine, false, ctl, reader, flags, peer);
}

async function active(
  o: StressOptions,
  dest: string,
  local: string | null,
  full: boolean,
  flags: RunFlags,
): Promise<number> {
  console.log(`connecting to ${dest}:${o.startingPort}`);
  let ctl: Socket | null = null;
  for (let attempt = 0; ctl === null; attempt++) {
    const s = connect({ host: dest, port: o.startingPort, ...(local ? { localAddress: local } : {}) });
    try {
      await new Promise<void>((res, rej) => s.once('connect', res).once('error', rej));
      ctl = s;
    } catch (e) {
      s.destroy();
      const code = (e as NodeJS.ErrnoException).code;
      const retry = code === 'ECONNREFUSED' || code === 'EHOSTUNREACH' || code === 'ENETUNREACH';
      if (!retry || attempt >= o.connectRetries)
        throw new Error(`cannot reach the passive side at ${dest}:${o.startingPort}: ${(e as Error).message}`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  const reader = new ControlReader(ctl);
  const mine: StressOptions = { ...o, sendAddr: dest, receiveAddr: local ?? plainAddress(ctl.localAddress) };
  ctl.write(encodeStressOptions(mine, full));
  return await runSide(mine, true, ctl, reader, flags, `${dest}:${o.startingPort}`);
}

/** Both roles from the go byte on: bind the tasks, exchange the go byte, run, print the rows. */
async function runSide(
  o: StressOptions,
  isActive: boolean,
  ctl: Socket,
  reader: ControlReader,
  flags: RunFlags,
  peer: string,
): Promise<number> {
  const stack = new RdsStack({ tcpPort: flags.tcpPort });
  let failure: string | null = null;
  let failed: () => void = () => {};
  const hist = flags.histogram ? new RttHistogram() : null;
  const transport = flags.transport ?? (o.rdmaSize > 0 ? 'ib' : 'tcp');
  const run = new StressRun(
    stack,
    o,
    isActive,
    {
      ...(hist ? { rtt: (us: number) => hist.add(us) } : {}),
      fatal: (report) => {
        failure = report;
        failed();
      },
    },
    transport,
  );
  try {
    for (const w of await run.bind()) console.error(w);
    // The go byte: the active sends one (its value means nothing), the passive answers with one.
    if (isActive) {
      ctl.write(Buffer.from([0]));
      await reader.read(1, flags.timeoutMs, `go byte back from the passive side at ${peer}`);
    } else {
      await reader.read(1, flags.timeoutMs, `go byte from ${peer}`);
      ctl.write(Buffer.from([0]));
    }
    // Tasks start half-way through the start-up (rds-tools: 2 s of 4), so both sides are bound.
    const startTask = setTimeout(() => run.start(), (flags.startupSecs * 1000) / 2);
    process.stdout.write('Starting up');
    for (let i = 0; i < flags.startupSecs; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      process.stdout.write('.');
    }
    process.stdout.write('\n');
    clearTimeout(startTask);
    run.start();
    const summaryOnly = o.summaryOnly !== 0;
    const perf = flags.perfdata ? new Perfdata(new RdsSocket({ stack })) : null;
    if (!summaryOnly) console.log(perf?.header() ?? HEADER);
    const summary = new StressStats();
    const firstTs = performance.now();
    let lastTs = firstTs;
    let last = new StressStats();
    const ended = new Promise<void>((res) => {
      failed = res;
      if (!isActive) void reader.anything().then(res);
    });
    for (;;) {
      const stop = await Promise.race([
        ended.then(() => true),
        new Promise<boolean>((r) => setTimeout(() => r(false), 1000)),
      ]);
      if (stop) break;
      const now = performance.now();
      const cur = new StressStats();
      cur.add(run.stats);
      const delta = diff(cur, last);
      last = cur;
      if (!summaryOnly)
        console.log(
          perf?.row(perfRun(o, delta, 1000 / (now - lastTs))) ?? row(o.nrTasks, delta, 1000 / (now - lastTs), true),
        );
      summary.add(delta);
      lastTs = now;
      // A tick lands a hair early now and then; 1% of a second is not another row.
      if (isActive && o.runTime > 0 && now - firstTs >= o.runTime * 1000 - 10) break;
    }
    run.stop();
    ctl.end();
    if (failure !== null) {
      console.log(failure);
      return 1;
    }
    if (!summaryOnly) console.log('---------------------------------------------');
    const secs = (lastTs - firstTs) / 1000;
    console.log(`${row(o.nrTasks, summary, secs > 0 ? 1 / secs : 0, false)}  (average)`);
    if (run.stats.rdmaFailed > 0)
      console.log(
        `${run.stats.rdmaFailed} RDMA operation(s) failed (expected only at the end: the side whose run ends first frees its regions); last: ${run.lastRdmaFailure()}`,
      );
    hist?.print();
    return 0;
  } finally {
    run.stop();
    ctl.destroy();
    await stack.close();
  }
}

/** A perfdata row's run figures: rds-tools' row, per second; no CPU soakers here. */
function perfRun(o: StressOptions, s: StressStats, scale: number): PerfdataRun {
  return {
    nrTasks: o.nrTasks,
    reqSize: o.reqSize,
    ackSize: o.ackSize,
    rdmaSize: o.rdmaSize,
    reqSent: s.reqTx,
    thruput: (scale * s.bytes) / 1024,
    rdmaIn: (scale * s.rdmaIn) / 1024,
    rdmaOut: (scale * s.rdmaOut) / 1024,
    txDelayUs: avg(s.sendUsSum, s.sendN),
    rttUs: avg(s.rttUsSum, s.rttN),
    cpuPercent: -1,
  };
}

function diff(a: StressStats, b: StressStats): StressStats {
  const d = new StressStats();
  d.reqTx = a.reqTx - b.reqTx;
  d.reqRx = a.reqRx - b.reqRx;
  d.bytes = a.bytes - b.bytes;
  d.sendUsSum = a.sendUsSum - b.sendUsSum;
  d.sendN = a.sendN - b.sendN;
  d.rttUsSum = a.rttUsSum - b.rttUsSum;
  d.rttN = a.rttN - b.rttN;
  d.rdmaIn = a.rdmaIn - b.rdmaIn;
  d.rdmaOut = a.rdmaOut - b.rdmaOut;
  return d;
}

process.exitCode = await main();
