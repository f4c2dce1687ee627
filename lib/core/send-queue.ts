import { RDS_CONN_UP, RDS_FLAG_PROBE_PORT, RDS_FLAG_RETRANSMITTED, RDS_HEADER_SIZE } from '../constants.js';
import { encodeDataHeader, OFF_EXTHDR, OFF_SEQUENCE, writeU64 } from '../wire/header.js';
import { packExtensions, type RdsExtension } from '../wire/extensions.js';
import { PumpTurn } from './pump-turn.js';
import { SendLatency } from './send-latency.js';
import { Fifo } from './fifo.js';
import { RdsOutgoing, type SendOwner } from './message.js';
import { OwnAccount } from './ext/own-budget.js';
import { standIn, takesWithdrawn, WithdrawnAccount } from './ext/withdrawn.js';
import { renumbered } from './ext/path-policy.js';
import type { RdsConnPath } from './path.js';
import { findBySeq, ReadConfirmations } from './ext/send-confirm.js';
import { RDS_CTR } from './stats.js';

/**
 * TEST ONLY (the nemesis's proof that it catches loss, docs/nemesis.md): with
 * RDS_SOCKET_TEST_BREAK_RETRANSMIT=1 a reset path forgets its retransmit queue, completing the
 * application messages in it as if acknowledged, instead of resending them. Never set it
 * otherwise.
 */
const BREAK_RETRANSMIT = typeof process !== 'undefined' && process.env.RDS_SOCKET_TEST_BREAK_RETRANSMIT === '1';

/**
 * One path's sending side (the kernel's send.c): the transmit sequence, the send and retransmit
 * queues, the pump that moves messages to the transport, and what acknowledgements free.
 */
export class PathSend {
  /** Sequence of the next message queued on this path; assigned at enqueue (options.initialSequence first). */
  private nextSeq: number;
  readonly sendQueue = new Fifo<RdsOutgoing>();
  /** Sent, not yet acknowledged; resent first after a reconnect. */
  readonly retrans = new Fifo<RdsOutgoing>();
  /** Pending confirmations of a peer that reports reads. */
  readonly confirms: ReadConfirmations;
  /** Messages queued on the node's own account (pongs, probes), bounded by maxOwnQueued. */
  readonly own = new OwnAccount();
  /** Withdrawn records this path made (standIn), bounded (withdrawn.ts). */
  readonly withdrawn = new WithdrawnAccount();
  /** The full local congestion map must go out before the next message. */
  private congPending = false;
  /** The last multipath probe queued (path 0), to queue none while one waits unsent. */
  private probe: RdsOutgoing | null = null;
  /** This incarnation has queued a probe on this path: the first one went ahead of any data. */
  private probeQueued = false;
  /** When the pump runs: at once for single messages, once per turn for a stream (pump-turn.ts). */
  private readonly turn = new PumpTurn(
    () => this.pump(),
    () => this.messages,
  );
  private pumping = false;
  private pumpAgain = false;
  /** Transport said "no more for now"; it calls kick() when it drains. */
  private blocked = false;
  private messages = 0;
  private bytes = 0;
  /** Send-to-acknowledge times. */
  readonly latency = new SendLatency();

  constructor(private readonly path: RdsConnPath) {
    this.confirms = new ReadConfirmations(path.conn.stack.counters, path.conn.faddr);
    const first = path.conn.stack.options.initialSequence;
    // The clock start: above every number an earlier life of this stack's address gave this path
    // (see RdsStackOptions.initialSequence), so a kernel's kept next_rx_seq never drops our resends.
    this.nextSeq = first === 'clock' ? Date.now() * 1000 : first;
  }

  get nextTxSeq(): number {
    return this.nextSeq;
  }

  get lastProbe(): RdsOutgoing | null {
    return this.probe;
  }

  get sentMessages(): number {
    return this.messages;
  }

  get sentBytes(): number {
    return this.bytes;
  }

  private get stack() {
    return this.path.conn.stack;
  }

  /** Takes the next transmit sequence number (failover numbers moved messages here). */
  takeSeq(): number {
    return this.nextSeq++;
  }

  /**
   * Queues the multipath probe: the first sequenced frame an incarnation sends on path 0 (queued
   * ahead of the first message). Null when the own account is full.
   */
  queueProbe(exts: readonly RdsExtension[]): RdsOutgoing | null {
    this.probeQueued = true; // before queueControl(), which calls back into queue()
    this.probe = this.queueControl(RDS_FLAG_PROBE_PORT, 0, exts);
    return this.probe;
  }

