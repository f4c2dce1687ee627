// What `new RdsSocket()` checks and how it chooses its backend; the options that are actions rather than values (RDS_CANCEL_SENT_TO, RDS_GET_MR(_FOR_DEST),
// RDS_FREE_MR, SO_RDS_TRANSPORT) and the memory-region calls behind two of them, checked once for
// every kind of socket and carried out by its backend.
import {
  RDS_CANCEL_SENT_TO,
  RDS_FREE_MR,
  RDS_GET_MR,
  RDS_GET_MR_FOR_DEST,
  RDS_RDMA_INVALIDATE,
  RDS_TRANS_IB,
  RDS_TRANS_NONE,
  RDS_TRANS_TCP,
  SO_RDS_TRANSPORT,
} from '../constants.js';
import { RdsError } from '../errors.js';
import { isIPv4 } from 'node:net';
import { nonUnicastReason, parseEndpoint, type RdsAddress } from './address.js';
import { checkBindLink, checkConnectLink, socketZone } from './scope.js';
import { checkCookie, checkGetMr, type FreeMrOptions, type GetMrOptions } from './rdma.js';
import { LocalBackend } from './local-backend.js';
import type { NodeBackendFactory, SocketBackend } from './socket-backend.js';
import { intValue, objectValue } from './socket-options.js';
import type { RdsSocketOptions } from './socket-types.js';
import { RdsStack } from './stack.js';

const TRANSPORT_BY_NAME: Record<string, number> = { tcp: RDS_TRANS_TCP, ib: RDS_TRANS_IB };

/** The constructor's options, checked before anything is opened. @internal */
export function constructorOptions(opts: RdsSocketOptions): { transport?: number; sendTimeout?: number } {
  if (opts === null || typeof opts !== 'object') throw new RdsError('EINVAL', 'options must be an object');
  let transport: number | undefined;
  if (opts.transport !== undefined) {
    transport = TRANSPORT_BY_NAME[opts.transport as string];
    if (transport === undefined)
      throw new RdsError('EINVAL', `transport must be 'tcp' or 'ib', got ${String(opts.transport)}`);
  }
  const sendTimeout = opts.sendTimeout !== undefined ? intValue(opts.sendTimeout, 'sendTimeout') : undefined;
  return { transport, sendTimeout };
}

/**
 * What carries a new socket: the backend its maker gave; a host node's, when `nodeBackends` (the
 * package entry registers it) finds the socket lives in one (a socket of an attached stack, or of
 * the default stack while a host node answers: docs/host-node.md); else this process's stack.
 * @internal
 */
export function chooseBackend(opts: RdsSocketOptions, nodeBackends: NodeBackendFactory | null): SocketBackend {
  const given = opts.backend ?? nodeBackends?.(opts) ?? null;
  if (given !== null) return given;
  const stack = opts.stack ?? RdsStack.default();
  if (!(stack instanceof RdsStack)) throw new RdsError('EINVAL', 'options.stack must be an RdsStack');
  return new LocalBackend(stack);
}

/** What the actions need of the socket: its public memory-region calls (they check it is open). */
interface MrCalls {
  getMr(buffer: Uint8Array, opts?: GetMrOptions): bigint;
  freeMr(cookie: bigint, opts?: FreeMrOptions): void;
}

/** bind()'s address, checked (`peer`: connect()'s destination, which must be of its family). @internal */
export function bindEndpoint(addr: { address: string; port?: number }, peer: RdsAddress | null): RdsAddress {
  const ep = parseEndpoint({ port: 0, ...addr }, 'bind address');
  const why = nonUnicastReason(ep.address);
  if (why !== null) throw new RdsError('EINVAL', `cannot bind to ${ep.address}: it ${why}`);
  if (ep.port === 1)
    throw new RdsError('EINVAL', 'port 1 is reserved for the multipath handshake; choose another port');
  if (peer !== null && isIPv4(peer.address) !== isIPv4(ep.address)) {
    throw new RdsError('EINVAL', 'the default destination set with connect() is of the other address family');
  }
  checkBindLink(ep.address, peer?.address);
  return ep;
}

/** connect()'s destination, checked against the link of the socket (`bound`, `peer`: what it has). @internal */
export function connectEndpoint(
  addr: { address: string; port: number },
  bound: RdsAddress | null = null,
  peer: RdsAddress | null = null,
): RdsAddress {
  const ep = parseEndpoint(addr, 'destination');
  checkConnectLink(ep.address, socketZone(bound?.address, peer?.address), bound !== null);
  if (/^(0\.0\.0\.0|::)$/.test(ep.address))
    throw new RdsError('EDESTADDRREQ', 'destination address is unspecified; give a peer address');
  const why = nonUnicastReason(ep.address);
  if (why !== null) throw new RdsError('EINVAL', `cannot send to ${ep.address}: it ${why}`);
  return ep;
}

