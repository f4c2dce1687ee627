// RDS's RDMA operations on a transport that carries them (IB): a socket's memory regions
// (rs_rdma_keys in the kernel's rdma.c), the RDMA op a message carries, and its completion status.
// The transport posts the op; what is decided here is transport-independent.
import {
  RDS_RDMA_CANCELED,
  RDS_RDMA_DROPPED,
  RDS_RDMA_OTHER_ERROR,
  RDS_RDMA_READWRITE,
  RDS_RDMA_REMOTE_ERROR,
  RDS_RDMA_SUCCESS,
  RDS_RDMA_USE_ONCE,
} from '../constants.js';
import { RdsError } from '../errors.js';
import type { RdsExtension } from '../wire/extensions.js';
import { cookieOffset, cookieRkey, rdmaCookie, rdmaDestExtension, rdmaExtension } from '../wire/rdma-ext.js';
import {
  checkAtomicArgs,
  checkCookie,
  checkRdmaArgs,
  checkRdmaMap,
  checkRdmaMapMix,
  refuseMaskedAtomic,
  type RdmaMapArgs,
} from './rdma.js';
import type { SendmsgOptions } from './socket-types.js';

/** What a transport offers for RDMA: memory registration in the device's protection domain. */
export interface RdmaTransport {
  /**
   * Registers `mem` for the device owning `laddr`, zero-based from the start of its first page
   * (its first byte at `offset`); remote write with readWrite.
   */
  regMr(laddr: string, mem: Uint8Array, readWrite: boolean): { handle: number; rkey: number; offset: number };
  deregMr(handle: number): void;
  /** Whether the device owning `laddr` does 64-bit atomics (FADD, CSWP). */
  atomics(laddr: string): boolean;
}

/** Who hears an op's status: the sending socket (RDS_CMSG_RDMA_STATUS through recvmsg). */
export interface RdmaNotifyTarget {
  /** RDS_RECVERR: failures are reported even without notify. */
  readonly reportsFailures: boolean;
  rdmaDone(token: bigint, status: number): void;
}

/**
 * An RDMA READ or WRITE riding on a message (RDS_CMSG_RDMA_ARGS). Posted once, before the
 * message's SEND; never retransmitted: a message whose op was posted on a carrier that went away
 * is dropped (RDS_RDMA_DROPPED), as the kernel drops it.
 */
export class RdmaOp {
  /** queued: not posted yet; posted: work requests on the wire; done: status known (reported once). */
  state: 'queued' | 'posted' | 'done' = 'queued';
  readonly rkey: number;
  /** Where on the peer the op starts: the cookie's offset plus remoteOffset (the MR is zero-based). */
  readonly remoteAddr: bigint;

  /** Atomics: 2 fetch-and-add, 3 compare-and-swap (the addon's kinds); 0 for READ/WRITE. */
  atomicKind = 0;
  compareAdd = 0n;
  swap = 0n;
  /**
   * RDS_RDMA_SILENT on a message with no payload: no SEND at all, only the op (rds_send_xmit's
   * "all ops are silent"); the message is done when the op is.
   */
  silent = false;
  /** Told once when the status is known (the transport completes a silent op's message). */
  onFinish: (() => void) | null = null;

  constructor(
    readonly cookie: bigint,
    remoteOffset: number,
    readonly local: readonly Uint8Array[],
    readonly write: boolean,
    readonly notify: boolean,
    readonly fence: boolean,
    readonly token: bigint,
    readonly bytes: number,
    private readonly target: RdmaNotifyTarget,
  ) {
    this.rkey = cookieRkey(cookie);
    this.remoteAddr = BigInt(cookieOffset(cookie)) + BigInt(remoteOffset);
  }

  /** The status is known: reported if notify was asked for, or it failed and RDS_RECVERR is set. */
  finish(status: number): void {
    if (this.state === 'done') return;
    this.state = 'done';
    const then = this.onFinish;
    this.onFinish = null;
    then?.();
    if (this.notify || (status !== RDS_RDMA_SUCCESS && this.target.reportsFailures))
      this.target.rdmaDone(this.token, status);
  }
}

