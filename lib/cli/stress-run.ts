/**
 * The data plane of an rds-stress run, as rds-tools runs it: task i is an RDS socket on
 * receive_addr:(port+1+i) that talks to every remote task j on send_addr:(port+1+j), keeps `depth`
 * requests outstanding to each (unless simplex and passive), answers every request with an ack
 * (acks go before new requests), numbers every message it sends to a remote task, and checks every
 * message it receives against what that remote task must send next.
 * rds-tools forks a process per task; here the tasks are sockets of one stack in one process.
 */
import { RdsError } from '../errors.js';
import { RdsSocket, type RdsStack } from '../index.js';
import { constants } from '../index.js';
import { type RdmaConfig, StressRdma } from './stress-rdma.js';
import {
  OP_ACK,
  OP_REQ,
  STRESS_HEADER_BYTES,
  encodeStressHeader,
  stressMismatch,
  stressPattern,
  type StressOptions,
} from './stress-wire.js';

/** What the per-second rows and the average row are made of (rds-tools' counters). */
export class StressStats {
  reqTx = 0;
  reqRx = 0;
  /** REQ and ACK bytes, sent and received. */
  bytes = 0;
  sendUsSum = 0;
  sendN = 0;
  rttUsSum = 0;
  rttN = 0;
  /** -D: bytes RDMA moved into this side's memory (mbi) and out of it (mbo). */
  rdmaIn = 0;
  rdmaOut = 0;
  /** -D: our RDMA ops whose status said they failed (counted, as rds-tools logs them: see stress-rdma.ts). */
  rdmaFailed = 0;

  add(o: StressStats): void {
    this.reqTx += o.reqTx;
    this.reqRx += o.reqRx;
    this.bytes += o.bytes;
    this.sendUsSum += o.sendUsSum;
    this.sendN += o.sendN;
    this.rttUsSum += o.rttUsSum;
    this.rttN += o.rttN;
    this.rdmaIn += o.rdmaIn;
    this.rdmaOut += o.rdmaOut;
    this.rdmaFailed += o.rdmaFailed;
  }
}

/** One local task's view of one remote task (rds-tools' struct task). */
interface RemoteTask {
  /** Its index j (port - PORT - 1). */
  index: number;
  address: string;
  port: number;
  sendSeq: number;
  recvSeq: number;
  sendIndex: number;
  recvIndex: number;
  /** Requests sent and not yet acked. */
  pending: number;
  /** Requests received and not yet answered. */
  unacked: number;
  sendTime: bigint[];
  congested: boolean;
  /** -D: an ACK waits for the status of the op its slot posted last (rds-tools' drain_rdmas). */
  drain: boolean;
}

export interface StressRunHooks {
  /** Per round trip, in microseconds (for the optional histogram). */
  rtt?(us: number): void;
  /** A received message was wrong, or a send failed: the report to print; the run is over. */
  fatal(report: string): void;
}

/**
 * The tasks of one side. `opts` is this side's view: receiveAddr is our address, sendAddr the
 * peer's (the passive swaps what the active sent).
 */
export class StressRun {
  readonly stats = new StressStats();
  private readonly socks: RdsSocket[] = [];
  private readonly remotes: RemoteTask[][] = [];
  /** -D: per local task. */
  private readonly rdma: StressRdma[] = [];
  /** -D: the last failed RDMA op's report among the local tasks, or null (printed after the count). */
  lastRdmaFailure(): string | null {
    for (let i = this.rdma.length - 1; i >= 0; i--) {
      const f = this.rdma[i]?.lastFailure;
      if (f) return f;
    }
    return null;
  }
  private readonly req: Buffer;
  private readonly ack: Buffer;
  private readonly pattern: Buffer | null;
  private running = false;
  private failed = false;

  constructor(
    private readonly stack: RdsStack,
    private readonly opts: StressOptions,
    private readonly active: boolean,
    private readonly hooks: StressRunHooks,
    /** The sockets' transport: 'ib' for -D (RDS/TCP has no RDMA). */
    private readonly transport: 'tcp' | 'ib' = 'tcp',
  ) {
    this.pattern = opts.verify ? stressPattern(Math.max(opts.reqSize, opts.ackSize) - STRESS_HEADER_BYTES) : null;
    this.req = this.template(opts.reqSize);
    this.ack = this.template(opts.ackSize);
  }

  private template(size: number): Buffer {
    const b = Buffer.alloc(size);
    this.pattern?.copy(b, STRESS_HEADER_BYTES, 0, size - STRESS_HEADER_BYTES);
    return b;
  }

