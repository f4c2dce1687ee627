import { readFileSync } from 'node:fs';
import { constants, RdsInfoSpaceError, type RdsSocket } from '../index.js';

// rds-stress --show-perfdata: the machine-readable lines scripts grep for by their "::" marker,
// in rds-tools' column order: a header of name:unit fields, then one row a second with the run's
// figures, every RDS counter's change per second (read with getsockopt(RDS_INFO_COUNTERS), as
// rds-tools reads the kernel's) and the host's CPU split from /proc/stat.

/** The run's own columns, named as rds-tools names them (its header lists one RDMA column for two values). */
const RUN_FIELDS =
  'nr_tasks:count,req_size:bytes,ack_size:bytes,rdma_size:bytes,req_sent:count,thruput:kB/s,thruput_rdma:kB/s,tx_delay:microseconds,rtt:microseconds,cpu:percent';
const CPU_FIELDS = 'user:percent,system:percent,idle:percent,irq:percent,intr:count';

/** A C printf %f: six decimals. */
const f = (v: number): string => (Number.isFinite(v) ? v : 0).toFixed(6);

/** The counters of the socket's node as [name, value] pairs, read the way rds-tools reads them. */
export function readCounters(sock: RdsSocket): [string, number][] {
  let buf = Buffer.alloc(0);
  let r: { recordSize: number; length: number } | null = null;
  // At most a few rounds: the counter set is fixed, but a probe comes first.
  for (let i = 0; i < 4 && r === null; i++) {
    try {
      r = sock.getsockopt(constants.SOL_RDS, constants.RDS_INFO_COUNTERS, buf);
    } catch (e) {
      if (!(e instanceof RdsInfoSpaceError)) throw e;
      buf = Buffer.alloc(e.length);
    }
  }
  if (r === null) throw new Error('RDS_INFO_COUNTERS kept growing');
  const out: [string, number][] = [];
  for (let off = 0; off < r.length; off += r.recordSize) {
    const name = buf.subarray(off, off + 32);
    const z = name.indexOf(0);
    out.push([name.toString('latin1', 0, z < 0 ? 32 : z), Number(buf.readBigUInt64LE(off + 32))]);
  }
  return out;
}

/** /proc/stat's first cpu line (user, nice, system, idle, iowait, irq, softirq, ...) and intr total; null off Linux. */
function procStat(): { times: number[]; intr: number } | null {
  let text: string;
  try {
    text = readFileSync('/proc/stat', 'latin1');
  } catch {
    return null;
  }
  const cpu = /^cpu\s+(.*)$/m.exec(text);
  const intr = /^intr\s+(\d+)/m.exec(text);
  if (cpu === null) return null;
  return { times: cpu[1]!.trim().split(/\s+/).map(Number), intr: intr === null ? 0 : Number(intr[1]) };
}

/** What one perfdata row reports of the run (rds-stress's per-second figures). */
export interface PerfdataRun {
  nrTasks: number;
  reqSize: number;
  ackSize: number;
  rdmaSize: number;
  reqSent: number;
  /** kB/s of requests and acks. */
  thruput: number;
  /** kB/s RDMA in and out (0: no RDMA here). */
  rdmaIn: number;
  rdmaOut: number;
  txDelayUs: number;
  rttUs: number;
  cpuPercent: number;
}

/** The header and the rows; each row reports the change since the previous call. */
export class Perfdata {
  private prev: [string, number][];
  private prevAt = performance.now();
  private prevStat = procStat();

  constructor(private readonly sock: RdsSocket) {
    this.prev = readCounters(sock);
  }

  header(): string {
    const counters = this.prev.map(([n]) => `${n}:${n.includes('_bytes') ? 'bytes' : 'count'}`);
    return `::${[RUN_FIELDS, ...counters, CPU_FIELDS].join(',')}`;
  }

  row(r: PerfdataRun): string {
    const now = performance.now();
    const cur = readCounters(this.sock);
    const perSec = 1000 / Math.max(1, now - this.prevAt);
    const rates = cur.map(([, v], i) => f((v - (this.prev[i]?.[1] ?? 0)) * perSec));
    const stat = procStat();
    const cpu = cpuSplit(this.prevStat, stat);
    this.prev = cur;
    this.prevAt = now;
    this.prevStat = stat;
    const run = [
      r.nrTasks,
      r.reqSize,
      r.ackSize,
      r.rdmaSize,
      r.reqSent,
      f(r.thruput),
      f(r.rdmaIn),
      f(r.rdmaOut),
      f(r.txDelayUs),
      f(r.rttUs),
      f(Math.max(r.cpuPercent, 0)),
    ];
    return `::${[...run, ...rates, ...cpu].join(',')}`;
  }
}

/** user+nice, system, idle+iowait, irq+softirq as percent of the ticks between two samples, and interrupts. */
function cpuSplit(a: ReturnType<typeof procStat>, b: ReturnType<typeof procStat>): string[] {
  if (a === null || b === null) return [f(0), f(0), f(0), f(0), '0'];
  const d = b.times.map((v, i) => v - (a.times[i] ?? 0));
  const sum = d.reduce((x, y) => x + y, 0);
  const pct = (v: number): string => f(sum > 0 ? (v * 100) / sum : 0);
  const t = (i: number): number => d[i] ?? 0;
  return [pct(t(0) + t(1)), pct(t(2)), pct(t(3) + t(4)), pct(t(5) + t(6)), String(b.intr - a.intr)];
}
