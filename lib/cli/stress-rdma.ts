/**
 * rds-stress -D: an RDMA op with each request, as rds-tools 2.0.7 runs it (docs/rds-stress-rdma.md).
 * The requester exposes a buffer of its own with the REQ (RDS_CMSG_RDMA_MAP, or RDS_GET_MR and
 * RDS_CMSG_RDMA_DEST with --rdma-use-get-mr) and says in the header which op it wants; the side
 * that answers posts that op with its ACK (RDS_CMSG_RDMA_ARGS with RDS_RDMA_NOTIFY_ME, a fence
 * before a READ's ACK) and echoes the RDMA fields; the requester frees the region when the ACK
 * comes. One StressRdma per local task (socket), holding its state per remote task.
 */
import { constants, type RdmaMapArgs, type RdsSocket, type SendmsgOptions } from '../index.js';

export const RDMA_OP_READ = 1;
export const RDMA_OP_WRITE = 2;
/** -I: rds-tools takes at most this many buffers per op. */
export const RDMA_MAX_VECTOR = 512;

/** The RDMA fields of the 63-byte header (offsets 19..59). */
export interface RdmaFields {
  op: number;
  /** The requester's own name for its buffer; the answering side only echoes it. */
  addr: bigint;
  /** Where in the region the op starts (rds-tools: 0; added to the cookie's offset). */
  phyaddr: bigint;
  pattern: bigint;
  key: bigint;
  size: number;
  vector: number;
}

export function encodeRdmaFields(msg: Buffer, f: RdmaFields): void {
  msg.writeUInt8(f.op, 19);
  msg.writeBigUInt64BE(f.addr, 20);
  msg.writeBigUInt64BE(f.phyaddr, 28);
  msg.writeBigUInt64BE(f.pattern, 36);
  msg.writeBigUInt64BE(f.key, 44);
  msg.writeUInt32BE(f.size, 52);
  msg.writeUInt32BE(f.vector, 56);
}

export function decodeRdmaFields(msg: Buffer): RdmaFields {
  return {
    op: msg.readUInt8(19),
    addr: msg.readBigUInt64BE(20),
    phyaddr: msg.readBigUInt64BE(28),
    pattern: msg.readBigUInt64BE(36),
    key: msg.readBigUInt64BE(44),
    size: msg.readUInt32BE(52),
    vector: msg.readUInt32BE(56),
  };
}

/** rds_fill_buffer: the pattern as 64-bit words of the machine (little-endian here) over `size` bytes. */
export function fillPattern(buf: Buffer, size: number, pattern: bigint): void {
  for (let at = 0; at + 8 <= size; at += 8) buf.writeBigUInt64LE(pattern, at);
}

/** The first word of `buf` (within `size` bytes) that is not `pattern`, or -1. */
export function patternMismatch(buf: Buffer, size: number, pattern: bigint): number {
  for (let at = 0; at + 8 <= size; at += 8) if (buf.readBigUInt64LE(at) !== pattern) return at;
  return -1;
}

/** The RDMA settings of a run (from the options struct, which both sides share). */
export interface RdmaConfig {
  size: number;
  vector: number;
  depth: number;
  /** 0: alternate READ and WRITE, 1: READ only, 2: WRITE only (-M). */
  rwMode: number;
  useOnce: boolean;
  useGetMr: boolean;
  useFence: boolean;
  cacheMrs: boolean;
  verify: boolean;
}

/** Bytes of RDMA buffers a run holds in this process: two per request slot per task pair (rds-tools' layout). */
export function rdmaBufferBytes(c: { size: number; vector: number; depth: number }, nrTasks: number): number {
  return nrTasks * nrTasks * c.depth * 2 * c.size * c.vector;
}

interface Requested {
  op: number;
  cookie: bigint;
  pattern: bigint;
}

interface Issued {
  op: number;
  pattern: bigint;
}

/** One remote task's RDMA state (rds-tools' rdma_buf / local_buf / rdma_req_key / rdma_inflight). */
class Peer {
  /** Exposed to the remote task with our requests, one per request slot. */
  readonly exposed: Buffer[];
  /** The local side of the ops we post for its requests, one per ack slot. */
  readonly local: Buffer[];
  /** --rdma-use-get-mr: the slot's region (kept with --rdma-cache-mrs). */
  readonly keys: bigint[];
  /** What each of our outstanding requests asked for. */
  readonly requested: (Requested | null)[];
  /** What each of its requests asks of us, until the ACK that posts it. */
  readonly asked: (RdmaFields | null)[];
  /** Ops posted and not completed, per ack slot. */
  readonly inflight: (Issued | null)[];
  nextOp: number;

