import { RDSSOCK_REFUSED_DISCARDED, RDSSOCK_REFUSED_NO_SOCK } from '../../constants.js';
import { Fifo } from '../fifo.js';

/** What became of a received message (RxEntry.state). */
export const RX_PENDING = 0;
/** The application took it (recvmsg, recv, the iterator), or the core handled it (pings, probes). */
export const RX_READ = 1;
/** No socket was bound to its port: dropped as the kernel drops it (recv_drop_no_sock). Same value on the wire. */
export const RX_REFUSED = RDSSOCK_REFUSED_NO_SOCK;
/** Its socket was closed with it unread: discarded. Same value on the wire. */
export const RX_DISCARDED = RDSSOCK_REFUSED_DISCARDED;
export type RxOutcome = typeof RX_READ | typeof RX_REFUSED | typeof RX_DISCARDED;

/** Who is told when the application has taken a message: the acknowledgement pacing (AckPacer) of the path that received it. */
export interface RxOwner {
  /** The message was read (default), refused or discarded. */
  consumed(e: RxEntry, outcome?: RxOutcome): void;
}

/**
 * One accepted message on a path, until its fate is known and acknowledged to the sender. It
 * travels with the message to the socket as its receipt: `owner.consumed(entry)` once the
 * application has it, `owner.consumed(entry, RX_DISCARDED)` if its socket closes first.
 */
export interface RxEntry {
  seq: number;
  pos: number;
  /** RX_PENDING, RX_READ, RX_REFUSED or RX_DISCARDED. */
  state: number;
  at: number;
  owner: RxOwner;
  /** The tracker's life it belongs to: an entry from before the peer restarted is ignored. */
  epoch: number;
  /** Failover duplicates of this message that arrived on other paths: they share its fate. */
  followers: RxEntry[] | null;
}

/** `dup`, a failover duplicate of `first` that arrived on another path, shares its fate. */
export function follow(first: RxEntry, dup: RxEntry): void {
  (first.followers ??= []).push(dup);
}

/** A message the sender must hear was not delivered: its sequence number and RX_REFUSED or RX_DISCARDED. */
export interface RxRefusal {
  seq: number;
  reason: number;
}

/** Refusals kept to report again on a new carrier (the one that carried them may have died first). */
const RECENT_REFUSALS = 64;
/**
 * Refused and discarded messages whose fate a failover duplicate may still ask for (fateOf). A
 * socket closed with a large backlog discards more than RECENT_REFUSALS at once; a duplicate of
 * one of those must not be taken for read. Older ones are forgotten, and a duplicate that asks
 * about a forgotten range is answered "discarded" (its confirmation rejects, never lies).
 */
const FATE_MEMORY = 8192;
/** Refusals waiting to be reported (a peer that never takes reports must not make this grow). */
const MAX_UNREPORTED = 4096;

/**
 * What a path may acknowledge to an rds-socket peer, as two cursors over the messages in arrival
 * order (not numeric order, so a restarted peer counting from 1 again is fine):
 * - the read cursor (`readSeq`): the end of the prefix whose fate is known: read by the
 *   application, refused (no socket) or discarded (socket closed unread). Peers that advertised
 *   RDSSOCK_CAP_CONFIRM get it in RDSSOCK_EXTHDR_READ, with every refused or discarded message
 *   reported first in RDSSOCK_EXTHDR_REFUSED; only this resolves their confirmations.
 * - the flow cursor (`ackSeq`, h_ack): the read cursor, or further over messages that have waited
 *   unread longer than `maxDelayMs` ("acknowledged as queued", what the kernel does), so one idle
 *   socket cannot hold back the send budget of every other socket on the path. It releases the
 *   sender's retransmit queue and budget; for a peer without RDSSOCK_CAP_CONFIRM it also resolves
 *   confirmations (the behaviour before the read cursor existed).
 */
