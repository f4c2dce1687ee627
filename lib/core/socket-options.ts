// Socket options (the kernel's af_rds.c setsockopt/getsockopt and sock_setsockopt's SOL_SOCKET
// part) with their typed overloads.
import {
  RDS_CANCEL_SENT_TO,
  RDS_CONG_MONITOR,
  RDS_FREE_MR,
  RDS_GET_MR,
  RDS_GET_MR_FOR_DEST,
  RDS_RDMA_INVALIDATE,
  RDS_RECVERR,
  type RDS_TRANS_IB,
  type RDS_TRANS_TCP,
  SOCK_MIN_RCVBUF,
  SOCK_MIN_SNDBUF,
  SOL_RDS,
  SOL_SOCKET,
  SO_RCVBUF,
  SO_RDS_TRANSPORT,
  SO_SNDBUF,
  SO_TIMESTAMP,
  SO_TIMESTAMP_NEW,
  SO_ZEROCOPY,
  SO_SNDTIMEO,
  SO_SNDTIMEO_NEW,
} from '../constants.js';
import { RdsError } from '../errors.js';
import { SocketRecv } from './socket-recv.js';
import { checkCookie, checkGetMr, rdmaUnsupported, type FreeMrOptions, type GetMrOptions } from './rdma.js';
import { MrTable } from './rdma-ops.js';
import { parseEndpoint } from './address.js';
import { rdsIoctl } from './tos.js';
import { infoGetsockopt, isInfoOption } from './info-sockopt.js';
import type { RdsInfoResult } from './info-result.js';

/** setsockopt/getsockopt of RdsSocket; see RdsSocket. */
export abstract class SocketOptions extends SocketRecv {
  // ---- options ----

