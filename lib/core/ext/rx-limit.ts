import type { ResolvedStackOptions } from '../options.js';
import type { RdsConnPath } from '../path.js';
import type { BoundSocket } from '../stack.js';
import type { RdsStats } from '../stats.js';
import { RDS_CTR } from '../stats.js';

/**
 * What a queued received message costs beyond its payload, for the hard limits below: its 48-byte
 * header (it stays in the read slab with the payload) and the objects that queue it (message,
 * buffer view, receipt, queue slot). Charging it means a flood of empty messages is bounded too.
 */
export const RX_MSG_OVERHEAD = 512;

/**
 * Hard limits on received, unread messages, whatever the sender does with congestion maps (they
 * are advice on the wire: a peer may ignore them). After a message is queued to a socket whose
 * queue is over recvHardLimitFactor x SO_RCVBUF, or over SO_RCVBUF while the stack's queues
 * together hold more than maxRecvQueueBytes, the node stops reading the carrier that delivered
 * it: TCP's own window then stops the sender. Nothing already read is dropped, and only that
 * carrier waits. Reading resumes once the application has read the socket (and the stack) back
 * under the limit, or closed it.
 */
/** A socket's hard limit: its unread messages past max(factor x SO_RCVBUF, minBytes). */
export interface RxSocketLimit {
  readonly factor: number;
  readonly minBytes: number;
}

/** The stack's options the limiter applies. */
export type RxLimits = Pick<
  ResolvedStackOptions,
  'maxRecvQueueBytes' | 'recvHardLimitFactor' | 'recvHardLimitMinBytes'
>;

/** The socket limit that applies while the stack is over maxRecvQueueBytes: SO_RCVBUF itself. */
const CONGESTED: RxSocketLimit = { factor: 1, minBytes: 0 };

export class RxLimiter {
  /** Bytes charged for every socket's queued messages (payload + RX_MSG_OVERHEAD each). */
  private charged = 0;
  private readonly maxBytes: number;
  private readonly hard: RxSocketLimit;
  /** Paths whose carrier the node stopped reading, and the socket each one last overfilled. */
  private readonly paused = new Map<RdsConnPath, BoundSocket>();

  constructor(
    limits: RxLimits,
    private readonly counters: RdsStats,
  ) {
    this.maxBytes = limits.maxRecvQueueBytes;
    this.hard = { factor: limits.recvHardLimitFactor, minBytes: limits.recvHardLimitMinBytes };
  }

  /** Bytes charged for every socket's queued messages. */
  get queued(): number {
    return this.charged;
  }

  /** Paths currently paused by a receive limit. */
  get pausedPaths(): number {
    return this.paused.size;
  }

  /** A socket's queue grew (delta > 0) or shrank. */
  charge(delta: number): void {
    this.charged += delta;
    if (delta < 0 && this.paused.size > 0) this.release();
  }

  /** `cp` has just queued a message on `sock`: past a limit, stop reading `cp`. */
  delivered(cp: RdsConnPath, sock: BoundSocket): void {
    if (!this.over(sock)) return;
    const t = cp.conn.transport;
    // Loopback has no carrier to stop: its senders are local sockets, bounded by their SO_SNDBUF.
    if (t.rxPause === undefined) return;
    const known = this.paused.has(cp);
    this.paused.set(cp, sock);
    if (known) return;
    this.counters.add(RDS_CTR.recv_pause_queue_limit);
    t.rxPause(cp);
  }

  /**
   * Over the socket's own hard limit; or the stack is over its limit and this socket is one that
   * fills it (more than SO_RCVBUF unread, so congested). A peer delivering to a socket that keeps
   * up is never paused because of another socket's backlog.
   */
  private over(sock: BoundSocket): boolean {
    if (sock.rxOverLimit === undefined) return false;
    return sock.rxOverLimit(this.hard) || (this.charged > this.maxBytes && sock.rxOverLimit(CONGESTED));
  }

  /** Resume every paused path whose socket, and the stack, are back under their limits. */
  private release(): void {
    for (const [cp, sock] of this.paused) {
      if (this.over(sock)) continue;
      this.paused.delete(cp);
      cp.conn.transport.rxResume?.(cp);
    }
  }

  /** Forget everything (the stack is closing). */
  clear(): void {
    this.paused.clear();
  }
}