  /**
   * Encodes and queues a message; the caller has done every check. `encoded`: the message already
   * encoded (CheckedSend.wire), queued as it is when it carries no extensions (queueWire).
   */
  queue(
    payload: Uint8Array | readonly Uint8Array[],
    totalLen: number,
    sport: number,
    dport: number,
    owner: SendOwner | null,
    exts?: readonly RdsExtension[],
    encoded: Buffer | null = null,
  ): RdsOutgoing {
    if (encoded !== null && (exts === undefined || exts.length === 0))
      return this.queueWire(encoded, totalLen, sport, dport, owner);
    this.probeFirst();
    const slab = this.stack.wireSlab;
    const wire = slab.alloc(RDS_HEADER_SIZE + totalLen);
    const seq = this.nextSeq++;
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
    const msg = new RdsOutgoing(wire, totalLen, seq, sport, dport, this.path.conn.faddr, this.path, owner);
    if (slab.recyclable(wire.length)) msg.recycleInto(slab);
    return this.enlist(msg);
  }

  /**
   * Queues a message that arrives already encoded (the host node's cut-through send: its client
   * wrote the data header, checked by the node): only the sequence is stamped. A large frame that
   * is a buffer of its own becomes the message's frame, kept by reference until acknowledged. Any
   * other is copied once into the wire slab, as queue() copies a payload: small frames lie back to
   * back there (one write), and a view into a larger buffer would keep the rest of it alive.
   */
  queueWire(wire: Buffer, totalLen: number, sport: number, dport: number, owner: SendOwner | null): RdsOutgoing {
    this.probeFirst();
    let frame = wire;
    const slab = this.stack.wireSlab;
    const copied = !slab.recyclable(wire.length) || wire.buffer.byteLength > 2 * wire.length;
    if (copied) {
      frame = slab.alloc(wire.length);
      frame.set(wire);
    }
    const seq = this.nextSeq++;
    writeU64(frame, OFF_SEQUENCE, seq);
    const msg = new RdsOutgoing(frame, totalLen, seq, sport, dport, this.path.conn.faddr, this.path, owner);
    // A frame kept by reference is taken back too when the node read it into memory of the slab's.
    if (copied ? slab.recyclable(frame.length) : slab.owns(frame)) msg.recycleInto(slab);
    return this.enlist(msg);
  }

  /**
   * MSG_ZEROCOPY: queues a message whose payload stays in the caller's buffers (only the header is
   * encoded); `cookie` is reported to the owner once nothing references them any more.
   */
  queueZeroCopy(
    payload: Uint8Array | readonly Uint8Array[],
    totalLen: number,
    sport: number,
    dport: number,
    owner: SendOwner,
    cookie: number,
  ): RdsOutgoing {
    this.probeFirst();
    const wire = this.stack.wireSlab.alloc(RDS_HEADER_SIZE);
    const seq = this.nextSeq++;
    encodeDataHeader(wire, 0, seq, totalLen, sport, dport);
    const msg = new RdsOutgoing(wire, totalLen, seq, sport, dport, this.path.conn.faddr, this.path, owner);
    msg.zeroCopy(payload, cookie);
    return this.enlist(msg);
  }

  private probeFirst(): void {
    if (!this.probeQueued && this.path.index === 0 && !this.path.conn.isLoopback)
      this.path.conn.handshake.queueProbe(this.path);
  }

  private enlist(msg: RdsOutgoing): RdsOutgoing {
    this.sendQueue.push(msg);
    this.stack.counters.add(RDS_CTR.send_queued);
    this.path.queued(msg.len);
    return msg;
  }

  /** Failover moved `msg` here: it joins the queue in its new sequence space. */
  adopt(msg: RdsOutgoing): void {
    msg.moveTo(this.path, this.nextSeq++);
    this.sendQueue.push(msg);
  }

  /**
   * Failover moved `msgs` here from a path this one still waits behind: the messages queued here
   * meanwhile were held for them (a socket that came back to this path queued its next ones here
   * while its earlier ones waited there), so `msgs` go ahead of them. Those never left (the hold
   * kept them) and are renumbered after `msgs`, so sequence order stays send order; any message
   * already sent before keeps its place and number at the front. Returns how a sequence number of
   * this path given out before (a hold up to it, see ConnFailover.holdBehind) maps now: to the new
   * number of the last held message it covered, itself if it covered none.
   */
  adoptAhead(msgs: readonly RdsOutgoing[]): (seq: number) => number {
    const sentBefore: RdsOutgoing[] = [];
    const held: RdsOutgoing[] = [];
    for (const queued of this.sendQueue.drain()) {
      const m = queued.done ? standIn(this.path, queued) : queued;
      if (m === null) continue;
      if (held.length === 0 && m.sentAt !== 0) sentBefore.push(m);
      else held.push(m);
    }
    this.sendQueue.unshiftAll(sentBefore);
    for (const m of msgs) this.adopt(m);
    const firstNew = this.nextSeq;
    const oldSeqs: number[] = [];
    for (const m of held) {
      const was = m.seq;
      m.renumber(this.nextSeq++);
      renumbered(m, was);
      oldSeqs.push(was);
      this.sendQueue.push(m);
    }
    return (seq) => {
      // The new numbers follow the queue's order: the last message covered has the highest.
      let last = -1;
      for (let i = 0; i < oldSeqs.length; i++) if (oldSeqs[i]! <= seq) last = i;
      return last < 0 ? seq : firstNew + last;
    };
  }