/** An ibv_wc_status as RDS reports it (the kernel's rds_ib_send_unmap_op mapping). */
export function rdmaStatusOf(wcStatus: number): number {
  if (wcStatus === 0) return RDS_RDMA_SUCCESS;
  if (wcStatus === 10) return RDS_RDMA_REMOTE_ERROR; // IBV_WC_REM_ACCESS_ERR
  if (wcStatus === 5) return RDS_RDMA_DROPPED; // IBV_WC_WR_FLUSH_ERR: the connection went down first
  return RDS_RDMA_OTHER_ERROR;
}

interface Region {
  handle: number;
  flags: number;
  mem: Uint8Array;
}

/** A socket's memory regions by rkey (the kernel's rs_rdma_keys). */
export class MrTable {
  private readonly byKey = new Map<number, Region>();

  constructor(private readonly transport: RdmaTransport) {}

  get size(): number {
    return this.byKey.size;
  }

  /**
   * RDS_GET_MR: the cookie, (offset << 32) + rkey, as the kernel builds it: the region is
   * registered from the start of the buffer's first page, the offset says where the buffer begins.
   */
  register(laddr: string, mem: Uint8Array, flags: number): bigint {
    const { handle, rkey, offset } = this.transport.regMr(laddr, mem, (flags & RDS_RDMA_READWRITE) !== 0);
    const old = this.byKey.get(rkey);
    if (old !== undefined) {
      // An rkey the device reused while we still hold it cannot happen; refuse rather than alias.
      this.transport.deregMr(handle);
      throw new RdsError('EINVAL', `the device returned rkey 0x${rkey.toString(16)} twice`);
    }
    this.byKey.set(rkey, { handle, flags, mem });
    return rdmaCookie(rkey, offset);
  }

  has(cookie: bigint): boolean {
    return this.byKey.has(cookieRkey(cookie));
  }

  /** RDS_FREE_MR: false if the cookie names no region of the socket. */
  free(cookie: bigint): boolean {
    return this.release(cookieRkey(cookie));
  }

  /** exthdr RDMA from the peer (rds_rdma_unuse): a USE_ONCE region is done after that op. */
  used(rkey: number): void {
    const r = this.byKey.get(rkey);
    if (r !== undefined && (r.flags & RDS_RDMA_USE_ONCE) !== 0) this.release(rkey);
  }

  /** Socket close: every region goes. */
  clear(): void {
    for (const k of [...this.byKey.keys()]) this.release(k);
  }

  private release(rkey: number): boolean {
    const r = this.byKey.get(rkey);
    if (r === undefined) return false;
    this.byKey.delete(rkey);
    this.transport.deregMr(r.handle);
    return true;
  }
}

/** RDS_CMSG_RDMA_MAP, checked: the region to register when the message is queued (mapRegion). */
export interface RdmaMapRequest {
  args: RdmaMapArgs;
  buffer: Uint8Array;
  flags: number;
}

/** What a message's RDMA control messages come to: its extension records, the op it starts, the region it maps. */
export interface RdmaControl {
  exts: RdsExtension[];
  op: RdmaOp | null;
  /** rdmaMap: registered by mapRegion once nothing can refuse the message; its RDMA_DEST record is added then. */
  map: RdmaMapRequest | null;
}

/**
 * RDS_CMSG_RDMA_ARGS / RDS_CMSG_RDMA_DEST / RDS_CMSG_RDMA_MAP / RDS_CMSG_ATOMIC_* on a transport
 * with RDMA, checked in rds_sendmsg's order: the extension records the message carries, the op it
 * starts (if any), the region it maps (if any; registered later, by mapRegion). Masked atomics
 * are EOPNOTSUPP before anything else.
 */