  /** Binds every task's socket (before the go byte, as rds-tools' children are ready before it). */
  async bind(): Promise<string[]> {
    const o = this.opts;
    const warnings: string[] = [];
    const want = o.nrTasks * o.reqDepth * (o.reqSize + o.ackSize) * 2;
    for (let i = 0; i < o.nrTasks; i++) {
      const s = new RdsSocket({ stack: this.stack, transport: this.transport });
      await s.bind({ address: o.receiveAddr, port: o.startingPort + 1 + i });
      // -Q: the socket's TOS, after bind as rds-tools sets it (TCP maps every TOS to 0).
      if (o.tos !== 0) s.ioctl(constants.SIOCRDSSETTOS, o.tos);
      // rds-tools sets exactly what the run needs; never go below the default budget here.
      for (const opt of [constants.SO_SNDBUF, constants.SO_RCVBUF]) {
        if (Number(s.getsockopt(constants.SOL_SOCKET, opt)) / 2 < want) s.setsockopt(constants.SOL_SOCKET, opt, want);
      }
      if (i === 0 && Number(s.getsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF)) / 2 < want) {
        warnings.push(
          `getsockopt(SNDBUF) returned ${String(s.getsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF))}, we wanted ${want} * 2`,
        );
      }
      if (o.useCongMonitor) s.setsockopt(constants.SOL_RDS, constants.RDS_CONG_MONITOR, 1);
      this.socks.push(s);
      if (o.rdmaSize > 0) this.rdma.push(new StressRdma(s, rdmaConfig(o), o.nrTasks, this.stats));
      this.remotes.push(
        Array.from({ length: o.nrTasks }, (_, j) => ({
          index: j,
          address: o.sendAddr,
          port: o.startingPort + 1 + j,
          sendSeq: 0,
          recvSeq: 0,
          sendIndex: 0,
          recvIndex: 0,
          pending: 0,
          unacked: 0,
          sendTime: new Array<bigint>(o.reqDepth).fill(0n),
          congested: false,
          drain: false,
        })),
      );
    }
    return warnings;
  }

  /** Starts receiving and sending. */
  start(): void {
    this.running = true;
    this.socks.forEach((s, i) => {
      s.on('readable', () => this.receive(i));
      s.on('writable', () => this.pump(i));
      this.receive(i);
    });
  }

  /** Stops sending; the caller closes the stack. */
  stop(): void {
    this.running = false;
  }

  private fail(report: string): void {
    if (this.failed) return;
    this.failed = true;
    this.running = false;
    this.hooks.fatal(report);
  }

  private receive(i: number): void {
    const s = this.socks[i]!;
    const o = this.opts;
    const own = s.address();
    for (let m = s.recvmsg(); m !== null; m = s.recvmsg()) {
      if (!this.running) return;
      if (m.congestionUpdate !== undefined) {
        for (const t of this.remotes[i]!) if ((m.congestionUpdate >> BigInt(t.port % 64)) & 1n) t.congested = false;
      }
      if (m.rdmaStatus !== undefined) {
        const j = this.guard(() => this.rdma[i]?.completed(m.rdmaStatus!.token, m.rdmaStatus!.status));
        if (j === undefined)
          return this.fail(`an RDMA status (token 0x${m.rdmaStatus.token.toString(16)}) in a run without RDMA`);
        if (j === null) return;
        this.remotes[i]![j]!.drain = false;
      }
      if (m.address === '') continue;
      const taskIndex = m.port - o.startingPort - 1;
      if (taskIndex < 0 || taskIndex >= o.nrTasks)
        return this.fail(`received bad task index ${taskIndex} (a message from ${m.address}:${m.port})`);
      const t = this.remotes[i]![taskIndex]!;
      const bytes = m.data.length;
      if (bytes < STRESS_HEADER_BYTES) return this.fail(`recvmsg() returned short data: ${bytes}`);
      const op = m.data[18];
      let expectIndex: number;
      if (op === OP_REQ) {
        if (bytes !== o.reqSize) return this.fail(`req size ${bytes}, not ${o.reqSize}`);
        expectIndex = t.recvIndex;
      } else if (op === OP_ACK) {
        if (bytes !== o.ackSize) return this.fail(`ack size ${bytes}, not ${o.ackSize}`);
        // An ack answers the oldest outstanding request.
        expectIndex = (t.sendIndex - t.pending + o.reqDepth) % o.reqDepth;
      } else {
        return this.fail(`unknown op ${String(op)}`);
      }
      const bad = stressMismatch(
        m.data,
        {
          seq: t.recvSeq,
          fromAddr: m.address,
          fromPort: m.port,
          toAddr: own.address,
          toPort: own.port,
          index: expectIndex,
          op,
        },
        this.pattern,
      );
      if (bad !== null) return this.fail(`${bad}\nheader from ${m.address}:${m.port} to id ${own.port} bogus`);
      this.stats.bytes += bytes;
      const rdma = this.rdma[i];
      if (rdma === undefined && (m.rdmaDest !== undefined || m.data.readBigUInt64BE(44) !== 0n))
        return this.fail(`Unexpected RDMA in a message from ${m.address}:${m.port} (this run has no -D)`);
      const ok = this.guard(() =>
        op === OP_ACK
          ? rdma?.ackReceived(taskIndex, expectIndex, m.data)
          : rdma?.requestReceived(taskIndex, t.recvIndex, m.data, m.rdmaDest),
      );
      if (ok === null) return;
      if (op === OP_ACK) {
        const us = Number(process.hrtime.bigint() - t.sendTime[expectIndex]!) / 1000;
        this.stats.rttUsSum += us;
        this.stats.rttN++;
        this.hooks.rtt?.(us);
        t.pending--;
      } else {
        this.stats.reqRx++;
        t.unacked++;
        t.recvIndex = (t.recvIndex + 1) % o.reqDepth;
      }
      t.recvSeq = (t.recvSeq + 1) >>> 0;
    }
    this.pump(i);
  }

  /** Keeps the pipeline full: queued acks first, then requests up to the depth, per remote task. */
  private pump(i: number): void {
    if (!this.running) return;
    const o = this.opts;
    const doWork = !o.simplex || this.active;
    for (const t of this.remotes[i]!) {
      if ((o.useCongMonitor && t.congested) || t.drain) continue;
      let r: 'ok' | 'full' | 'congested' | 'drain' = 'ok';
      while (t.unacked > 0) {
        const slot = (t.recvIndex - t.unacked + o.reqDepth) % o.reqDepth;
        if ((r = this.send(i, t, OP_ACK, slot)) !== 'ok') break;
        t.unacked--;
      }
      while (r === 'ok' && doWork && t.pending < o.reqDepth) {
        const started = process.hrtime.bigint();
        if ((r = this.send(i, t, OP_REQ, t.sendIndex)) !== 'ok') break;
        this.stats.reqTx++;
        t.sendTime[t.sendIndex] = started;
        t.sendIndex = (t.sendIndex + 1) % o.reqDepth;
        t.pending++;
      }
      if (!this.running) return;
      // A full send buffer stops every destination ('writable' resumes); a congested port only its own.
      if (r === 'full') return;
      if (r === 'congested') t.congested = true;
      if (r === 'drain') t.drain = true;
    }
  }

  /** Runs an RDMA step; a peer's mistake (or a failed op) ends the run: null then. */
  private guard<T>(f: () => T): T | null {
    try {
      return f();
    } catch (e) {
      this.fail((e as Error).message);
      return null;
    }
  }

  private send(i: number, t: RemoteTask, op: number, index: number): 'ok' | 'full' | 'congested' | 'drain' {
    const s = this.socks[i]!;
    const own = s.address();
    const msg = op === OP_REQ ? this.req : this.ack;
    encodeStressHeader(msg, {
      seq: t.sendSeq,
      fromAddr: own.address,
      fromPort: own.port,
      toAddr: t.address,
      toPort: t.port,
      index,
      op,
    });
    const rdma = this.rdma[i];
    const extra = rdma
      ? this.guard(() =>
          op === OP_REQ ? rdma.request(t.index, index, t.sendSeq, msg) : rdma.ack(t.index, index, t.sendSeq, msg),
        )
      : undefined;
    // null is also "no RDMA on this message"; only a failed step ends the send.
    if (this.failed) return 'full';
    if (extra === 'drain') return 'drain';
    const t0 = process.hrtime.bigint();
    try {
      s.sendmsg(msg, { address: t.address, port: t.port }, { flags: constants.MSG_DONTWAIT, ...extra?.sendOpts });
      extra?.sent();
    } catch (e) {
      if (e instanceof RdsError && e.code === 'EAGAIN') return 'full';
      if (e instanceof RdsError && e.code === 'ENOBUFS') return 'congested';
      this.fail(`sendto() failed: ${(e as Error).message}`);
      return 'full';
    }
    // "tx us/c" is the time a request's sendmsg took (rds-tools times requests only).
    if (op === OP_REQ) {
      this.stats.sendUsSum += Number(process.hrtime.bigint() - t0) / 1000;
      this.stats.sendN++;
    }
    this.stats.bytes += msg.length;
    t.sendSeq = (t.sendSeq + 1) >>> 0;
    return 'ok';
  }
}

/** The RDMA settings of a run from its options (both sides run with the active's). */
function rdmaConfig(o: StressOptions): RdmaConfig {
  return {
    size: o.rdmaSize,
    vector: o.rdmaVector,
    depth: o.reqDepth,
    rwMode: o.rwMode,
    useOnce: o.rdmaUseOnce === 1,
    useGetMr: o.rdmaUseGetMr === 1,
    useFence: o.rdmaUseFence === 1,
    cacheMrs: o.rdmaCacheMrs === 1,
    verify: o.verify === 1,
  };
}
