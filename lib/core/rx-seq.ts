/** What a path does with a sequenced message: deliver it, drop it as a copy, or drop it as old. */
export type RxVerdict = 'new' | 'dup' | 'old';

/**
 * One path's receive sequence space (the kernel's cp_next_rx_seq and its duplicate check), with
 * rds-socket's failover record: which of the path's own messages already arrived moved over
 * another path. Survives reconnects (spec §2.5); forgotten when the peer restarts.
 */
export class RxSequence {
  private nextSeq = 0;
  private nativeNext = 0;
  private floor = 0;
  private messages = 0;
  private bytes = 0;

  /** One past the last sequence accepted. */
  get next(): number {
    return this.nextSeq;
  }

  /** One past the last sequence accepted that was numbered on this path (not moved here). */
  get nativeNextSeq(): number {
    return this.nativeNext;
  }

  /**
   * Messages first numbered on this path below this sequence arrived moved over another path, so
   * a late copy still in this path's old carrier is a duplicate.
   */
  get movedFloor(): number {
    return this.floor;
  }

  /** Messages and payload bytes accepted ('new'). */
  get acceptedMessages(): number {
    return this.messages;
  }

  get acceptedBytes(): number {
    return this.bytes;
  }

  /**
   * Judges a sequenced message of `len` payload bytes. 'old': a retransmission below what was
   * accepted. 'dup': a copy of a message that already arrived through failover (the sequence
   * still advances). 'new': accepted, even if it went backwards (a restarted peer starts again at
   * 1 without the RETRANSMITTED flag).
   *
   * A message moved from a dead path (`moved`) carries that path's index and its original number
   * there (`originSeq`); `origin` is that path's sequence space (undefined: no such path, nothing
   * to compare with, deliver). The sender keeps each path's messages in original order across
   * moves, so a moved message is a copy if a message of its origin with the same or a later
   * original number was already accepted, natively or moved. Kernels never send the record.
   */
  accept(
    seq: number,
    retransmitted: boolean,
    len: number,
    moved = false,
    origin?: RxSequence,
    originSeq = 0,
  ): RxVerdict {
    if (seq < this.nextSeq && retransmitted) return 'old';
    if (moved ? origin?.movedCopy(originSeq) : seq < this.floor) {
      this.nextSeq = Math.max(this.nextSeq, seq + 1);
      return 'dup';
    }
    this.nextSeq = seq + 1;
    if (!moved) this.nativeNext = seq + 1;
    this.messages++;
    this.bytes += len;
    return 'new';
  }

  /** A message numbered `originSeq` here arrived moved over another path: a copy, or it raises the floor. */
  private movedCopy(originSeq: number): boolean {
    if (originSeq < this.nativeNext || originSeq < this.floor) return true;
    this.floor = originSeq + 1;
    return false;
  }

  /** The peer restarted: its numbering starts over. */
  reset(): void {
    this.restore(0, 0, 0);
  }

  /** A forgotten connection came back (reclaim.ts keeps the three numbers of each path). */
  restore(next: number, movedFloor: number, nativeNext: number): void {
    this.nextSeq = next;
    this.floor = movedFloor;
    this.nativeNext = nativeNext;
  }
}