  /** SO_SNDBUF, SO_RCVBUF (bytes), SO_TIMESTAMP, SO_TIMESTAMP_NEW, SO_ZEROCOPY (0/1 or a boolean). */
  setsockopt(
    level: typeof SOL_SOCKET,
    optname: typeof SO_SNDBUF | typeof SO_RCVBUF | typeof SO_TIMESTAMP | typeof SO_TIMESTAMP_NEW | typeof SO_ZEROCOPY,
    value: number | boolean,
  ): void;
  /** RDS_CANCEL_SENT_TO: drops every queued or unacknowledged message to this destination. */
  setsockopt(level: typeof SOL_RDS, optname: typeof RDS_CANCEL_SENT_TO, value: { address: string; port: number }): void;
  /** RDS_RECVERR, RDS_CONG_MONITOR (0/1 or a boolean). */
  setsockopt(
    level: typeof SOL_RDS,
    optname: typeof RDS_RECVERR | typeof RDS_CONG_MONITOR,
    value: number | boolean,
  ): void;
  /** SO_RDS_TRANSPORT before bind: RDS_TRANS_TCP or RDS_TRANS_IB. */
  setsockopt(
    level: typeof SOL_RDS,
    optname: typeof SO_RDS_TRANSPORT,
    value: typeof RDS_TRANS_TCP | typeof RDS_TRANS_IB,
  ): void;
  /**
   * RDS_GET_MR ({ buffer, flags }), RDS_GET_MR_FOR_DEST ({ buffer, flags, dest }): getMr(); the
   * cookie is written to value.cookie, as the kernel writes it to cookie_addr.
   */
  setsockopt(
    level: typeof SOL_RDS,
    optname: typeof RDS_GET_MR | typeof RDS_GET_MR_FOR_DEST,
    value: { buffer: Uint8Array; cookie?: bigint } & GetMrOptions,
  ): void;
  /** RDS_FREE_MR ({ cookie, flags }): freeMr(); flags 0 or RDS_RDMA_INVALIDATE. */
  setsockopt(level: typeof SOL_RDS, optname: typeof RDS_FREE_MR, value: { cookie: bigint; flags?: number }): void;
  /** An option given by a computed number; checked at run time (ENOPROTOOPT, EINVAL). */
  setsockopt(level: number, optname: number, value: number | boolean): void;
  setsockopt(level: number, optname: number, value: unknown): void {
    this.checkOpen('setsockopt()');
    if (level === SOL_SOCKET) {
      switch (optname) {
        case SO_SNDBUF: {
          const v = intValue(value, 'SO_SNDBUF');
          if (v < 0) throw new RdsError('EINVAL', 'SO_SNDBUF must not be negative');
          this.sndbuf = Math.max(v, SOCK_MIN_SNDBUF / 2);
          if (this.sndBytes < this.sndbuf) this.wakeAll();
          return;
        }
        case SO_RCVBUF: {
          const v = intValue(value, 'SO_RCVBUF');
          if (v < 0) throw new RdsError('EINVAL', 'SO_RCVBUF must not be negative');
          this.rcvbuf = Math.max(v, SOCK_MIN_RCVBUF / 2);
          this.rcvDelta(0);
          return;
        }
        case SO_TIMESTAMP:
        case SO_TIMESTAMP_NEW:
          this.timestamps = boolValue(value, 'SO_TIMESTAMP');
          return;
        case SO_ZEROCOPY: {
          const v = intValue(value, 'SO_ZEROCOPY');
          if (v !== 0 && v !== 1) throw new RdsError('EINVAL', `SO_ZEROCOPY takes 0 or 1, got ${v}`);
          this.zerocopy = v === 1;
          return;
        }
        case SO_SNDTIMEO:
        case SO_SNDTIMEO_NEW:
          this.sendTimeout.set(intValue(value, 'SO_SNDTIMEO'));
          return;
        default:
          throw new RdsError(
            'ENOPROTOOPT',
            `unknown SOL_SOCKET option ${optname} (supported: SO_SNDBUF, SO_RCVBUF, SO_TIMESTAMP, SO_ZEROCOPY, SO_SNDTIMEO)`,
          );
      }
    }
    if (level !== SOL_RDS)
      throw new RdsError('ENOPROTOOPT', `unknown option level ${level}; use SOL_RDS (276) or SOL_SOCKET (1)`);
    switch (optname) {
      case RDS_CANCEL_SENT_TO:
        this.cancelSentTo(value);
        return;
      case RDS_GET_MR:
      case RDS_GET_MR_FOR_DEST: {
        const v = objectValue(value, optname === RDS_GET_MR ? 'RDS_GET_MR' : 'RDS_GET_MR_FOR_DEST');
        if (optname === RDS_GET_MR_FOR_DEST && v.dest === undefined)
          throw new RdsError('EINVAL', 'RDS_GET_MR_FOR_DEST needs dest: { address, port }');
        v.cookie = this.getMr(v.buffer as Uint8Array, {
          flags: v.flags as number | undefined,
          dest: v.dest as GetMrOptions['dest'],
        });
        return;
      }
      case RDS_FREE_MR: {
        const v = objectValue(value, 'RDS_FREE_MR');
        const flags = v.flags ?? 0;
        if (flags !== 0 && flags !== RDS_RDMA_INVALIDATE)
          throw new RdsError('EINVAL', `RDS_FREE_MR flags take 0 or RDS_RDMA_INVALIDATE, got ${String(flags)}`);
        this.freeMr(v.cookie as bigint, { invalidate: flags === RDS_RDMA_INVALIDATE });
        return;
      }
      case RDS_RECVERR:
        this.recvErr = boolValue(value, 'RDS_RECVERR');
        return;
      case SO_TIMESTAMP: // af_rds.c takes SO_TIMESTAMP_OLD / _NEW at SOL_RDS too
      case SO_TIMESTAMP_NEW:
        this.timestamps = boolValue(value, 'SO_TIMESTAMP');
        return;
      case RDS_CONG_MONITOR:
        this.congMonitor = boolValue(value, 'RDS_CONG_MONITOR');
        if (!this.congMonitor) {
          this.congMask = 0n;
          this.congNotify = 0n;
        }
        return;
      case SO_RDS_TRANSPORT: {
        const v = intValue(value, 'SO_RDS_TRANSPORT');
        if (this.transport !== null || this.bound !== null || this.binding) {
          throw new RdsError('EOPNOTSUPP', 'SO_RDS_TRANSPORT can only be set once, before bind()');
        }
        if (v < 0 || v >= 3)
          throw new RdsError('EINVAL', `SO_RDS_TRANSPORT must be RDS_TRANS_IB (0) or RDS_TRANS_TCP (2), got ${v}`);
        this.setTransport(v);
        return;
      }
      default:
        throw new RdsError('ENOPROTOOPT', `unknown SOL_RDS option ${optname}`);
    }
  }

