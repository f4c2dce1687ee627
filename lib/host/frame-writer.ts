// The writing side of the host node's control protocol (protocol.ts): frames encoded straight
// into a slab and written in one batch per event-loop turn, or at once on a connection that
// carries single frames.
/** Bytes a turn collects before they are written without waiting for the turn's end. */
const FLUSH_BYTES = 256 << 10;
/** A connection whose last turn wrote more frames than this is carrying a stream: it batches. */
const EAGER_MAX_FRAMES = 2;
/** Parts at least this long are written as they are; shorter ones are copied into the slab. */
export const JOIN_BELOW = 16 << 10;
/** The smallest slab: under 4 KiB, Buffer.allocUnsafe takes it from Node's shared pool. */
const MIN_SLAB = 4000;
/** The largest slab a busy turn asks for: one FLUSH_BYTES batch and the frame that crossed it. */
const MAX_SLAB = FLUSH_BYTES + JOIN_BELOW;
const NO_SLAB = Buffer.alloc(0);

/**
 * Where a frame is encoded: reserve() room for it in `slab`, fill it, commit() it. A payload of
 * JOIN_BELOW bytes or more may follow as parts of its own, written as they are (not copied).
 */
export interface FrameOut {
  /** Room for `n` more bytes at the returned offset of `slab`. */
  reserve(n: number): number;
  readonly slab: Buffer;
  /** The frame is in `slab` up to `end` (and continues with `large`, if given). */
  commit(end: number, large?: readonly Buffer[]): void;
}

/**
 * Collects frames and writes them in one batch per event-loop turn, except on a connection that
 * carries single frames: when the last turn wrote at most EAGER_MAX_FRAMES frames and nothing is
 * queued (`idle()`), the first frame of this turn goes out at once, with whatever beforeFlush()
 * summaries are due. A lone request or reply (a round trip) then does not wait for the end of the
 * turn, while a stream of messages still leaves in one write per turn, with one wakeup of the
 * reader per turn rather than two.
 *
 * Frames are encoded straight into a slab, so a turn's small frames are already one buffer when
 * they are written: no header, meta or payload buffer of their own per frame, and no join
 * before the write (a tenth of a host node's and a third of a sending application's time went
 * to those when each frame was its own buffers). When the sink says the socket took a batch
 * whole (it returns true: the kernel has the bytes, nothing refers to the slab), the slab is
 * written again from its start: memory already in the cache, no allocation and no page faults.
 * Otherwise the socket keeps the written part until it is sent and later frames go after it,
 * into a new slab sized by the turn before (MIN_SLAB to MAX_SLAB). A turn that used little of
 * its slab lets it go, and so does a connection with nothing to write for a whole turn: only
 * connections busy now hold a slab.
 */
export class FrameWriter implements FrameOut {
  /** Written runs of the slab and large payloads, in order, not yet handed to the sink. */
  private parts: Buffer[] = [];
  private bytes = 0;
  slab: Buffer = NO_SLAB;
  /** The slab's bytes up to `off` are frames; from `runStart` they are not yet in `parts`. */
  private off = 0;
  private runStart = 0;
  private nextSlab = MIN_SLAB;
  private turnBytes = 0;
  private scheduled = false;
  private onFlush: (() => void)[] = [];
  /** Called before each write that has frames, to add frames that need no write of their own. */
  piggyback: (() => void) | null = null;
  /** A frame already went out at once this turn: the rest of the turn is batched. */
  private eagerUsed = false;
  /** Frames written this turn, and in the last turn that wrote any. */
  private turnFrames = 0;
  private lastTurnFrames = 0;
  private flushing = false;
  private releaseQueued = false;

  constructor(
    /** Writes a batch; true if nothing refers to `parts` once it returns (the socket took them whole). */
    private readonly sink: (parts: Buffer[]) => boolean | void,
    private readonly idle: () => boolean = () => false,
  ) {}

  private readonly tick = (): void => {
    this.scheduled = false;
    this.eagerUsed = false;
    this.flush();
    if (this.turnFrames > 0) this.lastTurnFrames = this.turnFrames;
    this.turnFrames = 0;
    // The next slab fits what this turn wrote, twice over (within bounds); a slab written from
    // its start again is kept while its turns fill a quarter of it.
    this.nextSlab = Math.min(MAX_SLAB, Math.max(MIN_SLAB, this.turnBytes * 2));
    if (this.off !== 0 || this.turnBytes * 4 < this.slab.length) this.dropSlab();
    else if (!this.releaseQueued) {
      this.releaseQueued = true;
      setImmediate(this.release);
    }
    this.turnBytes = 0;
  };

