import { RDS_CONN_UP, RDS_FLAG_ACK_REQUIRED, RDS_FLAG_RETRANSMITTED, RDS_HEADER_SIZE } from '../../constants.js';
import { encodeHeader, OFF_ACK, OFF_FLAGS, writeU64 } from '../../wire/header.js';
import { packExtensions, readExtension, refusedExtension } from '../../wire/extensions.js';
import type { RdsOutgoing } from '../message.js';
import type { RdsConnPath } from '../path.js';
import { RX_PENDING, RX_READ, RxAckTracker, type RxEntry, type RxOutcome } from './rx-ack.js';
import { RDS_CTR } from '../stats.js';

/**
 * Turns in a row an ack-only frame may wait because its carrier stopped for its read-turn budget:
 * 8 turns of READ_TURN_BYTES (256 KiB) is the 2 MiB libuv read from a streaming socket per
 * wake-up before that budget existed, so acks come at least as often as they did then.
 */
export const ACK_CUT_TURNS = 8;

/**
 * Acknowledgements between rds-socket peers (and to kernels on transports whose wire needs them):
 * what we received and may acknowledge (RxAckTracker), when an ack-only frame goes out, and how
 * often our own messages ask the peer for one (ACK_REQUIRED).
 */
export class AckPacer {
  /** What we may acknowledge to an rds-socket peer. */
  readonly rx: RxAckTracker;
  /**
   * The peer's generation arrived on the current carrier: in its probe or pong (path 0), or in a
   * hello (lanes > 0, and older rds-socket peers on path 0). Until then we send no acks on it: a
   * peer that restarted must learn nothing numbered in its previous life's sequence space.
   */
  private helloSeen = false;
  private unackedPackets = 0;
  private unackedBytes = 0;
  private flushQueued = false;
  private inFlight = false;
  private timer: NodeJS.Timeout | null = null;
  private sent = 0;
  /** The carrier stopped for its read-turn budget since the last flush (readCut). */
  private cut = false;
  /** Flushes in a row that held the ack for a cut turn. */
  private cutTurns = 0;

  constructor(private readonly path: RdsConnPath) {
    this.rx = new RxAckTracker(path.conn.stack.options.ackDelayMaxMs);
  }

  get peerHelloSeen(): boolean {
    return this.helloSeen;
  }

  /** An ack-only frame is being written. */
  get ackInFlight(): boolean {
    return this.inFlight;
  }

  get acksSent(): number {
    return this.sent;
  }

  private get conn() {
    return this.path.conn;
  }

  /** A new carrier: the peer's generation must arrive on it again; nothing is in flight. */
  carrierUp(): void {
    this.inFlight = false;
    this.helloSeen = false;
    this.rx.replayRefusals();
  }

  /** The carrier is gone: no frame is in flight any more. */
  carrierDown(): void {
    this.inFlight = false;
  }

  /** The send side was reset: the ACK_REQUIRED count starts again. */
  resetSend(): void {
    this.unackedPackets = 0;
    this.unackedBytes = 0;
  }

  /**
   * Between rds-socket peers: piggyback our latest ack in h_ack and ask for an ack (ACK_REQUIRED)
   * often enough that the sender's queue drains: every max_unacked_packets messages or
   * max_unacked_bytes bytes, on retransmissions, when the sending socket is half full, and on the
   * last message of a burst (`last`).
   */
  stamp(msg: RdsOutgoing, now: number, last: boolean): void {
    const { maxUnackedPackets, maxUnackedBytes } = this.conn.stack.options;
    if (this.acksAllowed) {
      this.rx.advance(now);
      writeU64(msg.wire, OFF_ACK, this.rx.ackSeq);
      this.rx.markSent();
      this.cutTurns = 0; // the peer has the ack: a held one starts its count again
    } else {
      writeU64(msg.wire, OFF_ACK, 0);
    }
    this.unackedPackets++;
    this.unackedBytes += msg.len;
    let flags = msg.wire[OFF_FLAGS]! & ~RDS_FLAG_ACK_REQUIRED;
    if (
      this.unackedPackets >= maxUnackedPackets ||
      this.unackedBytes >= maxUnackedBytes ||
      (flags & RDS_FLAG_RETRANSMITTED) !== 0 ||
      last ||
      msg.owner?.wantsAck?.() === true
    ) {
      flags |= RDS_FLAG_ACK_REQUIRED;
      this.unackedPackets = 0;
      this.unackedBytes = 0;
      this.conn.stack.counters.add(RDS_CTR.send_ack_required);
    }
    msg.wire[OFF_FLAGS] = flags;
  }

  /** A sequenced message was accepted on this path; null when nothing will be acknowledged. */
  recordReceived(seq: number, consumed: boolean, ackRequired: boolean): RxEntry | null {
    if (!this.conn.handshake.tracksReceipts) {
      this.rx.untracked();
      return null;
    }
    // recvIncoming's transport has just stamped lastRxAt: no second clock reading per message.
    const e = this.rx.record(seq, consumed ? RX_READ : RX_PENDING, ackRequired, this.path.heartbeat.lastRxAt, this);
    if (this.conn.handshake.ackMode && (consumed || ackRequired)) this.requestAck();
    return e;
  }