  /**
   * RDS_GET_MR / RDS_GET_MR_FOR_DEST: registers `buffer` (the socket references it until
   * freeMr(), a USE_ONCE region's first use by the peer, or close()) for the peer's RDMA ops and
   * returns its cookie: (offset << 32) + rkey, the region registered zero-based from the start of
   * the buffer's first page as the kernel registers it (offset: where the buffer starts in that
   * page). Flags: RDS_RDMA_USE_ONCE, RDS_RDMA_INVALIDATE, RDS_RDMA_READWRITE (remote write, and
   * remote atomics where the device has them). IB sockets only: throws ENOTCONN on an unbound
   * socket (the transport registers the memory) and EOPNOTSUPP on TCP, as the kernel's RDS/TCP does.
   */
  getMr(buffer: Uint8Array, opts?: GetMrOptions): bigint {
    this.checkOpen('getMr()');
    checkGetMr(buffer, opts);
    if (opts?.dest !== undefined) {
      if (opts.dest === null || typeof opts.dest !== 'object')
        throw new RdsError('EINVAL', 'getMr() dest must be { address, port }');
      parseEndpoint(opts.dest, 'getMr() dest');
    }
    if (!this.isBound())
      throw new RdsError(
        'ENOTCONN',
        'getMr() needs a bound socket: bind() chooses the transport that registers the memory',
      );
    const rdma = this.transport?.rdma;
    if (rdma === undefined) throw this.rdmaRefusal('getMr() (RDS_GET_MR)');
    this.mrs ??= new MrTable(rdma);
    return this.mrs.register(this.boundAddress, buffer, opts?.flags ?? 0);
  }

  /** Whether bind() has completed (an attached socket keeps its own record). @internal */
  protected isBound(): boolean {
    return this.bound !== null;
  }

  /** The EOPNOTSUPP this socket's transport gives RDMA calls. @internal */
  protected rdmaRefusal(what: string): RdsError {
    return rdmaUnsupported(this.transport, what);
  }

  /**
   * RDS_FREE_MR: deregisters the region `cookie` names at once (with or without invalidate).
   * Cookie 0n is the kernel's flush of regions freed but not yet invalidated: over IB nothing is
   * left to flush and it succeeds. A cookie this socket did not register is EINVAL, as in the
   * kernel; on a transport without RDMA (TCP) every cookie, 0n included, is EINVAL.
   */
  freeMr(cookie: bigint, opts?: FreeMrOptions): void {
    this.checkOpen('freeMr()');
    checkCookie(cookie, 'freeMr() cookie');
    if (opts !== undefined && (opts === null || typeof opts !== 'object'))
      throw new RdsError('EINVAL', 'freeMr() options must be an object');
    if (opts?.invalidate !== undefined && typeof opts.invalidate !== 'boolean')
      throw new RdsError('EINVAL', 'freeMr() invalidate must be a boolean');
    if (this.transport?.rdma !== undefined) {
      // Cookie 0: flush the regions freed but not yet invalidated (rds_free_mr -> flush_mrs). This
      // transport deregisters at once, so nothing is left to flush.
      if (cookie === 0n || this.mrs?.free(cookie) === true) return;
      throw new RdsError('EINVAL', `freeMr(): cookie 0x${cookie.toString(16)} names no memory region of this socket`);
    }
    if (cookie === 0n)
      throw new RdsError(
        'EINVAL',
        `freeMr(0n) flushes the regions of an RDMA transport; this socket's ${this.transport?.name ?? 'unbound'} transport has none`,
      );
    throw new RdsError('EINVAL', `freeMr(): cookie 0x${cookie.toString(16)} names no memory region of this socket`);
  }

