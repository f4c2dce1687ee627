import { Fifo } from './fifo.js';

/** Who is told when the application has taken a message: the path that received it. */
export interface RxOwner {
  consumed(e: RxEntry): void;
}

/**
 * One accepted message on a path, until it has been acknowledged to the sender. It travels with
 * the message to the socket as its receipt: `owner.consumed(entry)` once the application has it.
 */
export interface RxEntry {
  seq: number;
  pos: number;
  consumed: boolean;
  at: number;
  owner: RxOwner;
}

/**
 * What a path may acknowledge to an rds-socket peer. A message counts as received once the
 * application has taken it from its socket (or the core handled or dropped it), so an ack means
 * "the peer's application has it", which survives the receiver being killed. To keep one idle
 * socket from holding back acknowledgements for every other socket on the path, a message that
 * waits unread longer than `maxDelayMs` is acknowledged as queued, which is what the kernel does.
 * Entries are kept in arrival order; the ack is the sequence number at the end of the consumed
 * prefix (arrival order, not numeric order, so a restarted peer counting from 1 again is fine).
 */
export class RxAckTracker {
  private readonly log = new Fifo<RxEntry>();
  private nextPos = 1;
  private ackPos = 0;
  private sentPos = 0;
  private requestedPos = 0;
  /** The peer asked for an ack regardless of progress (a heartbeat). */
  private forced = false;
  /** Sequence number to put in h_ack. */
  ackSeq = 0;

  constructor(private readonly maxDelayMs: number) {}

  record(seq: number, consumed: boolean, ackRequired: boolean, now: number, owner: RxOwner): RxEntry {
    const e: RxEntry = { seq, pos: this.nextPos++, consumed, at: now, owner };
    this.log.push(e);
    if (ackRequired) this.requestedPos = e.pos;
    return e;
  }

  force(): void {
    this.forced = true;
  }

  /** Moves the ack over the consumed prefix. Returns ms until an unread head forces progress, or -1. */
  advance(now: number): number {
    for (;;) {
      const head = this.log.peek();
      if (head === undefined) return -1;
      if (!head.consumed && now - head.at < this.maxDelayMs) return this.maxDelayMs - (now - head.at);
      this.log.shift();
      this.ackSeq = head.seq;
      this.ackPos = head.pos;
    }
  }

  /** Anything acknowledged that the peer has not been told. */
  get unsent(): boolean {
    return this.ackPos > this.sentPos;
  }

  /** An ack frame (or a piggybacked h_ack) would tell the peer something it asked for. */
  get wanted(): boolean {
    return this.forced || (this.requestedPos > this.sentPos && this.ackPos > this.sentPos);
  }

  markSent(): void {
    this.sentPos = this.ackPos;
    this.forced = false;
  }

  /** The peer restarted: what we tracked belongs to an incarnation that is gone. */
  reset(): void {
    this.log.drain();
    this.ackSeq = 0;
    this.sentPos = this.ackPos = this.requestedPos = this.nextPos - 1;
    this.forced = false;
  }

  get pending(): number {
    return this.log.length;
  }
}
