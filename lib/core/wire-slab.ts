/**
 * Where queued frames live. Frames of small messages are carved one after another from shared
 * slabs, so a burst queued on one path lies contiguous in memory and the transport can hand it
 * to the kernel as one write instead of one write request per message. A slab is garbage once
 * every frame in it has been acknowledged; large frames get a buffer of their own.
 */
export class WireSlab {
  private slab: Buffer | null = null;
  private used = 0;

  constructor(private readonly slabSize = 128 * 1024, private readonly maxFrame = 16 * 1024) {}

  /** n bytes, uninitialised. */
  alloc(n: number): Buffer {
    if (n > this.maxFrame) return Buffer.allocUnsafeSlow(n);
    if (this.slab === null || this.slabSize - this.used < n) {
      this.slab = Buffer.allocUnsafeSlow(this.slabSize);
      this.used = 0;
    }
    const b = this.slab.subarray(this.used, this.used + n);
    this.used += n;
    return b;
  }
}
