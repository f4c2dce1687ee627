import type { TransportPath } from '../core/transport-path.js';
import { RdsError } from '../errors.js';

/**
 * The bounds on the InfiniBand connections a peer can make us hold. Each one is a queue pair
 * with its rings (sendSlots + recvSlots slots of 4 KiB, about 1.5 MiB at the defaults), and since
 * each TOS has a connection of its own (rds_rdma's dp_tos), one peer address could ask for 256 of
 * them, and a peer that claims other addresses in its private data for more. The kernel has no
 * such bound; a node in userspace shares its memory with its application, so it keeps one.
 */
export interface IbLimits {
  /** Queue pairs of this transport, ours and accepted, all peers. */
  maxConnections: number;
  /** Distinct TOS values one peer address may hold connections for, towards one local address. */
  maxTosPerPeer: number;
}

export const IB_LIMIT_DEFAULTS: IbLimits = { maxConnections: 1024, maxTosPerPeer: 16 };

/** The limits from IbTransport's options, checked. */
export function ibLimits(opts: Partial<IbLimits>): IbLimits {
  const limits: IbLimits = {
    maxConnections: opts.maxConnections ?? IB_LIMIT_DEFAULTS.maxConnections,
    maxTosPerPeer: opts.maxTosPerPeer ?? IB_LIMIT_DEFAULTS.maxTosPerPeer,
  };
  for (const [k, v] of Object.entries(limits))
    if (!Number.isInteger(v) || v < 1) throw new RdsError('EINVAL', `IB ${k} must be an integer >= 1, got ${v}`);
  return limits;
}

/**
 * Why a connect request from `faddr` to `laddr` with `tos` must be refused, or null to take it.
 * `live` is every path holding a queue pair (one entry per rdma_cm id). A request for a TOS the
 * peer already has a connection for is a reconnect or a race, which the accept rules settle: it
 * never makes the peer hold more, so the limits do not refuse it.
 */
export function ibAdmissionRefusal(
  live: Iterable<TransportPath>,
  laddr: string,
  faddr: string,
  tos: number,
  limits: IbLimits,
): string | null {
  let total = 0;
  const peerTos = new Set<number>();
  for (const cp of live) {
    total++;
    if (cp.conn.laddr === laddr && cp.conn.faddr === faddr) peerTos.add(cp.conn.tos);
  }
  if (peerTos.has(tos)) return null;
  if (total >= limits.maxConnections)
    return `${total} InfiniBand connections already (maxConnections ${limits.maxConnections})`;
  if (peerTos.size >= limits.maxTosPerPeer)
    return `${faddr} holds connections for ${peerTos.size} TOS values already (maxTosPerPeer ${limits.maxTosPerPeer})`;
  return null;
}
