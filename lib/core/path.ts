import {
  RDS_CONN_CONNECTING,
  RDS_CONN_DISCONNECTING,
  RDS_CONN_DOWN,
  RDS_CONN_ERROR,
  RDS_CONN_RESETTING,
  RDS_CONN_UP,
} from '../constants.js';
import { AckPacer } from './ext/ack-pacing.js';
import type { CarrierKind } from './carrier.js';
import type { RdsConnection } from './connection.js';
import { Heartbeat } from './ext/heartbeat.js';
import { type RxMark, RxSequence } from './rx-seq.js';
import { railMayConnect } from './ext/rail.js';
import { PathControl } from './ext/path-control.js';
import { startsWithHello } from './handshake-frames.js';
import { worthRedialling } from './ext/reconnect-rule.js';
import { PathSend } from './send-queue.js';
import { RDS_CTR } from './stats.js';

/** A carrier that stayed up this long counts as established: its death resets the reconnect backoff. */
const RECONNECT_STABLE_MS = 1000;

/** A path's state, named as the kernel's enum rds_conn_state. */
export type ConnState = 'DOWN' | 'CONNECTING' | 'DISCONNECTING' | 'UP' | 'RESETTING' | 'ERROR';
export const CONN_STATE_NAMES: readonly ConnState[] = [
  'DOWN',
  'CONNECTING',
  'DISCONNECTING',
  'UP',
  'RESETTING',
  'ERROR',
];

/**
 * The moves a path may make, by state number (as the RDS_CONN_* constants): DOWN connects, or
 * takes an accepted carrier straight to UP; UP resets when a new carrier replaces a live one;
 * every drop goes through ERROR and DISCONNECTING back to DOWN.
 */
const LEGAL_MOVES: readonly (readonly number[])[] = [];
(LEGAL_MOVES as number[][])[RDS_CONN_DOWN] = [RDS_CONN_CONNECTING, RDS_CONN_UP];
(LEGAL_MOVES as number[][])[RDS_CONN_CONNECTING] = [RDS_CONN_UP, RDS_CONN_DOWN, RDS_CONN_ERROR];
(LEGAL_MOVES as number[][])[RDS_CONN_UP] = [RDS_CONN_RESETTING, RDS_CONN_ERROR];
(LEGAL_MOVES as number[][])[RDS_CONN_RESETTING] = [RDS_CONN_UP, RDS_CONN_ERROR];
(LEGAL_MOVES as number[][])[RDS_CONN_ERROR] = [RDS_CONN_DISCONNECTING];
(LEGAL_MOVES as number[][])[RDS_CONN_DISCONNECTING] = [RDS_CONN_DOWN];

/**
 * One lane of a connection (the kernel's struct rds_conn_path): its state machine, reconnect
 * backoff and carrier, and its parts: the send queue and pump (PathSend, send.c), acknowledgement
 * pacing (AckPacer), heartbeat (Heartbeat) and receive sequence (RxSequence). What is shared by
 * the lanes (congestion map, path count, generation, capabilities, failover) lives on the
 * connection. Nothing outside writes its fields: moves go through transition(), a carrier's end
 * through carrierLost().
 */
export class RdsConnPath {
  private st = RDS_CONN_DOWN;
  readonly tx: PathSend;
  readonly acks: AckPacer;
  readonly heartbeat: Heartbeat;
  /** The peer's numbering on this path; survives reconnects (spec §2.5). */
  readonly rxSeq = new RxSequence();
  /** Where rxSeq stood when a carrier that may be another lane's was taken (see laneTakenForPath0). */
  private rxAtCarrier: RxMark | null = null;
  private carrierKind: CarrierKind<unknown> | null = null;
  private carrierObj: unknown = null;
  private paused = false;
  private pongSeen = false;
  private shown = false;
  private wanted = false;
  private backoffMs = 0;
  /** When the current carrier came up; see queueReconnect. */
  private upAt = 0;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private ups = 0;
  private failures = 0;
  private refusedMoves = 0;
  /** The operator's controls: disconnect/reconnect and maxReconnectAttempts (path-control.ts). @internal */
  readonly control = new PathControl(this);

  constructor(
    readonly conn: RdsConnection,
    readonly index: number,
  ) {
    this.tx = new PathSend(this);
    this.acks = new AckPacer(this);
    this.heartbeat = new Heartbeat(this);
  }

  /** RDS_CONN_*. */
  get state(): number {
    return this.st;
  }

  get stateName(): ConnState {
    return CONN_STATE_NAMES[this.st]!;
  }

