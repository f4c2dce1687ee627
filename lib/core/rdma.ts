// RDS's RDMA operations (rds-rdma(7), the kernel's net/rds/rdma.c): argument checks made as the
// kernel makes them, and the answer a transport without RDMA gives. Kept out of the socket
// classes so they only route calls here.
import {
  RDS_MAX_MSG_SIZE,
  RDS_RDMA_INVALIDATE,
  RDS_RDMA_READWRITE,
  RDS_RDMA_USE_ONCE,
  RDS_TRANS_TCP,
} from '../constants.js';
import { RdsError } from '../errors.js';
import type { SendmsgOptions } from './socket-types.js';

/** RDS_GET_MR / RDS_GET_MR_FOR_DEST arguments besides the memory. */
export interface GetMrOptions {
  /** RDS_RDMA_USE_ONCE, RDS_RDMA_INVALIDATE, RDS_RDMA_READWRITE (or'ed); default 0. */
  flags?: number;
  /** RDS_GET_MR_FOR_DEST: the peer the region is for. */
  dest?: { address: string; port: number };
}

/**
 * RDS_CMSG_RDMA_MAP as sendmsg() takes it (the kernel's struct rds_get_mr_args): register
 * `buffer` as getMr() does and expose it to the peer with this message, as `rdmaDest` does.
 */
export interface RdmaMapArgs {
  /** The memory to register (at most RDS_MAX_MSG_SIZE bytes); the socket references it until released. */
  buffer: Uint8Array;
  /** RDS_RDMA_USE_ONCE, RDS_RDMA_INVALIDATE, RDS_RDMA_READWRITE (or'ed); default 0. */
  flags?: number;
  /**
   * Written by sendmsg() once the message is queued: the region's cookie, the value getMr() would
   * have returned (the kernel writes it to cookie_addr). Left unset when the send is refused.
   */
  cookie?: bigint;
}

/** RDS_FREE_MR arguments besides the cookie. */
export interface FreeMrOptions {
  /** RDS_RDMA_INVALIDATE: invalidate the mapping now (with cookie 0n: every MR of the socket). */
  invalidate?: boolean;
}

/** RDS_CMSG_RDMA_ARGS as sendmsg() takes it. */
export interface RdmaArgs {
  /** The peer's MR cookie (from RDS_CMSG_RDMA_DEST on a message it sent, or out of band). */
  cookie: bigint;
  /** Where in the peer's exposed memory the op starts (added to the cookie's offset); default 0. */
  remoteOffset?: number;
  /**
   * Local memory the op reads into (READ) or writes from (WRITE); registered for the op's duration
   * (at most 8 buffers per work request); the caller keeps it until the status.
   */
  local: readonly Uint8Array[];
  /** true: RDMA WRITE to the peer (RDS_RDMA_READWRITE); false: RDMA READ from it. */
  write: boolean;
  /** RDS_RDMA_NOTIFY_ME: report the op's completion through recvmsg's `rdmaStatus`. */
  notify?: boolean;
  /**
   * RDS_RDMA_SILENT: with an empty message, only the op happens: no SEND, the peer's socket
   * receives nothing (as the kernel's rds_send_xmit). A message with payload is sent as usual.
   */
  silent?: boolean;
  /** RDS_RDMA_FENCE: the SEND waits for the RDMA op. */
  fence?: boolean;
  /** user_token: names the op in its status; default 0n. */
  token?: bigint;
}

/** RDS_CMSG_ATOMIC_FADD / RDS_CMSG_ATOMIC_CSWP as sendmsg() takes them (unmasked forms only; see MaskedAtomicArgs). */
export interface AtomicArgs {
  /** 'fadd': add `add` to the peer's 64-bit word; 'cswp': if it equals `compare`, put `swap` there. */
  op: 'fadd' | 'cswp';
  /** The peer's MR cookie (a region it registered with RDS_RDMA_READWRITE). */
  cookie: bigint;
  /** Where the word is in the peer's region (added to the cookie's offset); the address must be 8-byte aligned. */
  remoteOffset?: number;
  /** 8 bytes that receive the word's value from before the op (host byte order of the device). */
  local: Uint8Array;
  /** fadd: the addend (u64, wraps). */
  add?: bigint;
  /** cswp: the value compared with the word. */
  compare?: bigint;
  /** cswp: the value stored when they are equal. */
  swap?: bigint;
  /** RDS_RDMA_NOTIFY_ME: report the op's completion through recvmsg's `rdmaStatus`. */
  notify?: boolean;
  /** user_token: names the op in its status; default 0n. */
  token?: bigint;
}