export class RxAckTracker {
  /** Entries past the read cursor, in arrival order (their positions are consecutive). */
  private readonly log = new Fifo<RxEntry>();
  private nextPos = 1;
  private ackPos = 0;
  private sentPos = 0;
  private requestedPos = 0;
  private readPos = 0;
  private readSentPos = 0;
  /** The peer asked for an ack regardless of progress (a heartbeat). */
  private forced = false;
  /** Flow cursor: sequence number to put in h_ack. */
  ackSeq = 0;
  /** Read cursor: sequence number of the last message whose fate is known. */
  readSeq = 0;
  /** Refused and discarded messages at or before the read cursor, since the peer's (re)start. */
  refusedThroughRead = 0;
  /** Refusals not reported yet, oldest first. */
  toReport: RxRefusal[] = [];
  private recent: RxRefusal[] = [];
  /**
   * Refused and discarded messages by sequence number, oldest first (at most FATE_MEMORY); made at
   * the first refusal: an empty Map costs ~190 bytes, and every path of every peer has a tracker.
   */
  private refusedFates: Map<number, RxOutcome> | null = null;
  /** Highest sequence number whose refusal fell out of refusedFates: fates at or below it are unknown. */
  private fatesForgottenThrough = 0;
  epoch = 0;
  /** Messages went untracked since the last record() (see untracked): counted once as a refusal. */
  private gap = false;

  constructor(private readonly maxDelayMs: number) {}

  record(seq: number, state: number, ackRequired: boolean, now: number, owner: RxOwner): RxEntry {
    this.gap = false;
    const e: RxEntry = { seq, pos: this.nextPos++, state, at: now, owner, epoch: this.epoch, followers: null };
    this.log.push(e);
    if (ackRequired) this.requestedPos = e.pos;
    return e;
  }

  /** Records the fate of a pending entry; false if it had one already or belongs to a past life. */
  settle(e: RxEntry, outcome: RxOutcome): boolean {
    if (e.epoch !== this.epoch || e.state !== RX_PENDING) return false;
    e.state = outcome;
    if (outcome !== RX_READ) {
      const r = { seq: e.seq, reason: outcome };
      // Bounded: a sender that misses one learns from the count in the read report and rejects
      // what it cannot place (ECONNRESET) rather than confirm it.
      if (this.toReport.length >= MAX_UNREPORTED) this.toReport.shift();
      this.toReport.push(r);
      this.recent.push(r);
      if (this.recent.length > RECENT_REFUSALS) this.recent.shift();
      const fates = (this.refusedFates ??= new Map());
      fates.set(e.seq, outcome);
      if (fates.size > FATE_MEMORY) {
        const oldest = fates.keys().next().value as number;
        fates.delete(oldest);
        this.fatesForgottenThrough = Math.max(this.fatesForgottenThrough, oldest);
      }
    }
    if (e.followers !== null) for (const f of e.followers) f.owner.consumed(f, outcome);
    return true;
  }

  /**
   * A failover duplicate of the message numbered `seq` on this path arrived elsewhere: the
   * pending entry it should follow, or the fate already known (RX_READ when nothing says otherwise;
   * RX_DISCARDED when the refusals remembered no longer reach back that far).
   */
  fateOf(seq: number): RxEntry | RxOutcome {
    for (const e of this.log) if (e.seq === seq) return e.state === RX_PENDING ? e : (e.state as RxOutcome);
    const refused = this.refusedFates?.get(seq);
    if (refused !== undefined) return refused;
    // Past the read cursor and not refused: read, unless its record may have been forgotten.
    return seq <= this.fatesForgottenThrough ? RX_DISCARDED : RX_READ;
  }

  force(): void {
    this.forced = true;
  }

  /** A heartbeat asked for an answer that has not been sent. */
  get isForced(): boolean {
    return this.forced;
  }

