import {
  RDS_CONN_CONNECTING, RDS_CONN_DISCONNECTING, RDS_CONN_DOWN, RDS_CONN_ERROR, RDS_CONN_RESETTING, RDS_CONN_UP,
  RDS_FLAG_ACK_REQUIRED, RDS_FLAG_RETRANSMITTED, RDS_HEADER_SIZE, RDSSOCK_REFUSED_NO_SOCK,
} from '../constants.js';
import { RdsError } from '../errors.js';
import { encodeDataHeader, encodeHeader, OFF_ACK, OFF_EXTHDR, OFF_FLAGS, writeU64 } from '../wire/header.js';
import { packExtensions, readExtension, refusedExtension, type RdsExtension } from '../wire/extensions.js';
import { defer } from './defer.js';
import { Fifo } from './fifo.js';
import { RdsOutgoing, type SendOwner } from './message.js';
import { RX_PENDING, RX_READ, RxAckTracker, type RxEntry, type RxOutcome } from './rx-ack.js';
import { OwnAccount } from './own-budget.js';
import type { RdsConnection } from './connection.js';
import { RDS_CTR } from './stats.js';

/** A carrier that stayed up this long counts as established: its death resets the reconnect backoff. */
const RECONNECT_STABLE_MS = 1000;

export type ConnState = 'DOWN' | 'CONNECTING' | 'DISCONNECTING' | 'UP' | 'RESETTING' | 'ERROR';
export const CONN_STATE_NAMES: readonly ConnState[] = ['DOWN', 'CONNECTING', 'DISCONNECTING', 'UP', 'RESETTING', 'ERROR'];

