/**
 * The stack-wide budget for frames in progress: a frame whose header has arrived holds (or will
 * hold) memory for its whole declared payload until the last byte comes. Without a cap, peers
 * that each send a 1 MiB header and all but one byte pin maxConnections MiB. A frame that does
 * not fit waits, its connection not read, and its deadline (frameTimeoutMs from its header) runs
 * meanwhile, so every stalled frame is gone frameTimeoutMs after its header however many wait
 * (issue #39: when waiting stopped the clock, 200 addresses took 40-130 s to drain, turn by turn).
 *
 * Who gets room (issue #39) goes by the frame's rank (FrameRank):
 * - A stranger's frames may use only half the cap together: strangers never keep the others
 *   waiting.
 * - Waiting frames are served by rank, then in arrival order.
 * - While a frame waits for room, a frame in progress of a lower rank (or, between proven
 *   connections, of the same) that has made no progress for STALL_MS, and that the node's own
 *   receive limits do not hold, is dropped to make that room: oldest first, lowest rank first.
 *   A frame that keeps making progress is never dropped for another. Frames that cannot drop
 *   others wait for room or for their deadline: dropping one attacker's frame for another's
 *   would only have the node read one attacker's megabyte after another.
 * Small frames (FREE_BYTES) are not charged.
 */
export class PartialFrameBudget {
  /**
   * Frames up to this size are not charged: one in progress lies in its connection's read buffer
   * (64 KiB to 256 KiB, held anyway), so it costs nothing extra and never waits.
   */
  static readonly FREE_BYTES = 64 * 1024;
  /** A frame in progress with no new byte for this long is stalled: dropped if a higher rank needs its room. */
  static readonly STALL_MS = 1000;
  /** A connection's frames are a stranger's until it has been identified this long (unless its peer was known). */
  static readonly KNOWN_AFTER_MS = 2000;

  /** Bytes charged to the frames in progress that hold a share. */
  held = 0;
  /** The part of `held` that strangers' frames hold (at most half the cap, see fits()). */
  strangerHeld = 0;
  /** Frames holding a share, in the order they got it. */
  private readonly active = new Set<PartialFrame>();
  /** Frames waiting for room, by rank, oldest first. */
  private readonly queues: [Set<PartialFrame>, Set<PartialFrame>, Set<PartialFrame>] = [
    new Set(),
    new Set(),
    new Set(),
  ];
  private sweepTimer: NodeJS.Timeout | null = null;
  /** The frame begin() is placing: it learns from begin()'s result, not from granted(). */
  private beginning: PartialFrame | null = null;