  /** Moves both cursors. Returns ms until an unread message lets the flow cursor move on, or -1. */
  advance(now: number): number {
    for (;;) {
      const head = this.log.peek();
      if (head === undefined || head.state === RX_PENDING) break;
      this.log.shift();
      this.readPos = head.pos;
      this.readSeq = head.seq;
      if (head.state !== RX_READ) this.refusedThroughRead++;
    }
    if (this.readPos > this.ackPos) {
      this.ackPos = this.readPos;
      this.ackSeq = this.readSeq;
    }
    for (let i = this.ackPos - this.readPos; ; i++) {
      const e = this.log.at(i);
      if (e === undefined) return -1;
      if (e.state === RX_PENDING) {
        const waited = now - e.at;
        if (!(waited >= this.maxDelayMs)) return this.maxDelayMs - waited;
      }
      this.ackPos = e.pos;
      this.ackSeq = e.seq;
    }
  }

  /** Anything acknowledged (flow) that the peer has not been told. */
  get unsent(): boolean {
    return this.ackPos > this.sentPos;
  }

  /** An ack frame (or a piggybacked h_ack) would tell the peer something it asked for. */
  get wanted(): boolean {
    return this.forced || (this.requestedPos > this.sentPos && this.ackPos > this.sentPos);
  }

  /** The read cursor moved past what the peer was told, and the peer asked for an ack there. */
  get readWanted(): boolean {
    return this.readPos > this.readSentPos && this.requestedPos > this.readSentPos;
  }

  /** The read cursor moved past what the peer was told. */
  get readUnsent(): boolean {
    return this.readPos > this.readSentPos;
  }

  /** Whether a heartbeat asked for an answer since the last ack; clears the request. */
  takeForced(): boolean {
    const f = this.forced;
    this.forced = false;
    return f;
  }

  markSent(): void {
    this.sentPos = this.ackPos;
    this.forced = false;
  }

  markReadSent(): void {
    this.readSentPos = this.readPos;
  }

  /**
   * A new carrier: what went out on the old one may be lost. Report the recent refusals again,
   * then both cursors, whatever the peer asks for.
   */
  replayRefusals(): void {
    this.toReport = this.recent.slice();
    this.forced = true;
  }

  /**
   * A message arrived that is not tracked (the peer was taken for a kernel: its handshake did not
   * come in time). Should the peer turn out to report reads after all, a read cursor would pass
   * over such messages as if read: they count as one refusal more in the read reports, so the
   * sender, unable to place it, rejects what the report covers rather than confirm it.
   */
  untracked(): void {
    if (this.gap) return;
    this.gap = true;
    this.refusedThroughRead++;
  }

  /**
   * The peer is no longer tracked (taken for a kernel). What was tracked goes, but not what the
   * sender must still learn if it turns out to report reads: the refusals stay to be reported and
   * are counted, and messages whose fate was not known yet count as untracked (see untracked).
   */
  pause(): void {
    let unsettled = false;
    for (const e of this.log.drain()) {
      // Refused or discarded: counted as a read cursor passing it would (its report stays queued).
      if (e.state === RX_PENDING) unsettled = true;
      else if (e.state !== RX_READ) this.refusedThroughRead++;
    }
    this.epoch++;
    this.sentPos = this.ackPos = this.requestedPos = this.readPos = this.readSentPos = this.nextPos - 1;
    this.forced = false;
    if (unsettled) this.untracked();
  }

  /** The peer restarted: what we tracked belongs to an incarnation that is gone. */
  reset(): void {
    this.log.drain();
    this.epoch++;
    this.ackSeq = this.readSeq = 0;
    this.sentPos = this.ackPos = this.requestedPos = this.readPos = this.readSentPos = this.nextPos - 1;
    this.refusedThroughRead = 0;
    this.toReport = [];
    this.recent = [];
    this.refusedFates = null;
    this.fatesForgottenThrough = 0;
    this.forced = false;
    this.gap = false;
  }

  get pending(): number {
    return this.log.length;
  }
}