/**
 * RDS_CMSG_MASKED_ATOMIC_FADD / RDS_CMSG_MASKED_ATOMIC_CSWP: not supported by rds-socket. sendmsg()
 * and send() throw EOPNOTSUPP for them before any other check or effect (Soft-RoCE and most verbs
 * providers refuse masked atomics); use 'fadd' / 'cswp'. Typed so that code written for the
 * kernel's API compiles and gets that answer.
 */
export interface MaskedAtomicArgs extends Omit<AtomicArgs, 'op'> {
  op: 'masked-fadd' | 'masked-cswp';
  /** masked-cswp: the bits of the word compared. */
  compareMask?: bigint;
  /** masked-cswp: the bits of the word swapped. */
  swapMask?: bigint;
  /** masked-fadd: the bit positions whose carry does not propagate. */
  nocarryMask?: bigint;
}

/**
 * Masked atomics (RDS_CMSG_MASKED_ATOMIC_*) are refused with EOPNOTSUPP before anything else;
 * anything that is not a masked op passes (checkAtomicArgs judges it).
 */
export function refuseMaskedAtomic(a: unknown): void {
  if (a === null || typeof a !== 'object') return;
  const op = (a as { op?: unknown }).op;
  if (op === 'masked-fadd' || op === 'masked-cswp')
    throw new RdsError(
      'EOPNOTSUPP',
      `atomic.op '${op}' (RDS_CMSG_MASKED_ATOMIC_${op === 'masked-fadd' ? 'FADD' : 'CSWP'}): masked atomics are not supported by rds-socket (Soft-RoCE and most verbs providers refuse them); use 'fadd' or 'cswp'`,
    );
}

/** An atomic op's arguments, checked (the remote alignment is checked once the cookie's offset is known). */
export function checkAtomicArgs(a: unknown): Required<Omit<AtomicArgs, 'add' | 'compare' | 'swap'>> & {
  compareAdd: bigint;
  swap: bigint;
} {
  if (a === null || typeof a !== 'object')
    throw new RdsError('EINVAL', "atomic must be an object { op: 'fadd' | 'cswp', cookie, local, ... }");
  refuseMaskedAtomic(a);
  const r = a as AtomicArgs;
  if (r.op !== 'fadd' && r.op !== 'cswp')
    throw new RdsError('EINVAL', `atomic.op must be 'fadd' or 'cswp', got ${String(r.op)}`);
  checkCookie(r.cookie, 'atomic.cookie');
  if (!isBytes(r.local) || r.local.byteLength !== 8)
    throw new RdsError('EINVAL', 'atomic.local must be an 8-byte Buffer (it receives the old value of the word)');
  const off = r.remoteOffset ?? 0;
  if (typeof off !== 'number' || !Number.isInteger(off) || off < 0 || off > 0xffffffff)
    throw new RdsError('EINVAL', `atomic.remoteOffset must be an integer 0..2^32-1, got ${String(off)}`);
  const u64 = (v: unknown, what: string): bigint => (v === undefined ? 0n : checkCookie(v, what));
  const compareAdd = r.op === 'fadd' ? u64(r.add, 'atomic.add') : u64(r.compare, 'atomic.compare');
  const swap = u64(r.swap, 'atomic.swap');
  if (r.notify !== undefined && typeof r.notify !== 'boolean')
    throw new RdsError('EINVAL', 'atomic.notify must be a boolean');
  if (r.token !== undefined) checkCookie(r.token, 'atomic.token');
  return {
    op: r.op,
    cookie: r.cookie,
    remoteOffset: off,
    local: r.local,
    notify: r.notify === true,
    token: r.token ?? 0n,
    compareAdd,
    swap,
  };
}

const MR_FLAGS = RDS_RDMA_USE_ONCE | RDS_RDMA_INVALIDATE | RDS_RDMA_READWRITE;
const U64_MAX = (1n << 64n) - 1n;
/** UIO_MAXIOV: the most local iovecs one RDMA op takes (more is EMSGSIZE, as in rds_rdma_pages). */
export const RDS_RDMA_MAX_IOV = 1024;