export function prepareRdmaControl(
  opts: SendmsgOptions,
  mrs: MrTable | null,
  target: RdmaNotifyTarget,
  atomics?: () => boolean,
): RdmaControl {
  if (opts.atomic !== undefined) refuseMaskedAtomic(opts.atomic);
  checkRdmaMapMix(opts);
  if (opts.rdmaMap !== undefined) {
    const { buffer, flags } = checkRdmaMap(opts.rdmaMap);
    return { exts: [], op: null, map: { args: opts.rdmaMap, buffer, flags } };
  }
  if (opts.atomic !== undefined) {
    if (opts.rdma !== undefined || opts.rdmaDest !== undefined)
      throw new RdsError(
        'EINVAL',
        'atomic cannot go with rdma or rdmaDest in one message here (one RDMA or atomic op per message)',
      );
    const a = checkAtomicArgs(opts.atomic);
    const op = new RdmaOp(a.cookie, a.remoteOffset, [a.local], false, a.notify, false, a.token, 8, target);
    if ((op.remoteAddr & 7n) !== 0n)
      throw new RdsError(
        'EINVAL',
        `atomic: the word must be 8-byte aligned in the peer's region (cookie offset + remoteOffset = ${op.remoteAddr})`,
      );
    if (atomics !== undefined && !atomics())
      throw new RdsError('EOPNOTSUPP', 'atomic: the RDMA device of this socket does not do 64-bit atomics');
    op.atomicKind = a.op === 'fadd' ? 2 : 3;
    op.compareAdd = a.compareAdd;
    op.swap = a.swap;
    return { exts: [rdmaExtension(op.rkey)], op, map: null };
  }
  if (opts.rdma !== undefined && opts.rdmaDest !== undefined)
    throw new RdsError(
      'EINVAL',
      'rdma and rdmaDest cannot go in one message (RDS_CMSG_RDMA_ARGS with RDS_CMSG_RDMA_DEST)',
    );
  if (opts.rdma !== undefined) {
    const a = checkRdmaArgs(opts.rdma);
    const op = new RdmaOp(
      a.cookie,
      a.remoteOffset ?? 0,
      a.local.slice(),
      a.write,
      a.notify === true,
      a.fence === true,
      a.token ?? 0n,
      a.bytes,
      target,
    );
    op.silent = a.silent === true;
    // exthdr RDMA: tells the peer which of its regions the op used (it frees a USE_ONCE one).
    return { exts: [rdmaExtension(op.rkey)], op, map: null };
  }
  const cookie = checkCookie(opts.rdmaDest, 'rdmaDest');
  if (mrs === null || !mrs.has(cookie))
    throw new RdsError(
      'EINVAL',
      `rdmaDest 0x${cookie.toString(16)} names no memory region of this socket (register one with getMr() first)`,
    );
  return { exts: [rdmaDestExtension(cookie)], op: null, map: null };
}

/**
 * RDS_CMSG_RDMA_MAP, once every check of the send has passed: registers the region in `mrs` (as
 * getMr() does), writes its cookie to `rdmaMap.cookie` and returns the RDMA_DEST record that
 * exposes it. A cookie that cannot be written releases the region again (EINVAL), so a refused
 * call leaves nothing registered.
 */
export function mapRegion(mrs: MrTable, laddr: string, map: RdmaMapRequest): RdsExtension {
  const cookie = mrs.register(laddr, map.buffer, map.flags);
  try {
    map.args.cookie = cookie;
  } catch {
    mrs.free(cookie);
    throw new RdsError(
      'EINVAL',
      'rdmaMap must be a writable object: sendmsg() writes the region cookie to rdmaMap.cookie',
    );
  }
  return rdmaDestExtension(cookie);
}

/** The status of an op whose message was cancelled (RDS_CANCEL_SENT_TO, SO_SNDTIMEO, close). */
export const RDMA_CANCELED = RDS_RDMA_CANCELED;