  /**
   * A control message (ping, pong, probe) from port `sport` to `dport`, sequenced like data and
   * charged to the path's own account. Null (nothing queued) when that account is full: the peer
   * has not acknowledged, or not read, maxOwnQueued of them.
   */
  queueControl(sport: number, dport: number, exts?: readonly RdsExtension[]): RdsOutgoing | null {
    if (!this.own.take(this.stack.options.maxOwnQueued)) return null;
    return this.queue(Buffer.alloc(0), 0, sport, dport, this.own, exts);
  }

  /** The full map goes on this carrier next (TCP's carrierProven; map changes: RdsConnection.queueCongUpdate). */
  queueCongUpdate(): void {
    this.congPending = true;
    this.stack.counters.add(RDS_CTR.cong_update_queued);
    if (this.path.state === RDS_CONN_UP) this.schedulePump();
  }

  /**
   * A new carrier is up: the map goes first, and the transport takes frames again. Map updates
   * travel on path 0 (cong.ts), so a lane that opens on demand (lazyLanes, rds-socket peers only)
   * sends none: it would only repeat path 0's, and the peer would report it (POLLWRBAND) as news
   * whenever a socket first used a lane. Kernels, and peers whose lanes open all at once, still
   * get the map on every carrier, as before.
   */
  carrierUp(): void {
    this.blocked = false;
    // While path 0 is down a lane or rail sends it too (path 0 may not come back while it is up).
    const conn = this.path.conn;
    this.congPending = this.path.index === 0 || !conn.handshake.lazyLanes || conn.pathIf(0)?.state !== RDS_CONN_UP;
  }

  /**
   * rds_send_path_reset: everything sent but unacknowledged goes back in front of the send queue,
   * flagged RETRANSMITTED, with its original sequence number (a cancelled one as its withdrawn
   * record, to a peer that takes them); a pending map is forgotten (a fresh
   * one follows the next UP). Path 0 leaving UP wakes a path that is up for a map change queued.
   */
  reset(): void {
    const resend: RdsOutgoing[] = [];
    for (const queued of this.retrans.drain()) {
      // Cancelled after it went out: a copy may still come out of the dead carrier (standIn).
      const m = queued.done ? standIn(this.path, queued) : queued;
      if (m === null) continue;
      if (BREAK_RETRANSMIT && m.fromSocket) {
        m.complete();
        continue;
      }
      m.markRetransmitted();
      resend.push(m);
    }
    this.sendQueue.unshiftAll(resend);
    this.congPending = false;
    this.blocked = false;
    this.path.acks.resetSend();
    if (this.path.index === 0) this.path.conn.kickMapCarrier();
  }

  /** The transport can take more. */
  kick(): void {
    this.blocked = false;
    this.schedulePump();
  }

  /** The pump has something to do: `bytes` more queued (0: room, an ack, a state change). */
  schedulePump(bytes = 0): void {
    this.turn.schedule(bytes);
  }

  /** rds_send_xmit: move queued messages to the transport while it accepts them. */
  pump(): void {
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    const cp = this.path;
    if (cp.state !== RDS_CONN_UP || this.blocked) return;
    if (cp.conn.failover.held(cp)) return;
    const t = cp.conn.transport;
    const stack = this.stack;
    const ackMode = cp.conn.handshake.ackMode;
    // One clock reading per batch: every message of a burst leaves in the same instant anyway.
    const now = performance.now();
    const wallNow = Date.now();
    const gated = cp.conn.handshake.holdsData(cp);
    if (t.xmitBegin?.(cp) === false) return;
    this.pumping = true;
    try {
      do {
        this.pumpAgain = false;
        while (cp.state === RDS_CONN_UP && !this.blocked) {
          if (this.congPending || cp.conn.takeCongUpdate(cp)) {
            this.congPending = false;
            if (!t.xmitCong(cp, stack.congMap(cp.conn.laddr).bits)) {
              this.blocked = true;
              break;
            }
            continue;
          }
          const head = gated ? this.sendQueue.peek() : undefined;
          // Handshake.holdsData (a cancelled one that went out waits too: its record needs the caps).
          if (head?.fromSocket && (!head.done || head.sentAt !== 0)) break;
          const next = this.sendQueue.shift();
          if (next === undefined) {
            stack.counters.add(RDS_CTR.send_queue_empty);
            break;
          }
          // Cancelled while queued: skipped, or its record goes if it was sent before a reset.
          const msg = next.done ? standIn(cp, next) : next;
          if (msg === null) continue;
          this.retrans.push(msg);
          msg.sent(now);
          this.messages++;
          this.bytes += msg.len;
          if (msg.flags & RDS_FLAG_RETRANSMITTED) stack.counters.add(RDS_CTR.send_retransmitted);
          if (ackMode) cp.acks.stamp(msg, wallNow, this.sendQueue.length === 0);
          if (!t.xmit(cp, msg)) this.blocked = true;
        }
      } while (this.pumpAgain && cp.state === RDS_CONN_UP && !this.blocked);
    } finally {
      if (cp.state === RDS_CONN_UP) t.xmitEnd?.(cp);
      this.pumping = false;
    }
  }

