import { RDS_CONN_UP, RDS_FLAG_ACK_REQUIRED } from '../../constants.js';
import type { RdsConnPath } from '../path.js';
import { RDS_CTR } from '../stats.js';

/**
 * Liveness between rds-socket peers that advertised RDSSOCK_CAP_HEARTBEAT: when a path has been
 * silent for heartbeatIntervalMs, an ack-only frame with ACK_REQUIRED asks for an answer, and a
 * carrier silent for heartbeatMissedLimit intervals is dropped.
 */
export class Heartbeat {
  private timer: NodeJS.Timeout | null = null;
  private lastRx = 0;
  private sent = 0;

  constructor(private readonly path: RdsConnPath) {}

  /** Last time anything arrived on the path. */
  get lastRxAt(): number {
    return this.lastRx;
  }

  get heartbeatsSent(): number {
    return this.sent;
  }

  get running(): boolean {
    return this.timer !== null;
  }

  /**
   * Bytes arrived from the peer (or a new carrier came up). Transports call it (cp.heartbeat) once
   * per read or completion batch, not per frame: it feeds the silence check.
   */
  noteRx(): void {
    this.lastRx = Date.now();
  }

  start(): void {
    this.stop();
    const conn = this.path.conn;
    const every = conn.stack.options.heartbeatIntervalMs;
    if (every <= 0 || !conn.handshake.heartbeatMode || conn.transport.xmitControl === undefined) return;
    this.timer = setInterval(() => this.tick(), every);
    if (!conn.stack.referenced) this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  setRef(ref: boolean): void {
    if (this.timer) ref ? this.timer.ref() : this.timer.unref();
  }

  private tick(): void {
    const cp = this.path;
    if (cp.state !== RDS_CONN_UP) return;
    const stack = cp.conn.stack;
    const { heartbeatIntervalMs: every, heartbeatMissedLimit: limit } = stack.options;
    if (cp.readPaused) {
      // We hear nothing because we read nothing. Keep the peer hearing from us, so that its
      // heartbeat does not drop a carrier that is only waiting for our application.
      this.lastRx = Date.now();
      if (!cp.acks.ackInFlight) this.beat(0);
      return;
    }
    const silent = Date.now() - this.lastRx;
    if (silent >= every * limit) {
      stack.counters.add(RDS_CTR.heartbeat_timeout);
      cp.drop(`no traffic for ${silent} ms (heartbeat)`);
      return;
    }
    if (silent >= every && !cp.acks.ackInFlight) this.beat(RDS_FLAG_ACK_REQUIRED);
  }

  private beat(flags: number): void {
    this.sent++;
    this.path.conn.stack.counters.add(RDS_CTR.heartbeat_sent);
    this.path.acks.sendFrame(flags);
  }
}