  /** The turn after a slab was kept: let it go unless this turn is writing too. */
  private readonly release = (): void => {
    this.releaseQueued = false;
    if (!this.scheduled && this.bytes === 0) this.dropSlab();
  };

  private dropSlab(): void {
    this.slab = NO_SLAB;
    this.off = 0;
    this.runStart = 0;
  }

  get pendingBytes(): number {
    return this.bytes;
  }

  reserve(n: number): number {
    if (this.slab.length - this.off < n) {
      this.closeRun();
      const size = Math.max(n, this.nextSlab);
      this.slab = size < 4096 ? Buffer.allocUnsafe(size) : Buffer.allocUnsafeSlow(size);
      this.off = 0;
      this.runStart = 0;
    }
    return this.off;
  }

  commit(end: number, large?: readonly Buffer[]): void {
    this.bytes += end - this.off;
    this.turnBytes += end - this.off;
    this.off = end;
    if (large !== undefined) {
      this.closeRun();
      for (const p of large) {
        this.parts.push(p);
        this.bytes += p.length;
        this.turnBytes += p.length;
      }
    }
    this.framed();
  }

  /** Writes one frame given as buffers: small ones are copied into the slab, large ones kept. */
  write(frame: readonly Buffer[]): void {
    for (const p of frame) {
      if (p.length >= JOIN_BELOW) {
        this.closeRun();
        this.parts.push(p);
        this.bytes += p.length;
        this.turnBytes += p.length;
      } else {
        const o = this.reserve(p.length);
        p.copy(this.slab, o);
        this.bytes += p.length;
        this.turnBytes += p.length;
        this.off = o + p.length;
      }
    }
    this.framed();
  }

  private closeRun(): void {
    if (this.off > this.runStart) {
      this.parts.push(this.slab.subarray(this.runStart, this.off));
      this.runStart = this.off;
    }
  }

  /** A frame is complete: write now or at the end of the turn. */
  private framed(): void {
    if (this.flushing) return;
    this.turnFrames++;
    // A producer that never yields (a loop of sendmsg, or of awaited send()s that resolve at once)
    // keeps the turn going: write what it has so far, so the reader works in parallel instead of
    // waiting for the whole burst.
    if (this.bytes >= FLUSH_BYTES) this.flush();
    else if (!this.eagerUsed && this.lastTurnFrames <= EAGER_MAX_FRAMES && this.idle()) {
      this.eagerUsed = true;
      this.flush();
    }
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.tick);
    }
  }

  /** Runs `fn` just before the next batch is written (to add a frame summing up the turn). */
  beforeFlush(fn: () => void): void {
    this.onFlush.push(fn);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.tick);
    }
  }

  flush(): void {
    if (this.onFlush.length > 0) {
      const fns = this.onFlush;
      this.onFlush = [];
      this.flushing = true;
      try {
        for (const f of fns) f();
      } finally {
        this.flushing = false;
      }
    }
    if (this.bytes === 0) return;
    if (this.piggyback !== null) {
      this.flushing = true;
      try {
        this.piggyback();
      } finally {
        this.flushing = false;
      }
    }
    this.closeRun();
    const parts = this.parts;
    this.parts = [];
    this.bytes = 0;
    if (this.sink(parts) === true) {
      this.off = 0;
      this.runStart = 0;
    }
  }
}

/**
 * Writes one turn's batch: the slab runs (small frames, already joined) and the large payloads
 * between them, in one corked writev. True if the socket took it whole at once (Node writes to
 * the kernel synchronously when it can, and then keeps nothing of the buffers).
 */
export function writeBatch(
  conn: { write(b: Buffer): boolean; cork(): void; uncork(): void; readonly writableLength: number },
  parts: Buffer[],
): boolean {
  if (parts.length === 1) {
    conn.write(parts[0]!);
  } else {
    conn.cork();
    for (const p of parts) conn.write(p);
    conn.uncork();
  }
  return conn.writableLength === 0;
}