  constructor(
    readonly cap: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Frames waiting for room. */
  get waiting(): number {
    return this.queues[0].size + this.queues[1].size + this.queues[2].size;
  }

  /**
   * `f`'s header arrived: true if it holds its share now (room was made for it at once, if need
   * be), false if it waits (f.granted() runs once it holds its share).
   */
  begin(f: PartialFrame): boolean {
    let ahead = 0;
    for (let r: number = f.rank; r <= FrameRank.Proven; r++) ahead += this.queues[r as FrameRank].size;
    if (ahead === 0 && this.fits(f)) {
      this.charge(f);
      return true;
    }
    this.queues[f.rank].add(f);
    this.beginning = f;
    try {
      this.sweep();
    } finally {
      this.beginning = null;
    }
    return this.active.has(f);
  }

  /** `f` is complete, dropped or its connection closed: its share (or its place in line) is given back. */
  end(f: PartialFrame): void {
    if (this.queues[f.rank].delete(f)) {
      this.sweep(); // it may have been the head of the line
      return;
    }
    if (!this.active.delete(f)) return;
    this.uncharge(f);
    this.sweep();
  }

  /**
   * Grants the frames at the head of the line that fit, in order; while the head does not fit,
   * drops stalled frames it may drop to make room; if none is stalled yet, looks again when the
   * first could be. Runs on every change and from its own timer.
   */
  sweep(): void {
    if (this.sweepTimer !== null) {
      clearTimeout(this.sweepTimer);
      this.sweepTimer = null;
    }
    let head: PartialFrame | undefined;
    for (;;) {
      head = first(this.queues[2]) ?? first(this.queues[1]) ?? first(this.queues[0]);
      if (head === undefined) return;
      if (this.fits(head)) {
        this.queues[head.rank].delete(head);
        this.charge(head);
        if (head !== this.beginning) head.granted();
        continue;
      }
      const victim = this.stalled(head);
      if (victim === undefined) break;
      this.active.delete(victim);
      this.uncharge(victim);
      victim.evict();
    }
    // Nothing the head may drop is stalled yet: look again when the first could be (a frame that
    // makes progress meanwhile only moves that time on). Strangers drop nothing: end() sweeps.
    let next = Infinity;
    for (const f of this.active)
      if (mayDrop(head, f) && !f.held()) next = Math.min(next, f.progressAt + PartialFrameBudget.STALL_MS);
    if (next === Infinity) return;
    this.sweepTimer = setTimeout(() => this.sweep(), Math.max(1, next - this.now()));
    this.sweepTimer.unref();
  }

  private fits(f: PartialFrame): boolean {
    // A single frame always fits an empty budget (maxPartialFrameBytes is at least one frame), and
    // a stranger's fits when no stranger holds a share.
    if (this.held > 0 && this.held + f.bytes > this.cap) return false;
    return f.rank > FrameRank.Stranger || this.strangerHeld === 0 || this.strangerHeld + f.bytes <= this.cap / 2;
  }

  /** The frame to drop for `head`: stalled, one it may drop, lowest rank first, then oldest. */
  private stalled(head: PartialFrame): PartialFrame | undefined {
    const since = this.now() - PartialFrameBudget.STALL_MS;
    let best: PartialFrame | undefined;
    for (const f of this.active) {
      if (f.progressAt > since || !mayDrop(head, f) || f.held()) continue;
      if (best === undefined || f.rank < best.rank) best = f;
      if (f.rank === FrameRank.Stranger) break;
    }
    return best;
  }

  private charge(f: PartialFrame): void {
    f.progressAt = this.now(); // its stall clock starts when it may be read
    this.active.add(f);
    this.held += f.bytes;
    if (f.rank === FrameRank.Stranger) this.strangerHeld += f.bytes;
  }

  private uncharge(f: PartialFrame): void {
    this.held -= f.bytes;
    if (f.rank === FrameRank.Stranger) this.strangerHeld -= f.bytes;
  }
}

/**
 * Whose frame it is, for PartialFrameBudget (higher: served first, may drop lower ranks' stalled
 * frames). Stranger: a connection identified less than KNOWN_AFTER_MS ago, from a peer not known
 * when it connected. Known: any other that has not yet completed a charged frame. Proven: one
 * that has completed a frame over FREE_BYTES (it has sent a large frame through before).
 */
export const FrameRank = { Stranger: 0, Known: 1, Proven: 2 } as const;
export type FrameRank = (typeof FrameRank)[keyof typeof FrameRank];

/** Whether `waiter` may drop `f` (when stalled): a lower rank, or, between proven connections, the same. */
function mayDrop(waiter: PartialFrame, f: PartialFrame): boolean {
  return f.rank < waiter.rank || (f.rank === FrameRank.Proven && waiter.rank === FrameRank.Proven);
}

/** A frame in progress (its header has arrived) that the budget charges. */
export interface PartialFrame {
  /** Bytes it is charged. */
  readonly bytes: number;
  readonly rank: FrameRank;
  /** When its last byte arrived, or its reading resumed after the node's own pause. */
  progressAt: number;
  /** The node's own receive limits stop its reading now: it is not stalled by its peer. */
  held(): boolean;
  /** It waited and now holds its share. */
  granted(): void;
  /** It was dropped for another (stalled at the cap): drop its connection. */
  evict(): void;
}

function first<T>(s: Set<T>): T | undefined {
  for (const x of s) return x;
  return undefined;
}