/** setsockopt(SOL_RDS, optname): carries out an action option; false when `optname` is a valued one. @internal */
export function rdsAction(sock: MrCalls, b: SocketBackend, binding: boolean, optname: number, value: unknown): boolean {
  switch (optname) {
    case RDS_CANCEL_SENT_TO:
      if (b.bound === null) throw new RdsError('ENOTCONN', 'RDS_CANCEL_SENT_TO needs a bound socket');
      // A link-local address without a zone names the socket's link, as for sendmsg().
      b.cancelSentTo(parseEndpoint(value, 'RDS_CANCEL_SENT_TO value', socketZone(b.bound.address, null)));
      return true;
    case RDS_GET_MR:
    case RDS_GET_MR_FOR_DEST: {
      const v = objectValue(value, optname === RDS_GET_MR ? 'RDS_GET_MR' : 'RDS_GET_MR_FOR_DEST');
      if (optname === RDS_GET_MR_FOR_DEST && v.dest === undefined)
        throw new RdsError('EINVAL', 'RDS_GET_MR_FOR_DEST needs dest: { address, port }');
      v.cookie = sock.getMr(v.buffer as Uint8Array, {
        flags: v.flags as number | undefined,
        dest: v.dest as GetMrOptions['dest'],
      });
      return true;
    }
    case RDS_FREE_MR: {
      const v = objectValue(value, 'RDS_FREE_MR');
      const flags = v.flags ?? 0;
      if (flags !== 0 && flags !== RDS_RDMA_INVALIDATE)
        throw new RdsError('EINVAL', `RDS_FREE_MR flags take 0 or RDS_RDMA_INVALIDATE, got ${String(flags)}`);
      sock.freeMr(v.cookie as bigint, { invalidate: flags === RDS_RDMA_INVALIDATE });
      return true;
    }
    case SO_RDS_TRANSPORT: {
      const v = intValue(value, 'SO_RDS_TRANSPORT');
      if (b.transportType !== RDS_TRANS_NONE || b.bound !== null || binding)
        throw new RdsError('EOPNOTSUPP', 'SO_RDS_TRANSPORT can only be set once, before bind()');
      if (v < 0 || v >= 3)
        throw new RdsError('EINVAL', `SO_RDS_TRANSPORT must be RDS_TRANS_IB (0) or RDS_TRANS_TCP (2), got ${v}`);
      b.setTransport(v);
      return true;
    }
    default:
      return false;
  }
}

/** RdsSocket.getMr() after its open check. @internal */
export function getMr(b: SocketBackend, buffer: Uint8Array, opts: GetMrOptions | undefined): bigint {
  checkGetMr(buffer, opts);
  if (opts?.dest !== undefined) {
    if (opts.dest === null || typeof opts.dest !== 'object')
      throw new RdsError('EINVAL', 'getMr() dest must be { address, port }');
    parseEndpoint(opts.dest, 'getMr() dest');
  }
  const bound = b.bound;
  if (bound === null)
    throw new RdsError(
      'ENOTCONN',
      'getMr() needs a bound socket: bind() chooses the transport that registers the memory',
    );
  if (!b.rdmaCapable) throw b.rdmaRefusal('getMr() (RDS_GET_MR)');
  return b.regions(true)!.register(bound.address, buffer, opts?.flags ?? 0);
}

/** RdsSocket.freeMr() after its open check. @internal */
export function freeMr(b: SocketBackend, cookie: bigint, opts: FreeMrOptions | undefined): void {
  checkCookie(cookie, 'freeMr() cookie');
  if (opts !== undefined && (opts === null || typeof opts !== 'object'))
    throw new RdsError('EINVAL', 'freeMr() options must be an object');
  if (opts?.invalidate !== undefined && typeof opts.invalidate !== 'boolean')
    throw new RdsError('EINVAL', 'freeMr() invalidate must be a boolean');
  if (b.rdmaCapable) {
    // Cookie 0: flush the regions freed but not yet invalidated (rds_free_mr -> flush_mrs). This
    // transport deregisters at once, so nothing is left to flush.
    if (cookie === 0n || b.regions(false)?.free(cookie) === true) return;
  } else if (cookie === 0n) {
    throw new RdsError(
      'EINVAL',
      `freeMr(0n) flushes the regions of an RDMA transport; this socket's ${b.transportName ?? 'unbound'} transport has none`,
    );
  }
  throw new RdsError('EINVAL', `freeMr(): cookie 0x${cookie.toString(16)} names no memory region of this socket`);
}
