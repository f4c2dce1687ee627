import { RDS_PORT } from '../constants.js';
import { RdsError } from '../errors.js';
import { type IbLimits, ibLimits } from './ib-admission.js';

/** The options of `new IbTransport()`. */
export interface IbTransportOptions {
  /** rdma_cm port (RDS_PORT, 18634, for the kernel's rds_rdma). */
  port?: number;
  /** Offer credit flow control (used when the peer offers it too, as the kernel decides). Default true. */
  flowControl?: boolean;
  /** Send ring slots per connection (one more is kept for ack-only frames). Default 128. */
  sendSlots?: number;
  /** Receive ring slots per connection (the credits we can grant). Default 256. */
  recvSlots?: number;
  /** Address resolution timeout in ms (the kernel's 5000); route resolution always uses 5000, as the kernel. */
  resolveTimeoutMs?: number;
  /** Queue pairs, ours and accepted; a connect request past it is refused (conn_refused_limit). Default 1024. */
  maxConnections?: number;
  /** TOS values (each its own connection) one peer address may hold; one more is refused. Default 16. */
  maxTosPerPeer?: number;
}

/** IbTransport's options with their defaults, checked (EINVAL naming the option). */
export interface ResolvedIbOptions {
  port: number;
  flowControl: boolean;
  sendSlots: number;
  recvSlots: number;
  resolveTimeoutMs: number;
  limits: IbLimits;
}

export function resolveIbOptions(opts: IbTransportOptions): ResolvedIbOptions {
  const r: ResolvedIbOptions = {
    port: opts.port ?? RDS_PORT,
    flowControl: opts.flowControl ?? true,
    sendSlots: opts.sendSlots ?? 128,
    recvSlots: opts.recvSlots ?? 256,
    resolveTimeoutMs: opts.resolveTimeoutMs ?? 5000,
    limits: ibLimits(opts),
  };
  if (!Number.isInteger(r.port) || r.port < 1 || r.port > 65535)
    throw new RdsError('EINVAL', `IB port must be 1..65535, got ${r.port}`);
  if (!(r.sendSlots >= 4 && r.sendSlots <= 4096) || !(r.recvSlots >= 16 && r.recvSlots <= 4096))
    throw new RdsError('EINVAL', 'IB ring sizes: sendSlots 4..4096, recvSlots 16..4096');
  return r;
}
