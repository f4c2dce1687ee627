import { RDS_CONN_UP, RDS_FLAG_ACK_REQUIRED } from '../../constants.js';
import type { RdsConnPath } from '../path.js';
import { RDS_CTR } from '../stats.js';

/**
 * The port a kernel peer's liveness pings come from (see Heartbeat): its pongs come back to it.
 * One that no socket binds in practice; a pong to it is taken as the answer only while a liveness
 * ping of the path is unanswered, and the path pings only while the kernel is silent, which a user
 * socket that pings from this port would not let it be.
 */
export const KERNEL_PING_PORT = 65535;

/**
 * Liveness of a path. Between rds-socket peers that advertised RDSSOCK_CAP_HEARTBEAT: when a path
 * has been silent for heartbeatIntervalMs, an ack-only frame with ACK_REQUIRED asks for an answer,
 * and a carrier silent for heartbeatMissedLimit intervals is dropped.
 *
 * With a kernel peer over a stream carrier (TCP) the question is an RDS ping, which every kernel
 * answers with a pong on the path it came on (spec §4), and the kernel has no heartbeat of its own
 * (TCP keepalive only, which never fires while data is unacknowledged). What it is for: after a
 * partition, a kernel's data the network dropped waits for its TCP retransmission timer, which
 * backs off to many seconds (20 s after a 7 s partition was seen in the nemesis, seed 9091), and
 * everything it sends on that connection waits behind it while ours still flows; dropping the
 * carrier makes the kernel resend those messages on a new connection at once. A carrier is
 * dropped only if the kernel has answered a ping on this connection before, our multipath probe
 * (a ping from port 1) or a liveness ping (one with net.rds.ping_enable = 0 answers neither: its
 * silence then says nothing).
 */
export class Heartbeat {
  private timer: NodeJS.Timeout | null = null;
  private lastRx = 0;
  private sent = 0;
  /** Liveness pings sent to a kernel peer on this carrier and not answered yet (at most one). */
  private pingsUnanswered = 0;
  private kernelMode = false;

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

  /** A pong to KERNEL_PING_PORT is this path's answer (recv.ts consumes it) while a liveness ping is unanswered. */
  get expectsPong(): boolean {
    return this.pingsUnanswered > 0;
  }

  /** The kernel answered a liveness ping. */
  pongReceived(): void {
    this.pingsUnanswered--;
    this.path.conn.stack.counters.add(RDS_CTR.heartbeat_pong);
    this.path.conn.handshake.notePingAnswered();
  }

  start(): void {
    this.stop();
    const conn = this.path.conn;
    const every = conn.stack.options.heartbeatIntervalMs;
    this.pingsUnanswered = 0;
    this.kernelMode = conn.handshake.peer === 'kernel' && conn.transport.streamCarrier === true && !conn.isLoopback;
    if (every <= 0 || conn.transport.xmitControl === undefined) return;
    if (!conn.handshake.heartbeatMode && !this.kernelMode) return;
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
      if (!this.kernelMode && !cp.acks.ackInFlight) this.beat(0);
      return;
    }
    const silent = Date.now() - this.lastRx;
    if (this.kernelMode) {
      // One ping at a time: its pong (or anything else) says the kernel's side still moves.
      if (silent < every || this.pingsUnanswered > 0) {
        if (silent >= every * limit && this.pingsUnanswered > 0 && cp.conn.handshake.answersPings) {
          stack.counters.add(RDS_CTR.heartbeat_timeout);
          cp.drop(`no traffic for ${silent} ms, ping unanswered (kernel liveness)`);
        }
        return;
      }
      if (cp.tx.queueControl(KERNEL_PING_PORT, 0) === null) return;
      this.pingsUnanswered++;
      this.sent++;
      stack.counters.add(RDS_CTR.heartbeat_sent);
      return;
    }
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
