/**
 * The stack-wide budget for frames in progress: a frame whose header has arrived holds (or will
 * hold) memory for its whole declared payload until the last byte comes. Without a cap, peers
 * that each send a 1 MiB header and all but one byte pin maxConnections MiB. A carrier whose
 * next frame does not fit waits, not reading, in arrival order, until frames in progress
 * elsewhere complete or are dropped (frameTimeoutMs bounds how long that takes). Small frames
 * (FREE_BYTES) are not charged.
 */
export class PartialFrameBudget {
  /**
   * Frames up to this size are not charged: one in progress lies in its connection's read buffer
   * (64 KiB to 256 KiB, held anyway), so it costs nothing extra and never waits.
   */
  static readonly FREE_BYTES = 64 * 1024;

  /** Declared payload bytes of the frames in progress that hold a share. */
  held = 0;
  /** Carriers waiting for room, oldest first: each tries to take its share, true once done. */
  private readonly waiting = new Set<() => boolean>();

  constructor(readonly cap: number) {}

  /** Takes `n` bytes if they fit (a single frame always fits an empty budget). */
  tryTake(n: number): boolean {
    if (this.waiting.size > 0 || (this.held > 0 && this.held + n > this.cap)) return false;
    this.held += n;
    return true;
  }

  /** Takes `n` bytes for a waiter being woken (it is first in line). */
  private take(n: number): boolean {
    if (this.held > 0 && this.held + n > this.cap) return false;
    this.held += n;
    return true;
  }

  give(n: number): void {
    if (n === 0) return;
    this.held -= n;
    this.wake();
  }

  /**
   * Queues a carrier for `n` bytes; `granted` runs once they are taken. Returns a function that
   * withdraws the request (the carrier closed first).
   */
  wait(n: number, granted: () => void): () => void {
    const attempt = (): boolean => {
      if (!this.take(n)) return false;
      granted();
      return true;
    };
    this.waiting.add(attempt);
    return () => {
      if (this.waiting.delete(attempt)) this.wake();
    };
  }

  private wake(): void {
    for (const attempt of this.waiting) {
      // Delete first: granted() may read more and ask again.
      this.waiting.delete(attempt);
      if (!attempt()) {
        // Not yet: put it back at the head of the line (a Set keeps insertion order, so rebuild).
        const rest = [...this.waiting];
        this.waiting.clear();
        this.waiting.add(attempt);
        for (const a of rest) this.waiting.add(a);
        return;
      }
    }
  }
}
