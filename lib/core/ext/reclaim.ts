import { RDS_CONN_DOWN } from '../../constants.js';
import type { RdsConnection } from '../connection.js';

/**
 * What a forgotten connection leaves behind: the peer's generation and, per path, where its
 * receive sequence stood. A peer that comes back and resends (RETRANSMITTED) what we already
 * delivered before its connection was reclaimed still has the copies dropped.
 */
interface RxTombstone {
  genNum: number;
  /** nextRxSeq, movedFloor, nativeRxSeq for each path. */
  seqs: number[];
}

/** At most this many tombstones are kept (the oldest go first): ~0.3 KiB each. */
const MAX_TOMBSTONES = 4096;

/**
 * Forgets idle connections: every source address that ever reached the node would otherwise
 * keep an RdsConnection (paths, queues, a congestion map) for the life of the stack. A
 * connection goes once every path has been DOWN for peerIdleTimeoutMs with no reconnect
 * scheduled and no application message queued or unacknowledged; the next message or
 * connection makes a fresh one.
 */
export class ConnReclaimer {
  private timer: NodeJS.Timeout | null = null;
  private readonly tombstones = new Map<string, RxTombstone>();

  constructor(
    private readonly idleMs: number,
    private readonly conns: Map<string, RdsConnection>,
    /** Drops the connection from the stack (and its peer's congestion map if now unused). */
    private readonly forget: (conn: RdsConnection) => void,
  ) {}

  /** A connection was made: sweep while there are any (the timer never holds the process). */
  connCreated(conn: RdsConnection): void {
    const t = this.tombstones.get(conn.key);
    if (t !== undefined) {
      this.tombstones.delete(conn.key);
      conn.handshake.restoreGeneration(t.genNum);
      // Only the paths that had received something are made again (the others restore to zeros).
      for (let i = 0; 3 * i < t.seqs.length; i++) {
        const [next, floor, native] = [t.seqs[3 * i] ?? 0, t.seqs[3 * i + 1] ?? 0, t.seqs[3 * i + 2] ?? 0];
        if (next !== 0 || floor !== 0 || native !== 0) conn.path(i)?.rxSeq.restore(next, floor, native);
      }
    }
    if (this.timer !== null || !Number.isFinite(this.idleMs)) return;
    // Sweeping at half the idle time forgets a connection between 1x and 1.5x of it.
    const every = Math.max(10, Math.min(5000, Math.floor(this.idleMs / 2)));
    this.timer = setInterval(() => this.sweep(), every);
    this.timer.unref();
  }

  /** Whether `conn` may be forgotten now. */
  idle(conn: RdsConnection, now: number): boolean {
    if (conn.isLoopback || now - conn.stateChangedAt < this.idleMs) return false;
    for (const p of conn.madePaths()) if (p.state !== RDS_CONN_DOWN || p.reconnectPending) return false;
    return !conn.hasPendingData();
  }

  sweep(now = Date.now()): number {
    let n = 0;
    for (const conn of this.conns.values()) {
      if (!this.idle(conn, now)) continue;
      this.remember(conn);
      for (const p of conn.madePaths()) p.dispose();
      conn.markReclaimed();
      this.forget(conn);
      n++;
    }
    if (this.conns.size === 0) this.stop();
    return n;
  }

  /** Only peers that delivered sequenced messages leave a tombstone: strangers leave nothing. */
  private remember(conn: RdsConnection): void {
    if (!conn.madePaths().some((p) => p.rxSeq.next > 0)) return;
    this.tombstones.delete(conn.key);
    if (this.tombstones.size >= MAX_TOMBSTONES) this.tombstones.delete(this.tombstones.keys().next().value!);
    this.tombstones.set(conn.key, {
      genNum: conn.handshake.peerGenNum,
      seqs: Array.from({ length: conn.pathSlots }, (_, i) => conn.pathIf(i)).flatMap((p) =>
        p === undefined ? [0, 0, 0] : [p.rxSeq.next, p.rxSeq.movedFloor, p.rxSeq.nativeNextSeq],
      ),
    });
  }

  get tombstoneCount(): number {
    return this.tombstones.size;
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}