  /**
   * rds_conn_path_transition: move from `from` to `to`. A path that is not in `from`, or a move
   * the state machine does not have, is refused: counted (conn_transition_refused), never applied.
   */
  transition(from: number, to: number): boolean {
    if (this.st !== from || !(LEGAL_MOVES[from]?.includes(to) ?? false)) {
      this.refusedMoves++;
      this.conn.stack.counters.add(RDS_CTR.conn_transition_refused);
      return false;
    }
    this.st = to;
    this.conn.pathStateChanged(CONN_STATE_NAMES[from]!, CONN_STATE_NAMES[to]!);
    this.conn.stack.pathEvents.stateChanged(this, CONN_STATE_NAMES[from]!, CONN_STATE_NAMES[to]!);
    return true;
  }

  /** Moves transition() refused on this path. */
  get refusedTransitions(): number {
    return this.refusedMoves;
  }

  // ---- the carrier ----

  /**
   * The transport's per-path carrier object of `kind`, made on first use; typed by its kind. A
   * path holds one at a time (one transport per connection).
   */
  carrier<C>(kind: CarrierKind<C>): C {
    if (this.carrierKind !== kind) {
      this.carrierObj = kind.make(this);
      this.carrierKind = kind;
    }
    return this.carrierObj as C;
  }

  /** The carrier object of `kind` if one was made (diagnostics, capability changes). */
  carrierIf<C>(kind: CarrierKind<C>): C | null {
    return this.carrierKind === kind ? (this.carrierObj as C) : null;
  }

  /**
   * The carrier failed or closed (the transport's one report of it): a connect that had not yet
   * completed failed, a live carrier is dropped.
   */
  carrierLost(reason: string): void {
    if (this.st === RDS_CONN_CONNECTING) this.connectFailed();
    else this.drop(reason);
  }

  /**
   * The node itself has stopped reading this path's carrier (receive limits; set by the
   * transport): the peer's silence is then ours, and is not held against it.
   */
  get readPaused(): boolean {
    return this.paused;
  }

  setReadPaused(paused: boolean): void {
    this.paused = paused;
  }

  // ---- connection life cycle (connection.c / threads.c) ----

  /**
   * The peer showed it is back (it poked us): connect now rather than wait out the backoff, so
   * what we have queued for it leaves at once.
   */
  connectNow(): void {
    if (this.st !== RDS_CONN_DOWN) return;
    this.cancelReconnect();
    this.backoffMs = 0;
    this.connectIfDown();
  }

  /**
   * Lane > 0: something wanted this lane (a message queued on it, or the peer poked for it); from
   * then on it opens with the others (RdsConnection.openLanes) and reconnects like path 0.
   */
  get laneWanted(): boolean {
    return this.wanted;
  }

  /** The peer (larger address, lanes on demand) poked for this lane: connect it now. */
  pokedFor(): void {
    this.wanted = true;
    this.connectNow();
  }

  /** A reconnect or poke is scheduled (the connection is not idle). */
  get reconnectPending(): boolean {
    return this.reconnectTimer !== null;
  }

  /** Start connecting if the path is DOWN and no reconnect is already scheduled. */
  connectIfDown(): void {
    if (this.st !== RDS_CONN_DOWN || this.reconnectTimer !== null || this.conn.stack.closing || this.control.held)
      return;
    // Rails (index >= 8): the dialling side, once the peer is known to run them (rail.ts).
    if (this.index >= this.conn.stack.maxPaths) {
      if (!railMayConnect(this)) return;
    } else if (this.index > 0) {
      // Lanes > 0: only once path 0 has settled the path count; the initiator connects them, and the
      // larger side pokes for one only when lanes open on demand (it has messages for this one).
      if (this.index >= this.conn.npaths) return;
      if (!this.conn.lanesMayConnect()) {
        // Lanes open behind path 0 (openLanes, once it is up and the peer answered on it). A lane
        // with messages while path 0 is down brings path 0 up first: dials it, or (larger side)
        // pokes on it, as the kernel does for anything it has to send (spec §2.2). Without this a
        // message sent on a lane to a restarted peer waited for ever.
        if (this.tx.hasPendingData()) this.conn.path(0)!.connectIfDown();
        return;
      }
      if (!this.conn.transport.initiates(this) && !(this.conn.handshake.lazyLanes && this.tx.hasPendingData())) return;
      this.wanted = true;
    }
    this.transition(RDS_CONN_DOWN, RDS_CONN_CONNECTING);
    this.conn.transport.connPathConnect(this);
  }

