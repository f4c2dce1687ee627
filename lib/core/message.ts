import { RDS_FLAG_RETRANSMITTED, RDS_HEADER_SIZE } from '../constants.js';
import { OFF_FLAGS } from '../wire/header.js';
import type { RdsConnPath } from './path.js';

/** Who gets the bytes back when a message is acknowledged or cancelled: the sending socket. */
export interface SendOwner {
  messageDone(msg: RdsOutgoing): void;
  /** True when the owner's send budget is half used: ask the peer for an ack now. */
  wantsAck?(): boolean;
}

/**
 * One queued message. `wire` is the complete frame, header and payload in one buffer, encoded once
 * when the message is queued, so transmitting is a single write and a retransmission only flips
 * a flag bit.
 */
export class RdsOutgoing {
  /** True once acknowledged or cancelled: its bytes went back to the owner. */
  done = false;
  cancelled = false;
  /** performance.now() of the first transmission (0 = not yet sent), for the latency histogram. */
  sentAt = 0;
  /** Set by send({ confirm: true }): told when the peer has the message, or why it never will. */
  settle: ((err?: Error) => void) | null = null;

  constructor(
    readonly wire: Buffer,
    readonly seq: number,
    readonly sport: number,
    readonly dport: number,
    readonly daddr: string,
    readonly path: RdsConnPath,
    readonly owner: SendOwner | null,
  ) {}

  get len(): number {
    return this.wire.length - RDS_HEADER_SIZE;
  }

  get flags(): number {
    return this.wire[OFF_FLAGS]!;
  }

  markRetransmitted(): void {
    this.wire[OFF_FLAGS] = this.wire[OFF_FLAGS]! | RDS_FLAG_RETRANSMITTED;
  }

  /** Acknowledged (no error) or cancelled (err): return its bytes to the sender's budget, once. */
  complete(err?: Error): void {
    if (this.done) return;
    this.done = true;
    if (err) this.cancelled = true;
    this.owner?.messageDone(this);
    const settle = this.settle;
    this.settle = null;
    settle?.(err);
  }
}
