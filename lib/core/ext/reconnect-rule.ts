import type { RdsConnPath } from '../path.js';

/**
 * Whether a path that went DOWN is dialled (or poked) again: the reconnect rule (docs/reliability.md, "Who
 * reconnects, and when"; spec §2.2). Either side while it has application messages for the peer
 * (on any lane: lanes open behind path 0): the initiating side dials, the other pokes path 0
 * (and, lanes on demand, the lane with the messages); a poke from the peer ends the initiator's
 * backoff (RdsConnPath.connectNow). With nothing queued:
 * - an rds-socket peer is not redialled: it pokes when it has messages for us, so a peer that
 *   went away (an rds-ping that exited) is not dialled for ever. A lane that dropped while
 *   another path is up is, as long as one is: the peer is there, and the sockets that failed
 *   over from the lane go back to it once it is up;
 * - a kernel (or a peer not yet known) on the larger address pokes only for new sends, never for
 *   messages it holds to retransmit: the initiator keeps path 0 up for them, as the kernel's
 *   smaller side does, while a path was up within peerIdleTimeoutMs (the kernel retries for
 *   ever, which makes every stranger a target for good);
 * - rails (index >= maxPaths) stay up as configured, under the same limit.
 * `stableUp`: the path was UP long enough that its end is news (RdsConnPath.drop).
 */
export function worthRedialling(cp: RdsConnPath, stableUp: boolean): boolean {
  const conn = cp.conn;
  if (!conn.transport.initiates(cp)) {
    if (cp.index === 0) return conn.hasPendingData();
    return conn.handshake.lazyLanes && cp.tx.hasPendingData();
  }
  if (conn.hasPendingData()) return true;
  if (conn.handshake.peer === 'rds-socket' && cp.index < conn.stack.maxPaths) return cp.index > 0 && conn.anyPathUp();
  return stableUp || conn.wantsPeer();
}