  /** The transport's outgoing carrier is established (smaller side), or it accepted one (larger side). */
  connectComplete(): void {
    if (this.control.held) {
      // Disconnected by the operator: a carrier that completes anyway (accepted) is not taken.
      this.conn.transport.connPathShutdown(this);
      if (this.st === RDS_CONN_CONNECTING) this.transition(RDS_CONN_CONNECTING, RDS_CONN_DOWN);
      return;
    }
    // Gave up connecting (maxReconnectAttempts), yet the peer connected: take it.
    if (this.st === RDS_CONN_ERROR) this.control.leaveError();
    if (this.st === RDS_CONN_UP) {
      // A new carrier replaced a live one (a connect duel or a restarted peer): resend what the
      // old one may have lost. The old connection is gone as surely as if its RST had come
      // first (often it is just behind): count and report it as any other drop, or a listener
      // that acts on 'drop' (a ping to learn when traffic resumes) never hears of it.
      this.conn.stack.counters.add(RDS_CTR.conn_reset);
      this.conn.stack.pathEvents.dropped(this, 'replaced by a new connection from the peer');
      this.transition(RDS_CONN_UP, RDS_CONN_RESETTING);
      this.tx.reset();
    }
    const fo = this.conn.failover;
    this.cancelReconnect();
    fo.cameUp(this);
    // The backoff is not reset here but when this carrier dies, if it lived long enough (drop).
    this.upAt = Date.now();
    this.tx.carrierUp();
    this.acks.carrierUp();
    this.ups++;
    this.control.connected();
    this.heartbeat.noteRx();
    this.pongSeen = false;
    this.shown = false;
    this.rxAtCarrier = this.conn.handshake.holdsData(this) ? this.rxSeq.mark() : null;
    if (!this.transition(this.st, RDS_CONN_UP)) return;
    fo.returned(this);
    if (startsWithHello(this)) this.sendLegacyHello();
    this.conn.handshake.pathUp(this);
    this.heartbeat.start();
    this.tx.schedulePump();
    fo.retry();
  }

  /** A transport without an ordering rule (IB) accepted an incoming connection for this DOWN path. */
  acceptIncoming(): void {
    if (this.st !== RDS_CONN_DOWN) return;
    this.cancelReconnect();
    this.transition(RDS_CONN_DOWN, RDS_CONN_CONNECTING);
  }

  /** A connect attempt failed before reaching UP. */
  connectFailed(): void {
    if (this.st !== RDS_CONN_CONNECTING) return;
    this.failures++;
    if (this.control.gaveUp()) return;
    this.transition(RDS_CONN_CONNECTING, RDS_CONN_DOWN);
    if (this.tx.sendQueue.length > 0) this.conn.failover.arm(this);
    this.queueReconnect(false);
  }

  /** rds_conn_path_drop: the carrier failed or misbehaved; shut it down and, if we initiate, reconnect. */
  drop(reason: string): void {
    const from = this.st;
    if (from === RDS_CONN_DOWN || from === RDS_CONN_DISCONNECTING) return;
    const wasUp = from === RDS_CONN_UP;
    if (wasUp) this.conn.stack.counters.add(RDS_CTR.conn_reset);
    this.conn.stack.pathEvents.dropped(this, reason);
    if (from !== RDS_CONN_ERROR) this.transition(from, RDS_CONN_ERROR);
    this.transition(RDS_CONN_ERROR, RDS_CONN_DISCONNECTING);
    this.heartbeat.stop();
    this.conn.transport.connPathShutdown(this);
    this.tx.reset();
    this.acks.carrierDown();
    this.transition(RDS_CONN_DISCONNECTING, RDS_CONN_DOWN);
    if (this.tx.sendQueue.length > 0) this.conn.failover.arm(this);
    this.queueReconnect(
      wasUp && Date.now() - this.upAt >= Math.min(RECONNECT_STABLE_MS, this.conn.stack.options.reconnectMaxDelayMs),
    );
  }