  /**
   * The peer has every message up to and including `seq`: free them in order. From a peer that
   * reports reads (RDSSOCK_CAP_CONFIRM) this is flow control only: a pending confirmation waits
   * in confirms.awaitingRead for its read cursor. `receiverConfirms`: the receiver was handed the
   * messages with receipts that settle their confirmations (loopback, see localReceipt), so this
   * frees them without confirming them.
   */
  ackThrough(seq: number, receiverConfirms = false): void {
    let freed = false;
    const now = performance.now();
    // While the handshake has not said what the peer is, an h_ack confirms nothing yet: from an
    // rds-socket peer only its read cursor may (its ack frames can overtake its probe). They wait
    // in confirms.awaitingRead; capabilitiesChanged releases them if the peer does not report reads.
    const hs = this.path.conn.handshake;
    const holdConfirm = hs.confirmsReads || (hs.peer === 'unknown' && !this.path.conn.isLoopback);
    for (;;) {
      const m = this.retrans.peek();
      if (m === undefined || m.seq > seq) break;
      this.retrans.shift();
      if (!m.done && m.sentAt > 0 && m.owner?.placeHolder !== true) this.latency.record(now - m.sentAt);
      if (holdConfirm && this.confirms.mustWait(m)) {
        m.complete(undefined, true);
        this.confirms.awaitingRead.push(m);
      } else if (receiverConfirms) {
        m.complete(undefined, true);
      } else {
        // Nothing to hold: no confirmation pending, an older peer, or a resent message that a read
        // report already covered (it was read, or its refusal already rejected it).
        m.complete();
      }
      freed = true;
    }
    if (freed) this.path.conn.failover.releaseHolds(this.path);
  }

  /** RDSSOCK_EXTHDR_READ; see ReadConfirmations.readThrough. */
  readThrough(seq: number, refused: number): void {
    this.confirms.readThrough(seq, refused, [this.retrans, this.sendQueue]);
  }

  /** RDSSOCK_EXTHDR_REFUSED: the peer did not deliver our message `seq`. */
  refusedByPeer(seq: number, reason: number): void {
    this.confirms.refused(seq, reason, (s) => findBySeq(this.retrans, s) ?? findBySeq(this.sendQueue, s));
  }

  /** Sequence of the oldest message not yet acknowledged, if any. */
  oldestUnacked(): number | undefined {
    for (const m of this.retrans) if (!m.done) return m.seq;
    for (const m of this.sendQueue) if (!m.done) return m.seq;
    return undefined;
  }

  /**
   * Sequence of the oldest message that may still reach the peer and is not acknowledged: as
   * oldestUnacked, but a message cancelled (a send() timeout, RDS_CANCEL_SENT_TO) after it went
   * out counts until acknowledged (it may still be delivered, or its withdrawn record stands in
   * its place). What waits behind this path, or a socket that would leave it, waits for it too
   * (the nemesis: a later message on another path was read before it, issue #35).
   */
  oldestInCarrier(): number | undefined {
    // Only acks take messages off retrans: its head, cancelled or not, is unacknowledged.
    const head = this.retrans.peek();
    if (head !== undefined) return head.seq;
    const records = takesWithdrawn(this.path.conn); // a cancelled one sent before a reset: standIn
    for (const m of this.sendQueue) if (!m.done || (records && m.cancelled && m.sentAt !== 0)) return m.seq;
    return undefined;
  }

  /**
   * Application messages wait to be sent, acknowledged, or (acknowledged as queued) reported read
   * here; control frames (probes, pongs) and withdrawn records do not count: a peer is not
   * redialled, nor its connection kept, for records alone (they move or go out with the next data).
   */
  hasPendingData(): boolean {
    if (this.confirms.awaitingRead.length > 0) return true;
    for (const m of this.sendQueue) if (!m.done && m.fromSocket && m.owner!.placeHolder !== true) return true;
    for (const m of this.retrans) if (!m.done && m.fromSocket && m.owner!.placeHolder !== true) return true;
    return false;
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