function isBytes(v: unknown): v is Uint8Array {
  return v instanceof Uint8Array;
}

export function checkCookie(cookie: unknown, what: string): bigint {
  if (typeof cookie !== 'bigint' || cookie < 0n || cookie > U64_MAX)
    throw new RdsError('EINVAL', `${what} must be a u64 bigint (the cookie getMr() returned), got ${String(cookie)}`);
  return cookie;
}

/**
 * The memory and flags of RDS_GET_MR, checked as __rds_rdma_map checks them; `what` names the call
 * in the messages (getMr(), or sendmsg's rdmaMap, which takes the same arguments).
 */
export function checkGetMr(
  buffer: unknown,
  opts: GetMrOptions | undefined,
  what = 'getMr()',
): { buffer: Uint8Array; flags: number } {
  if (!isBytes(buffer)) throw new RdsError('EINVAL', `${what} needs a Buffer or Uint8Array to register`);
  if (buffer.byteLength === 0) throw new RdsError('EINVAL', `${what} cannot register an empty buffer`);
  if (buffer.byteLength > RDS_MAX_MSG_SIZE)
    throw new RdsError(
      'EMSGSIZE',
      `a memory region holds at most RDS_MAX_MSG_SIZE (${RDS_MAX_MSG_SIZE}) bytes, got ${buffer.byteLength}`,
    );
  if (opts !== undefined && (opts === null || typeof opts !== 'object'))
    throw new RdsError('EINVAL', `${what} options must be an object`);
  const flags = opts?.flags ?? 0;
  if (typeof flags !== 'number' || !Number.isInteger(flags) || (flags & ~MR_FLAGS) !== 0)
    throw new RdsError(
      'EINVAL',
      `${what} flags take RDS_RDMA_USE_ONCE, RDS_RDMA_INVALIDATE and RDS_RDMA_READWRITE, got ${String(flags)}`,
    );
  return { buffer, flags };
}

/** RDS_CMSG_RDMA_MAP's arguments, checked as getMr() checks its own (same codes). */
export function checkRdmaMap(m: unknown): { buffer: Uint8Array; flags: number } {
  if (m === null || typeof m !== 'object')
    throw new RdsError('EINVAL', 'rdmaMap must be an object { buffer, flags? } (sendmsg writes its cookie there)');
  const r = m as RdmaMapArgs;
  return checkGetMr(r.buffer, { flags: r.flags }, 'rdmaMap');
}

/**
 * The kernel's rule for one message's RDMA control messages: a message names at most one cookie
 * of its own (RDMA_DEST or RDMA_MAP: both set m_rdma_cookie, the second is EINVAL), and the group
 * {RDMA_DEST, RDMA_MAP} does not mix with {RDMA_ARGS, ATOMIC} (rds_rm_size: EINVAL). Checked
 * before any argument; `rdma` with `rdmaDest` keeps its own check (refuseRdmaControl,
 * prepareRdmaControl).
 */
export function checkRdmaMapMix(opts: SendmsgOptions): void {
  if (opts.rdmaMap === undefined) return;
  if (opts.rdmaDest !== undefined)
    throw new RdsError(
      'EINVAL',
      'rdmaMap and rdmaDest cannot go in one message (RDS_CMSG_RDMA_MAP with RDS_CMSG_RDMA_DEST: one cookie per message)',
    );
  if (opts.rdma !== undefined || opts.atomic !== undefined)
    throw new RdsError(
      'EINVAL',
      `rdmaMap cannot go with ${opts.rdma !== undefined ? 'rdma' : 'atomic'} in one message (RDS_CMSG_RDMA_MAP with ${opts.rdma !== undefined ? 'RDS_CMSG_RDMA_ARGS' : 'RDS_CMSG_ATOMIC_*'}, as the kernel refuses it)`,
    );
}