/**
 * One lane of a connection: its own state machine, sequence spaces and queues (the kernel's
 * struct rds_conn_path). Everything that multipath multiplies lives here; what is shared by the
 * lanes (peer congestion map, negotiated path count, generation, capabilities) lives on the
 * connection.
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
  /** What we may acknowledge to an rds-socket peer. */
  readonly rx: RxAckTracker;
  /** Last time anything arrived on this path (heartbeat liveness). */
  lastRxAt = 0;
  /**
   * The node itself has stopped reading this path's carrier (receive limits; set by the
   * transport): the peer's silence is then ours, and is not held against it.
   */
  readPaused = false;
  /**
   * The peer's generation arrived on the current carrier: in its probe or pong (path 0), or in a
   * hello (lanes > 0, and older rds-socket peers on path 0). Until then we send no acks on it: a
   * peer that restarted must learn nothing numbered in its previous life's sequence space.
   */
  peerHelloSeen = false;
  /** The last multipath probe queued on this path (path 0), to queue none while one waits unsent. */
  lastProbe: RdsOutgoing | null = null;
  /** This incarnation has queued a probe on this path: the first one went ahead of any data. */
  probeQueued = false;
  /**
   * Messages with a pending confirmation that the peer acknowledged as queued but has not yet
   * reported read (RDSSOCK_CAP_CONFIRM peers), in sequence order. Their budget is back; their
   * confirmation resolves on the peer's read cursor, or rejects on its refusal or restart.
   */
  readonly awaitingRead = new Fifo<RdsOutgoing>();
  /** Refusals reported beyond the last read cursor (deduplicated: a new carrier repeats them). */
  private refusalsAhead = new Set<number>();
  /** Refusals at or before the last read cursor, as the peer counts them. */
  private refusalsCounted = 0;
  /** The highest read cursor the peer reported. */
  private readReported = 0;
  /**
   * The peer answered our probe on the current carrier: it has read our SPORT_IDX and path count,
   * so lane connections will be paired correctly. Lanes > 0 open only after this (path 0).
   */
  peerPongSeen = false;

  // ---- failover (rds-socket peers only) ----
  /** While this path is down past its grace period, its sockets' messages go to this live path. */
  failedOverTo: RdsConnPath | null = null;
  /** The grace period ran out while no other path was up: move as soon as one is. */
  failoverDue = false;
  /** Messages moved from this path to a live one. */
  movedByFailover = 0;
  /**
   * Receive side: messages first numbered on this path below this sequence arrived (moved over
   * another path), so a late copy still in this path's old carrier is a duplicate.
   */
  movedFloor = 0;
  /** Receive side: one past the last sequence accepted that was numbered on this path (not moved here). */
  nativeRxSeq = 0;
  /**
   * Nothing leaves this path until `holdingBehind` has had every message up to `holdSeq`
   * acknowledged, so no socket's message overtakes an earlier one still waiting there: after the
   * fan-out from lane 0, and when a failed-over path comes back.
   */
  holdingBehind: RdsConnPath | null = null;
  private holdSeq = 0;
  private failoverTimer: NodeJS.Timeout | null = null;

  private backoffMs = 0;
  /** When the current carrier came up; see queueReconnect. */
  private upAt = 0;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private pumpQueued = false;
  private pumping = false;
  private pumpAgain = false;
  /** Transport said "no more for now"; it calls kick() when it drains. */
  private blocked = false;
  // ack-mode bookkeeping
  private unackedPackets = 0;
  private unackedBytes = 0;
  private ackFlushQueued = false;
  private ackInFlight = false;
  private ackTimer: NodeJS.Timeout | null = null;
  private heartbeatTimer: NodeJS.Timeout | null = null;

  // counters shown per path
  sentMessages = 0;
  sentBytes = 0;
  recvMessages = 0;
  recvBytes = 0;
  upCount = 0;
  acksSent = 0;
  heartbeatsSent = 0;

  constructor(readonly conn: RdsConnection, readonly index: number) {
    this.rx = new RxAckTracker(conn.stack.options.ackDelayMaxMs);
  }

  get stateName(): ConnState {
    return CONN_STATE_NAMES[this.state]!;
  }

  private get stack() {
    return this.conn.stack;
  }

  private setState(next: number): void {
    if (next === this.state) return;
    const from = this.stateName;
    this.state = next;
    this.stack.pathStateChanged(this, from, this.stateName);
  }

  // ---- connection life cycle (connection.c / threads.c) ----

  /**
   * The peer showed it is back (it poked us): connect now rather than wait out the backoff, so
   * what we have queued for it leaves at once.
   */
  connectNow(): void {
    if (this.state !== RDS_CONN_DOWN) return;
    this.clearReconnect();
    this.backoffMs = 0;
    this.connectIfDown();
  }

  /** A reconnect or poke is scheduled (the connection is not idle). */
  get reconnectPending(): boolean {
    return this.reconnectTimer !== null;
  }

  /**
   * Application messages wait to be sent, acknowledged, or (acknowledged as queued) reported read
   * here; control frames (probes, pongs) do not count.
   */
  hasPendingData(): boolean {
    if (this.awaitingRead.length > 0) return true;
    for (const m of this.sendQueue) if (!m.done && m.fromSocket) return true;
    for (const m of this.retrans) if (!m.done && m.fromSocket) return true;
    return false;
  }

  /** Start connecting if the path is DOWN and no reconnect is already scheduled. */
  connectIfDown(): void {
    if (this.state !== RDS_CONN_DOWN || this.reconnectTimer !== null || this.stack.closing) return;
    // Lanes > 0: only the initiator opens them, and only once path 0 has settled the path count.
    if (this.index > 0 && (!this.conn.transport.initiates(this) || !this.conn.lanesMayConnect() || this.index >= this.conn.npaths)) return;
    this.setState(RDS_CONN_CONNECTING);
    this.conn.transport.connPathConnect(this);
  }

  /** The transport's outgoing carrier is established (smaller side), or it accepted one (larger side). */
  connectComplete(): void {
    if (this.state === RDS_CONN_UP) {
      // A new carrier replaced a live one (a connect duel or a restarted peer): resend what the
      // old one may have lost. The old connection is gone as surely as if its RST had come
      // first (often it is just behind): count and report it as any other drop, or a listener
      // that acts on 'drop' (a ping to learn when traffic resumes) never hears of it.
      this.stack.counters.add(RDS_CTR.conn_reset);
      this.stack.pathDropped(this, 'replaced by a new connection from the peer');
      this.setState(RDS_CONN_RESETTING);
      this.resetSendState();
    }
    this.clearReconnect();
    this.clearFailover();
    // The backoff is not reset here but when this carrier dies, if it lived long enough (drop).
    this.upAt = Date.now();
    this.blocked = false;
    this.ackInFlight = false;
    this.congPending = true;
    this.upCount++;
    this.lastRxAt = Date.now();
    this.peerHelloSeen = false;
    this.peerPongSeen = false;
    this.rx.replayRefusals();
    this.setState(RDS_CONN_UP);
    if (this.failedOverTo !== null) {
      // Back from failover: this path's sockets return, behind what went ahead on the other.
      const t = this.failedOverTo;
      this.failedOverTo = null;
      this.holdBehind(t, t.nextTxSeq - 1);
    }
    // Lanes > 0 exist only between rds-socket nodes (kernels get one path), so a hello there is
    // never seen by a kernel; on path 0 only older rds-socket peers get one (the probe serves).
    if (this.index > 0 || this.conn.wantsLegacyHello) this.sendLegacyHello();
    this.conn.handshake.pathUp(this);
    this.startHeartbeat();
    this.schedulePump();
    this.conn.retryFailovers();
  }

  connectFailures = 0;

  /** A transport without an ordering rule (IB) accepted an incoming connection for this DOWN path. */
  acceptIncoming(): void {
    if (this.state !== RDS_CONN_DOWN) return;
    this.clearReconnect();
    this.setState(RDS_CONN_CONNECTING);
  }

  /** A connect attempt failed before reaching UP. */
  connectFailed(): void {
    if (this.state !== RDS_CONN_CONNECTING) return;
    this.connectFailures++;
    this.setState(RDS_CONN_DOWN);
    if (this.sendQueue.length > 0) this.armFailover();
    this.queueReconnect(false);
  }

  /** rds_conn_path_drop: the carrier failed or misbehaved; shut it down and, if we initiate, reconnect. */
  drop(reason: string): void {
    if (this.state === RDS_CONN_DOWN || this.state === RDS_CONN_DISCONNECTING) return;
    const wasUp = this.state === RDS_CONN_UP;
    if (wasUp) this.stack.counters.add(RDS_CTR.conn_reset);
    this.stack.pathDropped(this, reason);
    this.setState(RDS_CONN_ERROR);
    this.setState(RDS_CONN_DISCONNECTING);
    this.stopHeartbeat();
    this.conn.transport.connPathShutdown(this);
    this.resetSendState();
    this.blocked = false;
    this.ackInFlight = false;
    this.setState(RDS_CONN_DOWN);
    if (this.sendQueue.length > 0) this.armFailover();
    this.queueReconnect(wasUp && Date.now() - this.upAt >= Math.min(RECONNECT_STABLE_MS, this.stack.options.reconnectMaxDelayMs));
  }

  /**
   * rds_queue_reconnect: only the initiating side reconnects, at once after a path that was UP and
   * then with random exponential backoff, while the connection is worth it (conn.wantsPeer: data
   * for the peer, or a path up within peerIdleTimeoutMs; the kernel retries forever, which makes
   * every stranger a target for good). A side that waits to be connected still pokes the peer
   * (path 0 only) while it has application messages for it, spaced by the same backoff.
   *
   * The kernel resets the backoff whenever a path reaches UP. Here it resets only when a carrier
   * that stayed up at least RECONNECT_STABLE_MS (or the maximum backoff, if smaller) dies
   * (`stableUp`): a peer that accepts and then resets at once (a 6.1 kernel still shutting down the
   * previous connection, a lossy link) would otherwise get a new connection immediately after
   * each reset, dozens a second, each resending the whole retransmit queue.
   */
  private queueReconnect(stableUp: boolean): void {
    if (this.stack.closing) return;
    const initiates = this.conn.transport.initiates(this);
    if (initiates ? !stableUp && !this.conn.wantsPeer() : !(this.index === 0 && this.hasPendingData())) return;
    const { reconnectMinDelayMs: min, reconnectMaxDelayMs: max } = this.stack.options;
    let delay: number;
    if (stableUp || this.backoffMs === 0) {
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
    if (!this.stack.referenced) this.reconnectTimer.unref();
  }

  private clearReconnect(): void {
    if (this.reconnectTimer !== null) {
      clearTimeout(this.reconnectTimer);
      this.reconnectTimer = null;
    }
  }

  setRef(ref: boolean): void {
    for (const t of [this.reconnectTimer, this.heartbeatTimer, this.ackTimer, this.failoverTimer]) {
      if (t) (ref ? t.ref() : t.unref());
    }
  }

  /** Stop all timers: the stack is closing. */
  dispose(): void {
    this.clearReconnect();
    this.clearFailover();
    this.stopHeartbeat();
    if (this.ackTimer) clearTimeout(this.ackTimer);
    this.ackTimer = null;
  }

  // ---- failover (RTRS-style, between rds-socket nodes) ----

  /** Start the grace period of a path that is not up and has messages waiting (once). */
  private armFailover(): void {
    const grace = this.stack.options.failoverGraceMs;
    if (this.failoverTimer !== null || this.failoverDue || !Number.isFinite(grace) || this.conn.npaths <= 1) return;
    this.failoverTimer = setTimeout(() => {
      this.failoverTimer = null;
      if (this.state === RDS_CONN_UP) return;
      this.failoverDue = true;
      this.failOver();
    }, grace);
    if (!this.stack.referenced) this.failoverTimer.unref();
  }

  private clearFailover(): void {
    if (this.failoverTimer !== null) clearTimeout(this.failoverTimer);
    this.failoverTimer = null;
    this.failoverDue = false;
  }

  /**
   * The path stayed down past its grace period: hand its messages, in order, to a live path,
   * where they get new sequence numbers and a record of where they were first numbered; the peer
   * drops any it already has. Until this path is back, its sockets send on the live path too.
   */
  failOver(): void {
    if (!this.conn.failoverAllowed) return;
    const target = this.conn.failoverTarget(this);
    if (target === null) return; // retried when a path comes up
    this.failoverDue = false;
    const stay: RdsOutgoing[] = [];
    let moved = 0;
    for (const m of this.sendQueue.drain()) {
      if (m.done) continue;
      if (!m.movable) {
        stay.push(m); // pings and probes belong to this path
        continue;
      }
      m.moveTo(target, target.nextTxSeq++);
      target.sendQueue.push(m);
      moved++;
    }
    this.sendQueue.unshiftAll(stay);
    this.movedByFailover += moved;
    this.stack.counters.add(RDS_CTR.failover_moved, moved);
    this.failedOverTo = target;
    // Whatever was waiting on, or redirected to, this path now depends on the target.
    // (The target itself no longer waits for us: our messages now queue in front of its later ones.)
    for (let i = 0; i < this.conn.npaths; i++) {
      const p = this.conn.paths[i]!;
      if (p.failedOverTo === this) p.failedOverTo = target;
      if (p.holdingBehind === this) {
        if (p === target) p.holdingBehind = null;
        else p.holdBehind(target, target.nextTxSeq - 1);
      }
    }
    this.holdingBehind = null;
    this.stack.pathFailedOver(this, target, moved);
    target.schedulePump();
  }

  /** See holdingBehind. */
  holdBehind(path: RdsConnPath, seq: number): void {
    if (seq <= 0 || path === this) return;
    this.holdingBehind = path;
    this.holdSeq = seq;
  }

  /** The path this one is waiting for, if it still has to. */
  currentHold(): RdsConnPath | null {
    return this.held() ? this.holdingBehind : null;
  }

  private held(): boolean {
    const h = this.holdingBehind;
    if (h === null) return false;
    const oldest = h.oldestUnacked();
    if (oldest !== undefined && oldest <= this.holdSeq) return true;
    this.holdingBehind = null;
    return false;
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
    this.unackedPackets = 0;
    this.unackedBytes = 0;
  }

  // ---- sending (send.c) ----

  /** Encodes and queues a message; the caller has done every check. */
  queue(payload: Uint8Array | readonly Uint8Array[], totalLen: number, sport: number, dport: number,
    owner: SendOwner | null, exts?: readonly RdsExtension[]): RdsOutgoing {
    if (!this.probeQueued && this.index === 0 && !this.conn.isLoopback) this.conn.handshake.queueProbe(this);
    const slab = this.stack.wireSlab;
    const wire = slab.alloc(RDS_HEADER_SIZE + totalLen);
    const seq = this.nextTxSeq++;
    encodeDataHeader(wire, 0, seq, totalLen, sport, dport);
    if (exts !== undefined && exts.length > 0) wire.set(packExtensions(exts), OFF_EXTHDR);
    if (payload instanceof Uint8Array) {
      wire.set(payload, RDS_HEADER_SIZE);
    } else {
      let off = RDS_HEADER_SIZE;
      for (const part of payload) {
        wire.set(part, off);
        off += part.length;
      }
    }
    const msg = new RdsOutgoing(wire, totalLen, seq, sport, dport, this.conn.faddr, this, owner);
    if (slab.recyclable(wire.length)) msg.recycleInto(slab);
    return this.enlist(msg);
  }

  /**
   * MSG_ZEROCOPY: queues a message whose payload stays in the caller's buffers (only the header is
   * encoded); `cookie` is reported to the owner once nothing references them any more.
   */
  queueZeroCopy(payload: Uint8Array | readonly Uint8Array[], totalLen: number, sport: number, dport: number,
    owner: SendOwner, cookie: number): RdsOutgoing {
    if (!this.probeQueued && this.index === 0 && !this.conn.isLoopback) this.conn.handshake.queueProbe(this);
    const wire = this.stack.wireSlab.alloc(RDS_HEADER_SIZE);
    const seq = this.nextTxSeq++;
    encodeDataHeader(wire, 0, seq, totalLen, sport, dport);
    const msg = new RdsOutgoing(wire, totalLen, seq, sport, dport, this.conn.faddr, this, owner);
    msg.zcPayload = payload;
    msg.zcCookie = cookie;
    return this.enlist(msg);
  }

  private enlist(msg: RdsOutgoing): RdsOutgoing {
    this.sendQueue.push(msg);
    this.stack.counters.add(RDS_CTR.send_queued);
    if (this.state === RDS_CONN_DOWN) this.connectIfDown();
    else this.schedulePump();
    if (this.state !== RDS_CONN_UP) this.armFailover();
    return msg;
  }

  /** Messages queued on the node's own account (pongs, probes), bounded by maxOwnQueued. */
  readonly own = new OwnAccount();

  /**
   * A control message (ping, pong, probe) from port `sport` to `dport`, sequenced like data and
   * charged to the path's own account. Null (nothing queued) when that account is full: the peer
   * has not acknowledged, or not read, maxOwnQueued of them.
   */
  queueControl(sport: number, dport: number, exts?: readonly RdsExtension[]): RdsOutgoing | null {
    if (this.own.queued >= this.stack.options.maxOwnQueued) return null;
    this.own.queued++;
    return this.queue(Buffer.alloc(0), 0, sport, dport, this.own, exts);
  }

  /** Local congestion map changed: send it before the next message. */
  queueCongUpdate(): void {
    this.congPending = true;
    this.stack.counters.add(RDS_CTR.cong_update_queued);
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
    defer(() => {
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
    if (this.holdingBehind !== null && this.held()) return;
    const t = this.conn.transport;
    const stack = this.stack;
    const ackMode = this.conn.ackMode;
    // One clock reading per batch: every message of a burst leaves in the same instant anyway.
    const now = performance.now();
    const wallNow = Date.now();
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
            stack.counters.add(RDS_CTR.send_queue_empty);
            break;
          }
          if (msg.done) continue; // cancelled while queued
          this.retrans.push(msg);
          if (msg.sentAt === 0) msg.sentAt = now;
          this.sentMessages++;
          this.sentBytes += msg.len;
          if (msg.flags & RDS_FLAG_RETRANSMITTED) stack.counters.add(RDS_CTR.send_retransmitted);
          if (ackMode) this.prepareAckMode(msg, wallNow);
          if (!t.xmit(this, msg)) this.blocked = true;
        }
      } while (this.pumpAgain && this.state === RDS_CONN_UP && !this.blocked);
    } finally {
      if (this.state === RDS_CONN_UP) t.xmitEnd?.(this);
      this.pumping = false;
    }
  }

  /**
   * Between rds-socket peers: piggyback our latest ack in h_ack and ask for an ack (ACK_REQUIRED)
   * often enough that the sender's queue drains: every max_unacked_packets messages or
   * max_unacked_bytes bytes, on retransmissions, when the sending socket is half full, and on the
   * last message of a burst.
   */
  private prepareAckMode(msg: RdsOutgoing, now: number): void {
    const { maxUnackedPackets, maxUnackedBytes } = this.stack.options;
    if (this.acksAllowed) {
      this.rx.advance(now);
      writeU64(msg.wire, OFF_ACK, this.rx.ackSeq);
      this.rx.markSent();
    } else {
      writeU64(msg.wire, OFF_ACK, 0);
    }
    this.unackedPackets++;
    this.unackedBytes += msg.len;
    let flags = msg.wire[OFF_FLAGS]! & ~RDS_FLAG_ACK_REQUIRED;
    if (this.unackedPackets >= maxUnackedPackets || this.unackedBytes >= maxUnackedBytes
      || (flags & RDS_FLAG_RETRANSMITTED) !== 0 || this.sendQueue.length === 0 || msg.owner?.wantsAck?.() === true) {
      flags |= RDS_FLAG_ACK_REQUIRED;
      this.unackedPackets = 0;
      this.unackedBytes = 0;
      this.stack.counters.add(RDS_CTR.send_ack_required);
    }
    msg.wire[OFF_FLAGS] = flags;
  }

  /**
   * The peer has every message up to and including `seq`: free them in order. From a peer that
   * reports reads (RDSSOCK_CAP_CONFIRM) this is flow control only: a pending confirmation waits
   * in awaitingRead for its read cursor.
   */
  ackThrough(seq: number): void {
    let freed = false;
    const now = performance.now();
    const holdConfirm = this.conn.confirmsReads;
    for (;;) {
      const m = this.retrans.peek();
      if (m === undefined || m.seq > seq) break;
      this.retrans.shift();
      if (!m.done && m.sentAt > 0) this.recordLatency(now - m.sentAt);
      if (holdConfirm && m.settle !== null && !m.done && m.seq > this.readReported) {
        m.complete(undefined, true);
        this.awaitingRead.push(m);
      } else {
        // Nothing to hold: no confirmation pending, an older peer, or a resent message that a read
        // report already covered (it was read, or its refusal already rejected it).
        m.complete();
      }
      freed = true;
    }
    if (freed) this.conn.releaseHolds(this);
  }

  /**
   * RDSSOCK_EXTHDR_READ: the peer's applications took every message up to `seq` except those it
   * reported refused; `refused` of them lie at or before `seq`. If we heard of fewer (a report
   * died with a carrier), which confirmations were read is unknown: they reject.
   */
  readThrough(seq: number, refused: number): void {
    let counted = this.refusalsCounted;
    for (const s of this.refusalsAhead) {
      if (s <= seq) {
        counted++;
        this.refusalsAhead.delete(s);
      }
    }
    const unknown = refused > counted;
    this.refusalsCounted = refused;
    if (seq > this.readReported) this.readReported = seq;
    const unplaced = (m: RdsOutgoing): void => {
      if (m.settle === null) return;
      this.stack.counters.add(RDS_CTR.send_confirm_reset);
      m.confirm(new RdsError('ECONNRESET', `${this.conn.faddr} lost its report of which messages it read (a connection reset); this one may not have been read`));
    };
    for (;;) {
      const m = this.awaitingRead.peek();
      if (m === undefined || m.seq > seq) break;
      this.awaitingRead.shift();
      if (!unknown) m.confirm();
      else unplaced(m);
    }
    // After a reconnect, messages the report covers may wait in the send queue to be resent.
    if (unknown) for (const m of this.sendQueue) if (m.seq <= seq && !m.done) unplaced(m);
  }

  /** RDSSOCK_EXTHDR_REFUSED: the peer did not deliver our message `seq` (RDSSOCK_REFUSED_*). */
  refusedByPeer(seq: number, reason: number): void {
    // A repeat (a new carrier repeats recent refusals), or one a read cursor already counted.
    if (this.refusalsAhead.has(seq) || seq <= this.readReported) return;
    // Bounded against a peer that invents refusals: one not remembered is caught by the count in
    // the next read report, and what it covers rejects rather than resolves.
    if (this.refusalsAhead.size < MAX_REFUSALS_AHEAD) this.refusalsAhead.add(seq);
    const noSock = reason === RDSSOCK_REFUSED_NO_SOCK;
    this.stack.counters.add(noSock ? RDS_CTR.send_refused_no_sock : RDS_CTR.send_discarded_unread);
    const m = findBySeq(this.awaitingRead, seq) ?? findBySeq(this.retrans, seq) ?? findBySeq(this.sendQueue, seq);
    if (m === undefined || m.settle === null) return;
    const where = `${this.conn.faddr}:${m.dport}`;
    m.confirm(noSock
      ? new RdsError('ECONNREFUSED', `no socket is bound to ${where}: the peer dropped the message`)
      : new RdsError('ECONNRESET', `the socket bound to ${where} was closed before reading the message`));
  }

  /** The peer restarted: confirmations waiting for its old life's read cursor will never resolve. */
  peerRestarted(): void {
    for (const m of this.awaitingRead.drain()) {
      if (m.settle === null) continue;
      this.stack.counters.add(RDS_CTR.send_confirm_reset);
      m.confirm(new RdsError('ECONNRESET', `${this.conn.faddr} restarted before its application read the message (it had acknowledged it as queued)`));
    }
    this.refusalsAhead.clear();
    this.refusalsCounted = 0;
    this.readReported = 0;
  }

  /** Send-to-acknowledge times in power-of-two buckets: [<1 ms, <2 ms, <4 ms, ... , >= 2^15 ms]. */
  readonly latencyHistogram: number[] = new Array<number>(17).fill(0);
  /** Sum of the send-to-acknowledge times counted in latencyHistogram, ms (a Prometheus histogram's _sum). */
  latencySumMs = 0;

  private recordLatency(ms: number): void {
    this.latencySumMs += ms;
    // Bucket b holds [2^(b-1), 2^b) ms: one past the position of the highest bit of floor(ms).
    const b = ms < 1 ? 0 : Math.min(16, 32 - Math.clz32(Math.floor(ms)));
    this.latencyHistogram[b]!++;
  }

  /** Sequence of the oldest message not yet acknowledged, if any. */
  oldestUnacked(): number | undefined {
    for (const m of this.retrans) if (!m.done) return m.seq;
    for (const m of this.sendQueue) if (!m.done) return m.seq;
    return undefined;
  }

  // ---- acknowledging what we received (rds-socket peers only) ----

  /** A sequenced message was accepted on this path; null when nothing will be acknowledged. */
  recordReceived(seq: number, consumed: boolean, ackRequired: boolean): RxEntry | null {
    if (!this.conn.tracksReceipts) return null;
    // recvIncoming has just stamped lastRxAt: no second clock reading per message.
    const e = this.rx.record(seq, consumed ? RX_READ : RX_PENDING, ackRequired, this.lastRxAt, this);
    if (this.conn.ackMode && (consumed || ackRequired)) this.requestAck();
    return e;
  }

  /** The application took a message (RX_READ), or it was refused or discarded: the acks may move. */
  consumed(e: RxEntry, outcome: RxOutcome = RX_READ): void {
    if (this.rx.settle(e, outcome) && this.conn.ackMode) this.requestAck();
  }

  /** A heartbeat asked for an immediate answer. */
  forceAck(): void {
    this.rx.force();
    this.requestAck();
  }

  requestAck(): void {
    if (this.ackFlushQueued) return;
    this.ackFlushQueued = true;
    // After this turn's microtasks: the application's receive loop runs first, so the ack covers
    // what it has just taken, and outgoing data may carry the ack instead.
    setImmediate(() => {
      this.ackFlushQueued = false;
      this.flushAck();
    });
  }

  private flushAck(): void {
    if (this.state !== RDS_CONN_UP) return;
    if (!this.conn.ackMode || !this.acksAllowed) {
      // No RDS-level acks on this path (rdsAcks: false, or not yet allowed), but we advertise
      // heartbeats: answer one with a bare frame that acknowledges nothing, or the peer takes
      // our silence for a dead link and drops the carrier every few intervals.
      if (!this.ackInFlight && this.rx.takeForced()) this.sendAckFrame(0);
      return;
    }
    const wait = this.rx.advance(Date.now());
    if (wait >= 0 && Number.isFinite(wait) && this.ackTimer === null) {
      // An unread message holds the ack; acknowledge it as queued once it has waited long enough.
      this.ackTimer = setTimeout(() => {
        this.ackTimer = null;
        this.requestAck();
      }, wait + 1);
      if (!this.stack.referenced) this.ackTimer.unref();
    }
    if (!this.ackWanted() || this.ackInFlight) return;
    this.sendAckFrame(0);
  }

  private ackWanted(): boolean {
    const rx = this.rx;
    return rx.wanted || (this.conn.confirmsReads && (rx.readWanted || rx.toReport.length > 0));
  }

  /** Before a graceful close: tell the peer everything we have, asked for or not. */
  finalAck(): void {
    if (this.state !== RDS_CONN_UP || !this.conn.ackMode || !this.acksAllowed) return;
    this.rx.advance(Date.now());
    if (this.rx.unsent || (this.conn.confirmsReads && (this.rx.readUnsent || this.rx.toReport.length > 0))) this.sendAckFrame(0);
  }

  /** One ack-only frame in flight at a time; when it is out, send again if more is wanted. */
  private sendAckFrame(flags: number): void {
    if (this.conn.transport.xmitControl === undefined) return;
    this.ackInFlight = true;
    const allowed = this.acksAllowed;
    const ack = allowed ? this.rx.ackSeq : 0;
    if (allowed) this.rx.markSent();
    let exthdr: Uint8Array | undefined;
    if (allowed && this.conn.confirmsReads) {
      // Refusals first, each in a frame of its own, so the peer has them before a read cursor
      // that passes them (frames on one carrier arrive in order).
      for (const r of this.rx.toReport.splice(0)) {
        const f = Buffer.allocUnsafe(RDS_HEADER_SIZE);
        encodeHeader(f, 0, { ack, exthdr: packExtensions([refusedExtension(r.seq, r.reason)]) });
        this.sendControl(f);
      }
      exthdr = packExtensions([readExtension(this.rx.readSeq, this.rx.refusedThroughRead)]);
      this.rx.markReadSent();
    }
    this.acksSent++;
    this.stack.counters.add(RDS_CTR.send_ack_frames);
    const frame = Buffer.allocUnsafe(RDS_HEADER_SIZE);
    encodeHeader(frame, 0, { ack, flags, exthdr });
    this.sendControl(frame, () => {
      this.ackInFlight = false;
      if (this.ackWanted()) this.requestAck();
    });
  }

  /** An unsequenced header-only frame, ahead of anything queued. */
  private sendControl(frame: Buffer, done: () => void = () => {}): void {
    const t = this.conn.transport;
    if (t.xmitControl === undefined || this.state !== RDS_CONN_UP) {
      done();
      return;
    }
    t.xmitControl(this, frame, done);
  }

  /**
   * Acks may name sequence numbers on this carrier: the peer's generation arrived on it (probe,
   * pong or hello; see peerHelloSeen), or the peer is a kernel on a transport that needs acks.
   */
  private get acksAllowed(): boolean {
    return this.peerHelloSeen || this.conn.acksWithoutHello;
  }

  /** The peer's generation arrived on this carrier (its probe or pong, or an older peer's hello). */
  helloReceived(): void {
    if (this.peerHelloSeen) return;
    this.peerHelloSeen = true;
    if (this.conn.ackMode) this.requestAck();
  }

  /** The unsequenced hello an older rds-socket peer waits for before acknowledging on this carrier. */
  sendLegacyHello(): void {
    this.sendControl(this.conn.handshake.helloFrame());
  }

  /** The peer's answer to our probe arrived on this carrier. */
  pongReceived(): void {
    this.peerPongSeen = true;
    if (this.index === 0) this.conn.openLanes();
  }

  // ---- heartbeat (rds-socket peers only) ----

  private startHeartbeat(): void {
    this.stopHeartbeat();
    const every = this.stack.options.heartbeatIntervalMs;
    if (every <= 0 || !this.conn.heartbeatMode || this.conn.transport.xmitControl === undefined) return;
    this.heartbeatTimer = setInterval(() => this.heartbeatTick(), every);
    if (!this.stack.referenced) this.heartbeatTimer.unref();
  }

  /** The peer's capabilities became known: start what they allow. */
  capabilitiesChanged(): void {
    if (this.state === RDS_CONN_UP && this.heartbeatTimer === null) this.startHeartbeat();
    if (this.conn.ackMode) this.requestAck();
  }

  private stopHeartbeat(): void {
    if (this.heartbeatTimer !== null) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = null;
  }

  private heartbeatTick(): void {
    if (this.state !== RDS_CONN_UP) return;
    const { heartbeatIntervalMs: every, heartbeatMissedLimit: limit } = this.stack.options;
    if (this.readPaused) {
      // We hear nothing because we read nothing. Keep the peer hearing from us, so that its
      // heartbeat does not drop a carrier that is only waiting for our application.
      this.lastRxAt = Date.now();
      if (!this.ackInFlight) {
        this.heartbeatsSent++;
        this.stack.counters.add(RDS_CTR.heartbeat_sent);
        this.sendAckFrame(0);
      }
      return;
    }
    const silent = Date.now() - this.lastRxAt;
    if (silent >= every * limit) {
      this.stack.counters.add(RDS_CTR.heartbeat_timeout);
      this.drop(`no traffic for ${silent} ms (heartbeat)`);
      return;
    }
    if (silent >= every && !this.ackInFlight) {
      this.heartbeatsSent++;
      this.stack.counters.add(RDS_CTR.heartbeat_sent);
      this.sendAckFrame(RDS_FLAG_ACK_REQUIRED);
    }
  }

  /**
   * Bytes arrived from the peer. Transports call it once per read or completion batch, not per
   * frame: it feeds the heartbeat's silence check and stamps the frames of that batch.
   */
  noteRxActivity(): void {
    this.lastRxAt = Date.now();
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

const MAX_REFUSALS_AHEAD = 8192;

function findBySeq(q: Fifo<RdsOutgoing>, seq: number): RdsOutgoing | undefined {
  for (const m of q) if (m.seq === seq) return m;
  return undefined;
}

export { RDS_CONN_DOWN, RDS_CONN_CONNECTING, RDS_CONN_DISCONNECTING, RDS_CONN_UP, RDS_CONN_RESETTING, RDS_CONN_ERROR };