  constructor(c: RdmaConfig, remoteIndex: number) {
    const bytes = c.size * c.vector;
    // rds-tools fills its RDMA memory with 0x2f first.
    this.exposed = Array.from({ length: c.depth }, () => Buffer.alloc(bytes, 0x2f));
    this.local = Array.from({ length: c.depth }, () => Buffer.alloc(bytes, 0x2f));
    this.keys = new Array<bigint>(c.depth).fill(0n);
    this.requested = new Array<Requested | null>(c.depth).fill(null);
    this.asked = new Array<RdmaFields | null>(c.depth).fill(null);
    this.inflight = new Array<Issued | null>(c.depth).fill(null);
    // rds-tools starts odd remote tasks on READ, even ones on WRITE, and toggles before each use.
    this.nextOp = remoteIndex & 1 ? RDMA_OP_READ : RDMA_OP_WRITE;
  }
}

/** What the sender of a message adds for RDMA: header fields and sendmsg options. */
export interface RdmaSend {
  sendOpts: Pick<SendmsgOptions, 'rdmaMap' | 'rdmaDest' | 'rdma'>;
  /** Called once the message is queued. */
  sent(): void;
}

/** The RDMA side of one local task. A peer's mistake throws an Error whose message is the run's fatal report. */
export class StressRdma {
  readonly peers: Peer[];
  /** The last failed op's report (see completed()); rds-stress prints it after the failed-op count. */
  lastFailure: string | null = null;

  /** `stats` counts the bytes RDMA moved into our memory (mbi) and out of it (mbo). */
  constructor(
    private readonly sock: RdsSocket,
    private readonly c: RdmaConfig,
    nrTasks: number,
    private readonly stats: { rdmaIn: number; rdmaOut: number; rdmaFailed: number },
  ) {
    this.peers = Array.from({ length: nrTasks }, (_, j) => new Peer(c, j));
  }

  private mrFlags(): number {
    return constants.RDS_RDMA_READWRITE | (this.c.useOnce ? constants.RDS_RDMA_USE_ONCE : 0);
  }

  /** A REQ to remote task j in `slot` (rds_build_req and send_msg's REQ part); null: no RDMA on it. */
  request(j: number, slot: number, sendSeq: number, msg: Buffer): RdmaSend | null {
    const p = this.peers[j]!;
    const c = this.c;
    // rds-tools starts RDMA after the first ten messages to a task.
    if (sendSeq <= 10) {
      p.requested[slot] = null;
      return null;
    }
    p.nextOp = c.rwMode === 1 ? RDMA_OP_READ : c.rwMode === 2 ? RDMA_OP_WRITE : 3 - p.nextOp;
    const op = p.nextOp;
    const pattern = (BigInt(sendSeq >>> 0) << 32n) | BigInt(process.pid >>> 0);
    const buf = p.exposed[slot]!;
    // A READ fetches the pattern from us; a WRITE must bring it into zeros.
    if (c.verify) fillPattern(buf, c.size, op === RDMA_OP_READ ? pattern : 0n);
    if (c.useGetMr && p.keys[slot] === 0n) p.keys[slot] = this.sock.getMr(buf, { flags: this.mrFlags() });
    const key = p.keys[slot]!;
    encodeRdmaFields(msg, {
      op,
      addr: BigInt(j * c.depth + slot),
      phyaddr: 0n,
      pattern,
      key,
      size: c.size,
      vector: c.vector,
    });
    const map: RdmaMapArgs | undefined = key === 0n ? { buffer: buf, flags: this.mrFlags() } : undefined;
    return {
      sendOpts: map ? { rdmaMap: map } : { rdmaDest: key },
      sent: () => {
        p.requested[slot] = { op, cookie: map ? map.cookie! : key, pattern };
        if (!c.cacheMrs) p.keys[slot] = 0n;
      },
    };
  }

  /** A REQ from remote task j arrived in `slot` (recv_one's REQ part): what to do with its ACK. */
  requestReceived(j: number, slot: number, msg: Buffer, rdmaDest: bigint | undefined): void {
    const f = decodeRdmaFields(msg);
    if (rdmaDest !== undefined) f.key = rdmaDest;
    const p = this.peers[j]!;
    p.asked[slot] = null;
    if (f.key === 0n) return;
    // rdma_validate
    if (f.size !== this.c.size) throw new Error(`Unexpected RDMA size ${f.size} in request`);
    if (f.vector !== this.c.vector) throw new Error(`Unexpected RDMA vector ${f.vector} in request ${this.c.vector}`);
    if (f.op !== RDMA_OP_READ && f.op !== RDMA_OP_WRITE) throw new Error(`Unexpected RDMA op ${f.op} in request`);
    if (f.phyaddr > 0xffffffffn)
      throw new Error(`RDMA offset 0x${f.phyaddr.toString(16)} in request is beyond 32 bits`);
    p.asked[slot] = f;
  }

