/** What a path does with a sequenced message: deliver it, drop it as a copy, or drop it as old. */
export type RxVerdict = 'new' | 'dup' | 'old';

/** A receive space's position (RxSequence.mark), to go back to. */
export interface RxMark {
  readonly state: [number, number, number, number];
  readonly holes: [number[], number[]] | null;
}

/**
 * Holes remembered per path, as ranges: original numbers below the highest one received that
 * never arrived (moved away before they went out, skipped by a withheld probe or a cancel). Past
 * this many ranges the oldest are forgotten and count as received, as every number below the
 * cursors did before holes were tracked: a bound against a peer whose numbers jump, which costs it
 * one range per frame, never work per number.
 */
const MAX_HOLE_RANGES = 256;

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
  /** One past the highest original number of this path received, natively or moved. */
  private high = 0;
  /** Ranges of original numbers below `high` that have not arrived: [lo, hi] inclusive, ascending; made at the first gap. */
  private holeLo: number[] | null = null;
  private holeHi: number[] | null = null;

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
   * to compare with, deliver). It is a copy if that very original number already arrived there,
   * natively or moved. (Not "if a later one arrived": a message moved away before it went out
   * can come back after later messages of its origin went natively; taking it for a copy then
   * dropped it and reported it read, a confirmation for a message never delivered.) Kernels
   * never send the record.
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
      if (!moved) this.markReceived(seq);
      return 'dup';
    }
    this.nextSeq = seq + 1;
    if (!moved) {
      this.nativeNext = seq + 1;
      this.markReceived(seq);
    }
    this.messages++;
    this.bytes += len;
    return 'new';
  }

  /** A message numbered `originSeq` here arrived moved over another path: a copy, or it is recorded (and raises the floor). */
  private movedCopy(originSeq: number): boolean {
    if (this.received(originSeq)) return true;
    this.markReceived(originSeq);
    if (originSeq + 1 > this.floor) this.floor = originSeq + 1;
    return false;
  }

  /** Whether original number `n` of this path arrived (natively or moved); a forgotten hole counts as arrived. */
  private received(n: number): boolean {
    return n < this.high && this.holeAt(n) < 0;
  }

  /** The index of the hole range holding `n`, or -1. */
  private holeAt(n: number): number {
    const lo = this.holeLo;
    const hi = this.holeHi;
    if (lo === null || hi === null) return -1;
    let a = 0;
    let b = lo.length - 1;
    while (a <= b) {
      const m = (a + b) >>> 1;
      if (hi[m]! < n) a = m + 1;
      else if (lo[m]! > n) b = m - 1;
      else return m;
    }
    return -1;
  }

  private markReceived(n: number): void {
    if (n >= this.high) {
      if (n > this.high) this.addHole(this.high, n - 1);
      this.high = n + 1;
      return;
    }
    const i = this.holeAt(n);
    if (i < 0) return;
    const lo = this.holeLo!;
    const hi = this.holeHi!;
    if (lo[i] === hi[i]) {
      lo.splice(i, 1);
      hi.splice(i, 1);
    } else if (n === lo[i]) lo[i] = n + 1;
    else if (n === hi[i]) hi[i] = n - 1;
    else {
      lo.splice(i + 1, 0, n + 1);
      hi.splice(i + 1, 0, hi[i]!);
      hi[i] = n - 1;
      this.trimHoles();
    }
  }

  private addHole(from: number, to: number): void {
    (this.holeLo ??= []).push(from);
    (this.holeHi ??= []).push(to);
    this.trimHoles();
  }

  private trimHoles(): void {
    if (this.holeLo !== null && this.holeLo.length > MAX_HOLE_RANGES) {
      this.holeLo.shift();
      this.holeHi!.shift();
    }
  }

  /**
   * Where this space stands (to be put back by rollback): taken when a carrier that may turn out
   * to be another lane's starts to feed this path (Handshake.holdsData's case).
   */
  mark(): RxMark {
    return {
      state: [this.nextSeq, this.nativeNext, this.floor, this.high],
      holes: this.holeLo === null ? null : [[...this.holeLo], [...this.holeHi!]],
    };
  }

  /**
   * What a carrier fed since `m` was numbered in another lane's space (it was a lane taken for
   * path 0, Handshake.misplacedLane): this space goes back to where it stood, or the real path's
   * next messages, numbered lower, would be dropped as old (the nemesis: a restarted node lost the
   * kernel's first messages to it). What was delivered stays delivered (counted in `messages`):
   * the kernel released it once TCP acknowledged it and never sends it again.
   */
  rollback(m: RxMark): void {
    [this.nextSeq, this.nativeNext, this.floor, this.high] = m.state;
    this.holeLo = m.holes === null ? null : m.holes[0];
    this.holeHi = m.holes === null ? null : m.holes[1];
  }

  /** The peer restarted: its numbering starts over. */
  reset(): void {
    this.restore(0, 0, 0);
  }

  /**
   * A forgotten connection came back (reclaim.ts keeps the three numbers of each path): everything
   * below the floor and the native cursor is taken as received (its holes were not kept).
   */
  restore(next: number, movedFloor: number, nativeNext: number): void {
    this.nextSeq = next;
    this.floor = movedFloor;
    this.nativeNext = nativeNext;
    this.high = Math.max(movedFloor, nativeNext);
    this.holeLo = this.holeHi = null;
  }
}
