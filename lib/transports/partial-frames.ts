/**
 * The stack-wide budget for frames in progress: a frame whose header has arrived holds (or will
 * hold) memory for its whole declared payload until the last byte comes. Without a cap, peers
 * that each send a 1 MiB header and all but one byte pin maxConnections MiB. A frame that does
 * not fit waits, its connection not read, and its deadline (frameTimeoutMs from its header) runs
 * meanwhile, so every stalled frame is gone frameTimeoutMs after its header however many wait
 * (issue #39: when waiting stopped the clock, 200 addresses took 40-130 s to drain, turn by turn).
 *
 * Who gets room (issue #39):
 * - A stranger's frame (a connection that identified itself less than KNOWN_AFTER_MS ago, from a
 *   peer not known when it connected) may use only half the cap, and waits behind every known
 *   peer's frame: strangers alone never keep a known peer waiting.
 * - While a known peer's frame waits for room, a frame in progress that has made no progress for
 *   STALL_MS (and is not held by the node's own receive limits) is dropped to make it, oldest
 *   first, strangers' first. A frame that keeps making progress is never dropped for another.
 *   A stranger's frame waits for room, or for its deadline: making room for strangers by
 *   dropping strangers would only have the node read one attacker's megabyte after another.
 * Small frames (FREE_BYTES) are not charged.
 */
export class PartialFrameBudget {
  /**
   * Frames up to this size are not charged: one in progress lies in its connection's read buffer
   * (64 KiB to 256 KiB, held anyway), so it costs nothing extra and never waits.
   */
  static readonly FREE_BYTES = 64 * 1024;
  /** A frame in progress with no new byte for this long is stalled: dropped if another needs its room. */
  static readonly STALL_MS = 1000;
  /** A connection's frames count as a stranger's until it has been identified this long (unless its peer was known). */
  static readonly KNOWN_AFTER_MS = 2000;

  /** Bytes charged to the frames in progress that hold a share. */
  held = 0;
  /** The part of `held` that strangers' frames hold (at most half the cap, see fits()). */
  strangerHeld = 0;
  /** Frames holding a share, in the order they got it. */
  private readonly active = new Set<PartialFrame>();
  /** Frames waiting for room, oldest first: known peers' before strangers'. */
  private readonly knownWaiting = new Set<PartialFrame>();
  private readonly strangerWaiting = new Set<PartialFrame>();
  private sweepTimer: NodeJS.Timeout | null = null;
  /** The frame begin() is placing: it learns from begin()'s result, not from granted(). */
  private beginning: PartialFrame | null = null;

  constructor(
    readonly cap: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Frames waiting for room. */
  get waiting(): number {
    return this.knownWaiting.size + this.strangerWaiting.size;
  }

  /**
   * `f`'s header arrived: true if it holds its share now (room was made for it at once, if need
   * be), false if it waits (f.granted() runs once it holds its share).
   */
  begin(f: PartialFrame): boolean {
    const ahead = f.known ? this.knownWaiting.size : this.waiting;
    if (ahead === 0 && this.fits(f)) {
      this.charge(f);
      return true;
    }
    (f.known ? this.knownWaiting : this.strangerWaiting).add(f);
    this.beginning = f;
    try {
      this.sweep();
    } finally {
      this.beginning = null;
    }
    return this.active.has(f);
  }

  /** Bytes of `f` arrived (or its reading resumed after the node's own pause). */
  progress(f: PartialFrame, now = this.now()): void {
    f.progressAt = now;
  }

  /** `f` is complete, dropped or its connection closed: its share (or its place in line) is given back. */
  end(f: PartialFrame): void {
    if (this.knownWaiting.delete(f) || this.strangerWaiting.delete(f)) {
      this.sweep(); // it may have been the head of the line
      return;
    }
    if (!this.active.delete(f)) return;
    this.uncharge(f);
    this.sweep();
  }

  /**
   * Grants the frames at the head of the line that fit, in order; while the head does not fit,
   * drops stalled frames in progress to make room; if none is stalled yet, looks again when the
   * first could be. Runs on every change and from its own timer.
   */
  sweep(): void {
    if (this.sweepTimer !== null) {
      clearTimeout(this.sweepTimer);
      this.sweepTimer = null;
    }
    let head: PartialFrame | undefined;
    for (;;) {
      head = first(this.knownWaiting) ?? first(this.strangerWaiting);
      if (head === undefined) return;
      if (this.fits(head)) {
        (head.known ? this.knownWaiting : this.strangerWaiting).delete(head);
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
    // Nothing the head may drop is stalled yet: look again when the first could be (a frame
    // that makes progress meanwhile only moves that time on).
    if (!head.known) return; // strangers wait for room: end() sweeps again
    let next = Infinity;
    for (const f of this.active) if (!f.held()) next = Math.min(next, f.progressAt + PartialFrameBudget.STALL_MS);
    if (next === Infinity) return; // only held frames: end() sweeps again
    this.sweepTimer = setTimeout(() => this.sweep(), Math.max(1, next - this.now()));
    this.sweepTimer.unref();
  }

  private fits(f: PartialFrame): boolean {
    // A single frame always fits an empty budget (maxPartialFrameBytes is at least one frame), and
    // a stranger's fits when no stranger holds a share.
    if (this.held > 0 && this.held + f.bytes > this.cap) return false;
    return f.known || this.strangerHeld === 0 || this.strangerHeld + f.bytes <= this.cap / 2;
  }

  /** The frame to drop for `head` (a known peer's): stalled, oldest first, a stranger's before a known peer's. */
  private stalled(head: PartialFrame): PartialFrame | undefined {
    if (!head.known) return undefined;
    const since = this.now() - PartialFrameBudget.STALL_MS;
    let known: PartialFrame | undefined;
    for (const f of this.active) {
      if (f.progressAt > since || f.held()) continue;
      if (!f.known) return f;
      known ??= f;
    }
    return known;
  }

  private charge(f: PartialFrame): void {
    this.active.add(f);
    this.held += f.bytes;
    if (!f.known) this.strangerHeld += f.bytes;
  }

  private uncharge(f: PartialFrame): void {
    this.held -= f.bytes;
    if (!f.known) this.strangerHeld -= f.bytes;
  }
}

/** A frame in progress (its header has arrived) that the budget charges. */
export interface PartialFrame {
  /** Bytes it is charged. */
  readonly bytes: number;
  /** A known peer's (see PartialFrameBudget), not a stranger's. */
  readonly known: boolean;
  /** When its last byte arrived (PartialFrameBudget.progress). */
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