  /** SO_SNDBUF, SO_RCVBUF: twice the value set, as Linux reports; SO_TIMESTAMP, SO_ZEROCOPY: 0 or 1. */
  getsockopt(
    level: typeof SOL_SOCKET,
    optname: typeof SO_SNDBUF | typeof SO_RCVBUF | typeof SO_TIMESTAMP | typeof SO_TIMESTAMP_NEW | typeof SO_ZEROCOPY,
  ): number;
  /** RDS_RECVERR, RDS_CONG_MONITOR: 0 or 1; SO_RDS_TRANSPORT: RDS_TRANS_TCP, RDS_TRANS_IB or RDS_TRANS_NONE. */
  getsockopt(
    level: typeof SOL_RDS,
    optname: typeof RDS_RECVERR | typeof RDS_CONG_MONITOR | typeof SO_RDS_TRANSPORT,
  ): number;
  /** An option given by a computed number; checked at run time (ENOPROTOOPT). */
  getsockopt(level: number, optname: number): number;
  /** RDS_INFO_* / RDS6_INFO_*: the kernel's records into `buffer`, all or none (ENOSPC: error.length needed). */
  getsockopt(level: typeof SOL_RDS, optname: number, buffer: Uint8Array): RdsInfoResult;
  getsockopt(level: number, optname: number, buffer?: Uint8Array): number | RdsInfoResult {
    this.checkOpen('getsockopt()');
    if (level === SOL_RDS && isInfoOption(optname)) return infoGetsockopt(() => this.stack.info(), optname, buffer);
    if (level === SOL_SOCKET) {
      switch (optname) {
        // Linux reports twice the value set (the kernel's bookkeeping overhead allowance).
        case SO_SNDBUF:
          return this.sndbuf * 2;
        case SO_RCVBUF:
          return this.rcvbuf * 2;
        case SO_TIMESTAMP:
        case SO_TIMESTAMP_NEW:
          return this.timestamps ? 1 : 0;
        case SO_ZEROCOPY:
          return this.zerocopy ? 1 : 0;
        case SO_SNDTIMEO:
        case SO_SNDTIMEO_NEW:
          return this.sendTimeout.ms;
        default:
          throw new RdsError('ENOPROTOOPT', `unknown SOL_SOCKET option ${optname}`);
      }
    }
    if (level !== SOL_RDS) throw new RdsError('ENOPROTOOPT', `unknown option level ${level}`);
    switch (optname) {
      case RDS_RECVERR:
        return this.recvErr ? 1 : 0;
      case RDS_CONG_MONITOR:
        return this.congMonitor ? 1 : 0;
      case SO_RDS_TRANSPORT:
        return this.transportType;
      default:
        throw new RdsError('ENOPROTOOPT', `SOL_RDS option ${optname} cannot be read`);
    }
  }

  /** ioctl(2): SIOCRDSSETTOS (arg: the TOS; once, before the first send), SIOCRDSGETTOS; see tos.ts. */
  ioctl(request: number, arg?: number): number {
    this.checkOpen('ioctl()');
    return rdsIoctl(request, arg, this.transportType, this.lastConn !== null);
  }

  /** getsockopt(SOL_RDS, RDS_INFO_*, buffer) that also works on a socket attached to a host node (the node answers). */
  async rdsInfo(optname: number, buffer: Uint8Array): Promise<RdsInfoResult> {
    return this.getsockopt(SOL_RDS, optname, buffer);
  }
}

/** An integer option value (a boolean counts as 0/1); EINVAL otherwise. @internal */
export function intValue(v: unknown, name: string): number {
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (typeof v !== 'number' || !Number.isInteger(v))
    throw new RdsError('EINVAL', `${name} takes an integer, got ${typeof v === 'number' ? v : typeof v}`);
  return v;
}

function boolValue(v: unknown, name: string): boolean {
  return intValue(v, name) !== 0;
}

function objectValue(value: unknown, name: string): Record<string, unknown> {
  if (value === null || typeof value !== 'object') throw new RdsError('EINVAL', `${name} takes an object`);
  return value as Record<string, unknown>;
}
