import {
  RDS_CONN_CONNECTING, RDS_CONN_DISCONNECTING, RDS_CONN_DOWN, RDS_CONN_ERROR, RDS_CONN_RESETTING, RDS_CONN_UP,
  RDS_HEADER_SIZE,
} from '../constants.js';
import { encodeHeader } from '../wire/header.js';
import { packExtensions, type RdsExtension } from '../wire/extensions.js';
import { Fifo } from './fifo.js';
import { RdsOutgoing, type SendOwner } from './message.js';
import type { RdsConnection } from './connection.js';

export type ConnState = 'DOWN' | 'CONNECTING' | 'DISCONNECTING' | 'UP' | 'RESETTING' | 'ERROR';
export const CONN_STATE_NAMES: readonly ConnState[] = ['DOWN', 'CONNECTING', 'DISCONNECTING', 'UP', 'RESETTING', 'ERROR'];

/**
 * One lane of a connection: its own state machine, sequence spaces and queues (the kernel's
 * struct rds_conn_path). Everything that multipath multiplies lives here; what is shared by the
 * lanes (peer congestion map, negotiated path count, generation) lives on the connection.
 */
export class RdsConnPath {
  state = RDS_CONN_DOWN;
  /** Sequence of the next message queued on this path; assigned at enqueue, from 1. */
  nextTxSeq = 1;
  /** One past the last sequence accepted; survives reconnects (spec §2.5). */
  nextRxSeq = 0;
  readonly sendQueue = new Fifo<RdsOutgoing>();
  /** Sent, not yet acknowledged; resent first after a reconnect. */
  readonly retrans = new Fifo<RdsOutgoing>();
  /** The full local congestion map must go out before the next message. */
  congPending = false;
  /** The transport's per-path state (socket, reassembly). */
  tdata: unknown = null;

  private backoffMs = 0;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private pumpQueued = false;
  private pumping = false;
  private pumpAgain = false;
  /** Transport said "no more for now"; it calls kick() when it drains. */
  private blocked = false;

  // counters shown per path
  sentMessages = 0;
  sentBytes = 0;
  recvMessages = 0;
  recvBytes = 0;
  upCount = 0;

  constructor(readonly conn: RdsConnection, readonly index: number) {}

  get stateName(): ConnState {
    return CONN_STATE_NAMES[this.state]!;
  }

  private setState(next: number): void {
    if (next === this.state) return;
    const from = this.stateName;
    this.state = next;
    this.conn.stack.pathStateChanged(this, from, this.stateName);
  }

  // ---- connection life cycle (connection.c / threads.c) ----

  /** Start connecting if the path is DOWN and no reconnect is already scheduled. */
  connectIfDown(): void {
    if (this.state !== RDS_CONN_DOWN || this.reconnectTimer !== null || this.conn.stack.closing) return;
    this.setState(RDS_CONN_CONNECTING);
    this.conn.transport.connPathConnect(this);
  }

  /** The transport's outgoing carrier is established (smaller side), or it accepted one (larger side). */
  connectComplete(): void {
    if (this.state === RDS_CONN_UP) {
      // A new carrier replaced a live one (a connect duel or a restarted peer): resend what the
      // old one may have lost.
      this.setState(RDS_CONN_RESETTING);
      this.resetSendState();
    }
    this.clearReconnect();
    this.backoffMs = 0;
    this.blocked = false;
    this.congPending = true;
    this.upCount++;
    this.setState(RDS_CONN_UP);
    this.schedulePump();
  }

  /** A connect attempt failed before reaching UP (or a larger side's poke finished). */
  connectFailed(): void {
    if (this.state !== RDS_CONN_CONNECTING) return;
    this.setState(RDS_CONN_DOWN);
    this.queueReconnect(false);
  }

  /** rds_conn_path_drop: the carrier failed or misbehaved; shut it down and, if we initiate, reconnect. */
  drop(reason: string): void {
    if (this.state === RDS_CONN_DOWN || this.state === RDS_CONN_DISCONNECTING) return;
    const wasUp = this.state === RDS_CONN_UP;
    if (wasUp) this.conn.stack.stats.inc('conn_reset');
    this.conn.stack.pathDropped(this, reason);
    this.setState(RDS_CONN_ERROR);
    this.setState(RDS_CONN_DISCONNECTING);
    this.conn.transport.connPathShutdown(this);
    this.resetSendState();
    this.blocked = false;
    this.setState(RDS_CONN_DOWN);
    this.queueReconnect(wasUp);
  }

