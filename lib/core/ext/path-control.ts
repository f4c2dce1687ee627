import {
  RDS_CONN_CONNECTING,
  RDS_CONN_DISCONNECTING,
  RDS_CONN_DOWN,
  RDS_CONN_ERROR,
  RDS_CONN_UP,
} from '../../constants.js';
import type { RdsConnPath } from '../path.js';
import { RDS_CTR } from '../stats.js';

/**
 * A path's operator controls, as RTRS has them per path: disconnect() (held down until
 * reconnect()), reconnect(), and max_reconnect_attempts (after that many failed attempts the path
 * stays in ERROR). The path asks `mayConnect` before it connects or takes a carrier, and reports
 * its connect attempts here.
 */
export class PathControl {
  /** Held down by disconnect() (or a removed rail): no connect, no accepted carrier, until reconnect(). */
  private heldDown = false;
  /** Failed connect attempts since the path was last UP (see maxReconnectAttempts). */
  private attempts = 0;

  constructor(private readonly cp: RdsConnPath) {}

  /** Held down by disconnect() (or a removed rail). */
  get held(): boolean {
    return this.heldDown;
  }

  /** Failed connect attempts since the path was last UP. */
  get failedAttempts(): number {
    return this.attempts;
  }

  /** The path came UP: the attempt count starts over. */
  connected(): void {
    this.attempts = 0;
  }

  /**
   * A connect attempt failed (the path is still CONNECTING). True when it was the last one
   * maxReconnectAttempts allows: the path has then gone to ERROR and stays there until
   * reconnect(); the peer-down event follows as for any unreachable peer, and queued messages stay
   * (or fail over).
   */
  gaveUp(): boolean {
    const cp = this.cp;
    this.attempts++;
    if (this.attempts < cp.conn.stack.options.maxReconnectAttempts) return false;
    cp.transition(RDS_CONN_CONNECTING, RDS_CONN_ERROR);
    cp.conn.stack.counters.add(RDS_CTR.conn_reconnect_exhausted);
    cp.conn.stack.pathEvents.dropped(
      cp,
      `gave up after ${this.attempts} failed connection attempts (maxReconnectAttempts)`,
    );
    if (cp.tx.sendQueue.length > 0) cp.conn.failover.arm(cp);
    return true;
  }

  /**
   * Drops the path's carrier (if any) and keeps it down: no connect, no carrier accepted, until
   * reconnect(). Its queued messages stay, and move to a live path after the grace period.
   */
  disconnect(reason: string): void {
    const cp = this.cp;
    this.heldDown = true;
    cp.cancelReconnect();
    if (cp.state === RDS_CONN_CONNECTING) {
      cp.conn.transport.connPathShutdown(cp);
      cp.transition(RDS_CONN_CONNECTING, RDS_CONN_DOWN);
    } else if (cp.state === RDS_CONN_ERROR) {
      this.leaveError();
    } else if (cp.state !== RDS_CONN_DOWN) {
      cp.drop(reason);
    }
    if (cp.tx.sendQueue.length > 0) cp.conn.failover.arm(cp);
  }

  /**
   * Lets a disconnected, given-up (ERROR) or live path connect again: a live carrier is dropped
   * and replaced, a DOWN one connects at once (the side that dials; the other side pokes on path 0
   * or waits), the attempt count starts over.
   */
  reconnect(): void {
    this.allowConnect();
    if (this.cp.state === RDS_CONN_UP) {
      this.cp.drop('reconnect requested by the operator');
      return;
    }
    this.cp.connectNow();
  }

  /** Clears a hold (disconnect) and the attempt count, without touching a live carrier. */
  allowConnect(): void {
    this.heldDown = false;
    this.attempts = 0;
    if (this.cp.state === RDS_CONN_ERROR) this.leaveError();
  }

  /** Out of ERROR (given up) to DOWN, through DISCONNECTING as every way down goes. */
  leaveError(): void {
    this.cp.transition(RDS_CONN_ERROR, RDS_CONN_DISCONNECTING);
    this.cp.transition(RDS_CONN_DISCONNECTING, RDS_CONN_DOWN);
  }
}
