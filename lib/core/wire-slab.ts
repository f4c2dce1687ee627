/** Large frames are pooled by capacity, rounded up to whole pages. */
const PAGE = 4096;

/**
 * Where queued frames live. Frames of small messages are carved one after another from shared
 * slabs, so a burst queued on one path lies contiguous in memory and the transport can hand it
 * to the kernel as one write instead of one write request per message. A slab is garbage once
 * every frame in it has been acknowledged.
 *
 * Large frames get memory of their own, and that memory is reused: a fresh 64 KiB buffer costs
 * page faults on first touch (malloc hands such blocks back to the kernel when freed), which
 * measured ~13 us per message to allocate and fill against ~3.5 us for a reused one. A frame
 * comes back through recycle() once its message is done and no transport still reads it (see
 * RdsOutgoing); the pool keeps at most `poolBytes`, so it never holds more than a burst's worth.
 */
export class WireSlab {
  private slab: Buffer | null = null;
  private used = 0;
  /** Free large buffers by capacity; the ArrayBuffer is the whole capacity. */
  private readonly pool = new Map<number, ArrayBuffer[]>();
  private pooledBytes = 0;
  /** The memory of every large frame alloc() handed out: only these are ever taken back. */
  private readonly own = new WeakSet<ArrayBuffer>();

  constructor(
    private readonly slabSize = 128 * 1024,
    private readonly maxFrame = 16 * 1024,
    private poolBytes = 4 * 1024 * 1024,
  ) {}

  /**
   * Lets the pool keep up to `bytes` (never less than it keeps now). A host node does: the large
   * SENDs of all its processes are read into this memory (send-queue.ts queueWire), and with 4 MiB
   * a stream of 64 KiB messages with 8 MiB in flight still left half its buffers to the collector.
   */
  widenPool(bytes: number): void {
    this.poolBytes = Math.max(this.poolBytes, bytes);
  }

  /** A frame of n bytes, uninitialised; large ones may be recycled (see recyclable). */
  alloc(n: number): Buffer {
    if (n > this.maxFrame) {
      const cap = Math.ceil(n / PAGE) * PAGE;
      const ab = this.pool.get(cap)?.pop();
      if (ab !== undefined) {
        this.pooledBytes -= cap;
        return Buffer.from(ab, 0, n);
      }
      const b = Buffer.allocUnsafeSlow(cap);
      this.own.add(b.buffer as ArrayBuffer);
      return b.subarray(0, n);
    }
    if (this.slab === null || this.slabSize - this.used < n) {
      this.slab = Buffer.allocUnsafeSlow(this.slabSize);
      this.used = 0;
    }
    const b = this.slab.subarray(this.used, this.used + n);
    this.used += n;
    return b;
  }

  /** Whether a frame of this many bytes has memory of its own that recycle() can take back. */
  recyclable(n: number): boolean {
    return n > this.maxFrame;
  }

  /**
   * Whether `b` lies in memory a large alloc() handed out (all of it one frame's): the host node
   * reads a large SEND from its client into such memory, and the message keeps it (send-queue.ts
   * queueWire), so it can come back here too.
   */
  owns(b: Uint8Array): boolean {
    return this.own.has(b.buffer as ArrayBuffer);
  }

  /**
   * Takes back the memory of a large frame from alloc() (all of it: `frame` may be a view of part
   * of it). The caller guarantees nothing reads or writes it any more: its message is done, no
   * write still reads it, and no receiver was handed a view of it.
   */
  recycle(frame: Buffer): void {
    const ab = frame.buffer as ArrayBuffer;
    const cap = ab.byteLength;
    if (!this.own.has(ab) || this.pooledBytes + cap > this.poolBytes) return;
    let list = this.pool.get(cap);
    if (list === undefined) {
      list = [];
      this.pool.set(cap, list);
    }
    list.push(ab);
    this.pooledBytes += cap;
  }

  /** Bytes held for reuse (rds-info, tests). */
  get pooled(): number {
    return this.pooledBytes;
  }
}