  /**
   * rds_queue_reconnect: only the initiating side reconnects, at once after a path that was UP and
   * then with random exponential backoff. A side that waits to be connected still pokes the peer
   * (path 0 only) while it has something to send, spaced by the same backoff.
   */
  private queueReconnect(wasUp: boolean): void {
    const stack = this.conn.stack;
    if (stack.closing) return;
    const initiates = this.conn.transport.initiates(this);
    if (!initiates && !(this.index === 0 && this.sendQueue.length > 0)) return;
    const { reconnectMinDelayMs: min, reconnectMaxDelayMs: max } = stack.options;
    let delay: number;
    if (wasUp || this.backoffMs === 0) {
      delay = 0;
      this.backoffMs = min;
    } else {
      delay = Math.floor(Math.random() * this.backoffMs);
      this.backoffMs = Math.min(this.backoffMs * 2, max);
    }
    this.clearReconnect();
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.connectIfDown();
    }, delay);
    if (!stack.referenced) this.reconnectTimer.unref();
  }

  private clearReconnect(): void {
    if (this.reconnectTimer !== null) {
      clearTimeout(this.reconnectTimer);
      this.reconnectTimer = null;
    }
  }

  setRef(ref: boolean): void {
    if (this.reconnectTimer) (ref ? this.reconnectTimer.ref() : this.reconnectTimer.unref());
  }

  /** Stop all timers: the stack is closing. */
  dispose(): void {
    this.clearReconnect();
  }

  /**
   * rds_send_path_reset: everything sent but unacknowledged goes back in front of the send queue,
   * flagged RETRANSMITTED, with its original sequence number; a pending map is forgotten (a fresh
   * one follows the next UP).
   */
  private resetSendState(): void {
    const resend: RdsOutgoing[] = [];
    for (const m of this.retrans.drain()) {
      if (m.done) continue;
      m.markRetransmitted();
      resend.push(m);
    }
    this.sendQueue.unshiftAll(resend);
    this.congPending = false;
  }

  // ---- sending (send.c) ----

  /** Encodes and queues a message; the caller has done every check. */
  queue(payload: Uint8Array | readonly Uint8Array[], totalLen: number, sport: number, dport: number,
    owner: SendOwner | null, exts?: readonly RdsExtension[]): RdsOutgoing {
    const wire = Buffer.allocUnsafe(RDS_HEADER_SIZE + totalLen);
    const seq = this.nextTxSeq++;
    encodeHeader(wire, 0, {
      sequence: seq, len: totalLen, sport, dport,
      ...(exts && exts.length > 0 ? { exthdr: packExtensions(exts) } : {}),
    });
    if (payload instanceof Uint8Array) {
      wire.set(payload, RDS_HEADER_SIZE);
    } else {
      let off = RDS_HEADER_SIZE;
      for (const part of payload) {
        wire.set(part, off);
        off += part.length;
      }
    }
    const msg = new RdsOutgoing(wire, seq, sport, dport, this.conn.faddr, this, owner);
    this.sendQueue.push(msg);
    this.conn.stack.stats.inc('send_queued');
    if (this.state === RDS_CONN_DOWN) this.connectIfDown();
    else this.schedulePump();
    return msg;
  }

  /** A control message (ping, pong, probe) from port `sport` to `dport`, sequenced like data. */
  queueControl(sport: number, dport: number, exts?: readonly RdsExtension[]): void {
    this.queue(Buffer.alloc(0), 0, sport, dport, null, exts);
  }

  /** Local congestion map changed: send it before the next message. */
  queueCongUpdate(): void {
    this.congPending = true;
    this.conn.stack.stats.inc('cong_update_queued');
    if (this.state === RDS_CONN_UP) this.schedulePump();
  }

  /** The transport can take more. */
  kick(): void {
    this.blocked = false;
    this.schedulePump();
  }

  schedulePump(): void {
    if (this.pumpQueued) return;
    this.pumpQueued = true;
    // One pump per turn of the event loop, so a burst of sendmsg calls goes out as one batch.
    queueMicrotask(() => {
      this.pumpQueued = false;
      this.pump();
    });
  }

  /** rds_send_xmit: move queued messages to the transport while it accepts them. */
  pump(): void {
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    if (this.state !== RDS_CONN_UP || this.blocked) return;
    const t = this.conn.transport;
    const stack = this.conn.stack;
    this.pumping = true;
    t.xmitBegin?.(this);
    try {
      do {
        this.pumpAgain = false;
        while (this.state === RDS_CONN_UP && !this.blocked) {
          if (this.congPending) {
            this.congPending = false;
            if (!t.xmitCong(this, stack.congMap(this.conn.laddr).bits)) {
              this.blocked = true;
              break;
            }
            continue;
          }
          const msg = this.sendQueue.shift();
          if (msg === undefined) {
            stack.stats.inc('send_queue_empty');
            break;
          }
          if (msg.done) continue; // cancelled while queued
          this.retrans.push(msg);
          this.sentMessages++;
          this.sentBytes += msg.len;
          if (msg.flags & 0x04) stack.stats.inc('send_retransmitted');
          if (!t.xmit(this, msg)) this.blocked = true;
        }
      } while (this.pumpAgain && this.state === RDS_CONN_UP && !this.blocked);
    } finally {
      if (this.state === RDS_CONN_UP) t.xmitEnd?.(this);
      this.pumping = false;
    }
  }

  /** The peer has every message up to and including `seq`: free them in order. */
  ackThrough(seq: number): void {
    for (;;) {
      const m = this.retrans.peek();
      if (m === undefined || m.seq > seq) break;
      this.retrans.shift();
      m.complete();
    }
  }

  /** Messages waiting to be sent or acknowledged (cancelled ones excluded). */
  pendingCount(): { send: number; retrans: number } {
    let send = 0;
    let retrans = 0;
    for (const m of this.sendQueue) if (!m.done) send++;
    for (const m of this.retrans) if (!m.done) retrans++;
    return { send, retrans };
  }
}

export { RDS_CONN_DOWN, RDS_CONN_CONNECTING, RDS_CONN_DISCONNECTING, RDS_CONN_UP, RDS_CONN_RESETTING, RDS_CONN_ERROR };