  /** The application took a message (RX_READ), or it was refused or discarded: the acks may move. */
  consumed(e: RxEntry, outcome: RxOutcome = RX_READ): void {
    if (this.rx.settle(e, outcome) && this.conn.handshake.ackMode) this.requestAck();
  }

  /** A heartbeat asked for an immediate answer. */
  forceAck(): void {
    this.rx.force();
    this.requestAck();
  }

  requestAck(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    // After this turn's microtasks: the application's receive loop runs first, so the ack covers
    // what it has just taken, and outgoing data may carry the ack instead.
    setImmediate(() => {
      this.flushQueued = false;
      this.flush();
    });
  }

  /**
   * The transport stopped this path's carrier for the rest of the turn (its read budget): more is
   * waiting to be read, and it is read in the next turn. An ack now would be followed by another
   * one turn later; under a stream every turn ends that way, and an ack-only frame per turn costs
   * the sender a wake-up, a read and a smaller next write each time (issue 36's fan-in).
   */
  readCut(): void {
    this.cut = true;
  }

  private flush(): void {
    const cut = this.cut;
    this.cut = false;
    if (this.path.state !== RDS_CONN_UP) return;
    if (!this.conn.handshake.ackMode) {
      // No RDS-level acks with this peer (rdsAcks: false), but we advertise heartbeats: answer
      // one with a bare frame that acknowledges nothing, or the peer takes our silence for a
      // dead link and drops the carrier every few intervals.
      if (!this.inFlight && this.rx.takeForced()) this.sendFrame(0);
      return;
    }
    if (!this.acksAllowed) return;
    const wait = this.rx.advance(Date.now());
    if (wait >= 0 && Number.isFinite(wait) && this.timer === null) {
      // An unread message holds the ack; acknowledge it as queued once it has waited long enough.
      this.timer = setTimeout(() => {
        this.timer = null;
        this.requestAck();
      }, wait + 1);
      if (!this.conn.stack.referenced) this.timer.unref();
    }
    if (!this.wanted() || this.inFlight) return;
    // The ack the peer asked for waits for the end of the burst (the next flush is queued: a turn
    // with nothing more to read still sends it), but never more than ACK_CUT_TURNS turns in a row,
    // nor a heartbeat's answer or a refusal to report.
    if (cut && this.cutTurns < ACK_CUT_TURNS - 1 && !this.rx.isForced && this.rx.toReport.length === 0) {
      this.cutTurns++;
      this.requestAck();
      return;
    }
    this.cutTurns = 0;
    this.sendFrame(0);
  }

  private wanted(): boolean {
    const rx = this.rx;
    return rx.wanted || (this.conn.handshake.confirmsReads && (rx.readWanted || rx.toReport.length > 0));
  }

  /** Before a graceful close: tell the peer everything we have, asked for or not. */
  finalAck(): void {
    if (this.path.state !== RDS_CONN_UP || !this.conn.handshake.ackMode || !this.acksAllowed) return;
    this.rx.advance(Date.now());
    if (this.rx.unsent || (this.conn.handshake.confirmsReads && (this.rx.readUnsent || this.rx.toReport.length > 0)))
      this.sendFrame(0);
  }

  /**
   * One ack-only frame in flight at a time; when it is out, send again if more is wanted.
   * With ACK_REQUIRED in `flags` it is a heartbeat.
   */
  sendFrame(flags: number): void {
    if (this.conn.transport.xmitControl === undefined) return;
    this.inFlight = true;
    const allowed = this.acksAllowed;
    const ack = allowed ? this.rx.ackSeq : 0;
    if (allowed) this.rx.markSent();
    let exthdr: Uint8Array | undefined;
    if (allowed && this.conn.handshake.confirmsReads) {
      // Refusals first, each in a frame of its own, so the peer has them before a read cursor
      // that passes them (frames on one carrier arrive in order).
      for (const r of this.rx.toReport.splice(0)) {
        const f = Buffer.allocUnsafe(RDS_HEADER_SIZE);
        encodeHeader(f, 0, { ack, exthdr: packExtensions([refusedExtension(r.seq, r.reason)]) });
        this.path.sendControl(f);
      }
      exthdr = packExtensions([readExtension(this.rx.readSeq, this.rx.refusedThroughRead)]);
      this.rx.markReadSent();
    }
    this.sent++;
    this.conn.stack.counters.add(RDS_CTR.send_ack_frames);
    const frame = Buffer.allocUnsafe(RDS_HEADER_SIZE);
    encodeHeader(frame, 0, { ack, flags, exthdr });
    this.path.sendControl(frame, () => {
      this.inFlight = false;
      if (this.wanted()) this.requestAck();
    });
  }

  /**
   * Acks may name sequence numbers on this carrier: the peer's generation arrived on it (probe,
   * pong or hello; see peerHelloSeen), or the peer is a kernel on a transport that needs acks.
   */
  private get acksAllowed(): boolean {
    return this.helloSeen || this.conn.handshake.acksWithoutHello;
  }

  /** The peer's generation arrived on this carrier (its probe or pong, or an older peer's hello). */
  helloReceived(): void {
    if (this.helloSeen) return;
    this.helloSeen = true;
    if (this.conn.handshake.ackMode) this.requestAck();
  }

  setRef(ref: boolean): void {
    if (this.timer) ref ? this.timer.ref() : this.timer.unref();
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