  /**
   * The ACK to remote task j for `slot`: its RDMA fields and op, 'drain' while the slot's previous
   * op has not completed (rds-tools' EBADSLT: the task waits for the status), null without RDMA.
   */
  ack(j: number, slot: number, sendSeq: number, msg: Buffer): RdmaSend | 'drain' | null {
    const p = this.peers[j]!;
    const f = p.asked[slot];
    if (f === null || f === undefined) return null;
    if (p.inflight[slot] !== null) return 'drain';
    const c = this.c;
    encodeRdmaFields(msg, f);
    const buf = p.local[slot]!;
    const write = f.op === RDMA_OP_WRITE;
    if (write && c.verify) fillPattern(buf, f.size, f.pattern);
    const local = Array.from({ length: f.vector }, (_, v) => buf.subarray(v * f.size, (v + 1) * f.size));
    const token = (BigInt(sendSeq >>> 0) << 32n) | BigInt(((j * c.depth + slot) << 2) >>> 0);
    return {
      sendOpts: {
        rdma: {
          cookie: f.key,
          remoteOffset: Number(f.phyaddr),
          local,
          write,
          notify: true,
          fence: !write && c.useFence,
          token,
        },
      },
      sent: () => {
        p.inflight[slot] = { op: f.op, pattern: f.pattern };
        p.asked[slot] = null;
        if (write) this.stats.rdmaOut += c.size;
        else this.stats.rdmaIn += c.size;
      },
    };
  }

  /** An RDMA status on our socket (rdma_mark_completed); returns the remote task it frees. */
  completed(token: bigint, status: number): number {
    const c = this.c;
    const index = Number((token & 0xffffffffn) >> 2n);
    const j = Math.floor(index / c.depth);
    const slot = index % c.depth;
    const p = this.peers[j];
    const op = p?.inflight[slot];
    if (p === undefined || op === null || op === undefined)
      throw new Error(`RDMA status for token 0x${token.toString(16)}, which names no op of ours`);
    p.inflight[slot] = null;
    if (status !== constants.RDS_RDMA_SUCCESS) {
      // Counted and reported at the end, not fatal (rds-tools logs it and goes on): the peer's run
      // ends first and its regions go with its stack while our last ops (at most tasks x tasks x depth: depth per remote task)
      // are still on the wire, so a failed op at the end is the normal end of a run.
      this.stats.rdmaFailed++;
      this.lastFailure = `RDMA ${op.op === RDMA_OP_WRITE ? 'write' : 'read'} for remote task ${j} failed: ${statusName(status)}`;
      return j;
    }
    // A fenced READ is complete when its ACK leaves; then our copy must be what the requester set.
    if (op.op === RDMA_OP_READ && c.verify && c.useFence) {
      const at = patternMismatch(p.local[slot]!, c.size, op.pattern);
      if (at >= 0)
        throw new Error(
          `RDMA read from remote task ${j} brought wrong data at offset ${at}: expected ${op.pattern.toString(16)}, got ${p.local[slot]!.readBigUInt64LE(at).toString(16)}`,
        );
    }
    return j;
  }

  /** The ACK of our REQ in `slot` arrived (rdma_process_ack). */
  ackReceived(j: number, slot: number, msg: Buffer): void {
    const p = this.peers[j]!;
    const want = p.requested[slot];
    p.requested[slot] = null;
    const f = decodeRdmaFields(msg);
    if (want === null || want === undefined) {
      if (f.key !== 0n) throw new Error(`an ACK carries RDMA key 0x${f.key.toString(16)} for a request without RDMA`);
      return;
    }
    if (f.key !== want.cookie || f.op !== want.op)
      throw new Error(
        `the ACK of an RDMA request carries key 0x${f.key.toString(16)} op ${f.op}, the request had key 0x${want.cookie.toString(16)} op ${want.op}`,
      );
    if (!this.c.useOnce && !this.c.cacheMrs) this.sock.freeMr(want.cookie);
    if (want.op === RDMA_OP_WRITE) {
      this.stats.rdmaIn += this.c.size;
      if (this.c.verify) {
        const at = patternMismatch(p.exposed[slot]!, this.c.size, want.pattern);
        if (at >= 0)
          throw new Error(
            `RDMA write from remote task ${j} left wrong data at offset ${at}: expected ${want.pattern.toString(16)}, got ${p.exposed[slot]!.readBigUInt64LE(at).toString(16)}`,
          );
      }
    } else {
      this.stats.rdmaOut += this.c.size;
    }
  }
}

function statusName(s: number): string {
  switch (s) {
    case constants.RDS_RDMA_REMOTE_ERROR:
      return 'remote error';
    case constants.RDS_RDMA_CANCELED:
      return 'operation was cancelled';
    case constants.RDS_RDMA_DROPPED:
      return 'operation was dropped';
    case constants.RDS_RDMA_OTHER_ERROR:
      return 'other error';
    default:
      return `unknown status ${s}`;
  }
}