/** RDS_CMSG_RDMA_ARGS checked as rds_cmsg_rdma_args checks it (before any transport is asked). */
export function checkRdmaArgs(a: unknown): RdmaArgs & { bytes: number } {
  if (a === null || typeof a !== 'object')
    throw new RdsError('EINVAL', 'rdma must be an object { cookie, local, write }');
  const r = a as RdmaArgs;
  checkCookie(r.cookie, 'rdma.cookie');
  if (typeof r.write !== 'boolean')
    throw new RdsError('EINVAL', 'rdma.write must be true (RDMA WRITE to the peer) or false (RDMA READ from it)');
  if (!Array.isArray(r.local) || r.local.length === 0)
    throw new RdsError('EINVAL', 'rdma.local must be a non-empty array of Buffers (the local side of the op)');
  if (r.local.length > RDS_RDMA_MAX_IOV)
    throw new RdsError('EMSGSIZE', `rdma.local has ${r.local.length} buffers; at most ${RDS_RDMA_MAX_IOV}`);
  let bytes = 0;
  for (const b of r.local) {
    if (!isBytes(b)) throw new RdsError('EINVAL', 'every rdma.local entry must be a Buffer or Uint8Array');
    bytes += b.byteLength;
  }
  if (bytes === 0) throw new RdsError('EINVAL', 'rdma.local holds no bytes');
  if (bytes > RDS_MAX_MSG_SIZE)
    throw new RdsError(
      'EMSGSIZE',
      `an RDMA op moves at most RDS_MAX_MSG_SIZE (${RDS_MAX_MSG_SIZE}) bytes, got ${bytes}`,
    );
  const off = r.remoteOffset ?? 0;
  if (typeof off !== 'number' || !Number.isInteger(off) || off < 0 || off > 0xffffffff)
    throw new RdsError('EINVAL', `rdma.remoteOffset must be an integer 0..2^32-1, got ${String(off)}`);
  for (const k of ['notify', 'silent', 'fence'] as const) {
    if (r[k] !== undefined && typeof r[k] !== 'boolean') throw new RdsError('EINVAL', `rdma.${k} must be a boolean`);
  }
  if (r.token !== undefined) checkCookie(r.token, 'rdma.token');
  return { ...r, remoteOffset: off, bytes };
}

/**
 * The refusal of a transport that cannot do RDMA: EOPNOTSUPP, as the kernel's RDS/TCP (no get_mr,
 * no xmit_rdma) answers. Only the IB transport registers memory (lib/core/rdma-ops.ts).
 */
export function rdmaUnsupported(transport: { name: string; transType: number } | null, what: string): RdsError {
  if (transport !== null && transport.transType === RDS_TRANS_TCP) {
    return new RdsError(
      'EOPNOTSUPP',
      `${what} needs an RDMA transport (InfiniBand/RoCE); this socket uses TCP, which cannot register memory or post RDMA ops (the kernel's RDS/TCP refuses it the same way)`,
    );
  }
  return new RdsError(
    'EOPNOTSUPP',
    `${what}: the ${transport?.name ?? 'selected'} transport of rds-socket does not implement RDS's RDMA operations`,
  );
}

/**
 * RDS_CMSG_RDMA_ARGS / RDS_CMSG_RDMA_DEST / RDS_CMSG_RDMA_MAP, checked in rds_sendmsg's order:
 * mixing them is EINVAL, then the op's (or the region's) arguments, then the transport
 * (`refusal(what)`: EOPNOTSUPP without RDMA) or the cookie (EINVAL: the socket has registered no
 * memory). Always throws: the path of a transport without RDMA (with RDMA, prepareRdmaControl in
 * rdma-ops.ts takes the call).
 */
export function refuseRdmaControl(opts: SendmsgOptions, refusal: (what: string) => RdsError): never {
  checkRdmaMapMix(opts);
  if (opts.rdma !== undefined && opts.rdmaDest !== undefined)
    throw new RdsError(
      'EINVAL',
      'rdma and rdmaDest cannot go in one message (RDS_CMSG_RDMA_ARGS with RDS_CMSG_RDMA_DEST)',
    );
  if (opts.rdmaMap !== undefined) {
    checkRdmaMap(opts.rdmaMap);
    throw refusal('sendmsg() with rdmaMap (RDS_CMSG_RDMA_MAP)');
  }
  if (opts.rdma !== undefined) {
    checkRdmaArgs(opts.rdma);
    throw refusal('sendmsg() with rdma (RDS_CMSG_RDMA_ARGS)');
  }
  const cookie = checkCookie(opts.rdmaDest, 'rdmaDest');
  throw new RdsError(
    'EINVAL',
    `rdmaDest 0x${cookie.toString(16)} names no memory region of this socket (register one with getMr() first)`,
  );
}