  /**
   * rds_queue_reconnect: at once after a path that was UP, then with random exponential backoff,
   * while worthRedialling() says so (reconnect-rule.ts).
   *
   * The kernel resets the backoff whenever a path reaches UP. Here it resets only when a carrier
   * that stayed up at least RECONNECT_STABLE_MS (or the maximum backoff, if smaller) dies
   * (`stableUp`): a peer that accepts and then resets at once (a 6.1 kernel still shutting down the
   * previous connection, a lossy link) would otherwise get a new connection immediately after
   * each reset, dozens a second, each resending the whole retransmit queue.
   */
  private queueReconnect(stableUp: boolean): void {
    if (this.conn.stack.closing || this.control.held) return;
    if (!worthRedialling(this, stableUp)) return;
    const { reconnectMinDelayMs: min, reconnectMaxDelayMs: max } = this.conn.stack.options;
    let delay: number;
    if (stableUp || this.backoffMs === 0) {
      delay = 0;
      this.backoffMs = min;
    } else {
      delay = Math.floor(Math.random() * this.backoffMs);
      this.backoffMs = Math.min(this.backoffMs * 2, max);
    }
    this.cancelReconnect();
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.connectIfDown();
    }, delay);
    if (!this.conn.stack.referenced) this.reconnectTimer.unref();
  }

  /** Cancels a scheduled reconnect (the operator's disconnect(), a carrier that came). @internal */
  cancelReconnect(): void {
    if (this.reconnectTimer !== null) {
      clearTimeout(this.reconnectTimer);
      this.reconnectTimer = null;
    }
  }

  /** A message joined the send queue (PathSend): connect, or pump; a path not up starts its grace period. */
  queued(bytes: number): void {
    if (this.st === RDS_CONN_DOWN) this.connectIfDown();
    else this.tx.schedulePump(bytes);
    if (this.st !== RDS_CONN_UP) this.conn.failover.arm(this);
  }

  setRef(ref: boolean): void {
    if (this.reconnectTimer) ref ? this.reconnectTimer.ref() : this.reconnectTimer.unref();
    this.heartbeat.setRef(ref);
    this.acks.setRef(ref);
    this.conn.failover.setRef(this, ref);
  }

  /** Stop all timers: the stack is closing. */
  dispose(): void {
    this.cancelReconnect();
    this.conn.failover.clear(this);
    this.heartbeat.stop();
    this.acks.dispose();
  }

  // ---- handshake on this carrier ----

  /**
   * The peer answered our probe on the current carrier: it has read our SPORT_IDX and path count,
   * so lane connections will be paired correctly. Lanes > 0 open only after this (path 0).
   */
  get peerPongSeen(): boolean {
    return this.pongSeen;
  }

  /**
   * The peer's probe, pong or hello was taken on the current carrier (so it is the path it was
   * taken for), or none came within handshakeTimeoutMs of it (`ups`: that carrier): an accepted
   * path 0 holds our messages until then (Handshake.holdsData).
   */
  get carrierShown(): boolean {
    return this.shown;
  }

  showCarrier(ups = this.ups): void {
    if (ups !== this.ups || this.shown) return;
    this.shown = true;
    if (this.st === RDS_CONN_UP) this.tx.schedulePump();
  }

  /** The peer's answer to our probe arrived on this carrier. */
  pongReceived(): void {
    this.pongSeen = true;
    if (this.index === 0) this.conn.openLanes();
  }

  /** The unsequenced hello an older rds-socket peer waits for before acknowledging on this carrier. */
  sendLegacyHello(): void {
    this.sendControl(this.conn.handshake.helloFrame());
  }

  /** An unsequenced header-only frame, ahead of anything queued. */
  sendControl(frame: Buffer, done: () => void = () => {}): void {
    const t = this.conn.transport;
    if (t.xmitControl === undefined || this.st !== RDS_CONN_UP) {
      done();
      return;
    }
    t.xmitControl(this, frame, done);
  }

  /** The peer's capabilities became known: start what they allow. */
  capabilitiesChanged(): void {
    if (!this.conn.handshake.confirmsReads) this.tx.confirms.acknowledgedIsEnough();
    if (this.st === RDS_CONN_UP && !this.heartbeat.running) this.heartbeat.start();
    if (this.conn.handshake.ackMode) this.acks.requestAck();
  }

  /**
   * The carrier taken for this path (path 0, before the handshake) was a lane of the peer
   * (Handshake.misplacedLane): what it fed was numbered in that lane's space, so this path's
   * receive numbering goes back to where it stood when the carrier came.
   */
  laneTakenForPath0(): void {
    if (this.rxAtCarrier !== null) this.rxSeq.rollback(this.rxAtCarrier);
    this.rxAtCarrier = null;
  }

  /**
   * The peer restarted: forget what we received in its old life and where its numbering stood on
   * this path, and reject confirmations waiting for its old life's read cursor.
   */
  peerRestarted(): void {
    this.acks.rx.reset();
    this.rxSeq.reset();
    this.tx.confirms.peerRestarted();
  }

  // ---- counters of its own (the parts keep theirs: tx, rxSeq, acks, heartbeat, conn.failover) ----

  get upCount(): number {
    return this.ups;
  }
  get connectFailures(): number {
    return this.failures;
  }
}

export { RDS_CONN_DOWN, RDS_CONN_CONNECTING, RDS_CONN_DISCONNECTING, RDS_CONN_UP, RDS_CONN_RESETTING, RDS_CONN_ERROR };
