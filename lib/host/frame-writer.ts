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
 * Full-size slabs the socket has finished writing, kept for the next batches of any writer in the
 * process. A stream into a socket that does not take each batch whole at once (its reader is
 * slower: the usual case for a sending application, and for a node writing to a slow reader)
 * otherwise needs a new slab per batch: a sending application wrote every byte into fresh memory
 * (6,340 slabs, 965 MiB in one 6 s run at 1 KiB), paying its page faults and the collections that
 * much external memory triggers. Up to MAX_SPARE_SLABS (17 MiB, about what a stream keeps in
 * flight with an 8 MiB send buffer); all of them are let go once SPARE_IDLE_MS pass in which none
 * was taken, so a burst's memory does not stay with a process that went quiet.
 */
const MAX_SPARE_SLABS = 64;
const SPARE_IDLE_MS = 1000;
/** Slabs one writer tracks until their writes complete. */
const MAX_LENT_SLABS = 64;

/** @internal */
export class SparePool {
  private readonly slabs: Buffer[] = [];
  private taken = false;
  private timer: ReturnType<typeof setTimeout> | null = null;

  get size(): number {
    return this.slabs.length;
  }

  take(): Buffer | undefined {
    const s = this.slabs.pop();
    if (s !== undefined) this.taken = true;
    return s;
  }

  /** A full-size slab nothing refers to any more, kept while there is room. */
  give(slab: Buffer): void {
    if (slab.length !== MAX_SLAB || this.slabs.length >= MAX_SPARE_SLABS) return;
    this.slabs.push(slab);
    if (this.timer === null) this.arm();
  }

  private arm(): void {
    this.timer = setTimeout(this.trim, SPARE_IDLE_MS);
    this.timer.unref();
  }

  private readonly trim = (): void => {
    this.timer = null;
    if (!this.taken) {
      this.slabs.length = 0;
      return;
    }
    this.taken = false;
    this.arm();
  };
}

/** The process's pool. @internal */
export const spareSlabs = new SparePool();

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
 * into a new slab sized by the turn before (MIN_SLAB to MAX_SLAB); a full-size one is taken from
 * the slabs whose writes have completed (SparePool) when there is one. A turn that used little of
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
  /** Batches handed to the sink, and the last one whose write has completed (`written`). */
  private batches = 0;
  private batchesDone = 0;
  /** The last batch that refers to the current slab (0: none). */
  private slabBatch = 0;
  /** Slabs this writer moved on from while a batch still referred to them, oldest first. */
  private readonly lent: { slab: Buffer; batch: number }[] = [];

  constructor(
    /**
     * Writes a batch; true if nothing refers to `parts` once it returns (the socket took them
     * whole). `written` is to be called once the socket no longer refers to them (the write's
     * callback); a sink that drops the batch need not call it.
     */
    private readonly sink: (parts: Buffer[], written: () => void) => boolean | void,
    private readonly idle: () => boolean = () => false,
  ) {}

  /**
   * Batch `batch`'s write completed, and with it every earlier one (a socket completes its writes
   * in order; a batch the sink dropped is never written and needs no report): their slabs may be
   * reused.
   */
  private written(batch: number): void {
    if (batch <= this.batchesDone) return;
    this.batchesDone = batch;
    while (this.lent.length > 0 && this.lent[0]!.batch <= batch) spareSlabs.give(this.lent.shift()!.slab);
  }

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
    this.retireSlab();
    this.slab = NO_SLAB;
    this.off = 0;
    this.runStart = 0;
  }

  /** The writer moves on from its slab: reusable now, or once the batch that refers to it is written. */
  private retireSlab(): void {
    const slab = this.slab;
    if (slab.length !== MAX_SLAB) return;
    if (this.slabBatch <= this.batchesDone) spareSlabs.give(slab);
    else {
      // Each is held by a write in progress anyway; the bound is for a socket whose writes never
      // complete (destroyed with batches queued): its slabs are left to the collector.
      if (this.lent.length >= MAX_LENT_SLABS) this.lent.shift();
      this.lent.push({ slab, batch: this.slabBatch });
    }
    this.slabBatch = 0;
  }

  get pendingBytes(): number {
    return this.bytes;
  }

  reserve(n: number): number {
    if (this.slab.length - this.off < n) {
      this.closeRun();
      // Its last run is in `parts`, for the next batch: the slab is free once that is written.
      if (this.off > 0) this.slabBatch = this.batches + 1;
      this.retireSlab();
      const size = Math.max(n, this.nextSlab);
      this.slab =
        size < 4096
          ? Buffer.allocUnsafe(size)
          : ((size === MAX_SLAB ? spareSlabs.take() : undefined) ?? Buffer.allocUnsafeSlow(size));
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
    const batch = ++this.batches;
    if (this.sink(parts, () => this.written(batch)) === true) {
      this.off = 0;
      this.runStart = 0;
    } else if (this.off > 0) this.slabBatch = batch;
  }
}

/**
 * Writes one turn's batch: the slab runs (small frames, already joined) and the large payloads
 * between them, in one corked writev. True if the socket took it whole at once (Node writes to
 * the kernel synchronously when it can, and then keeps nothing of the buffers).
 */
export function writeBatch(
  conn: {
    write(b: Buffer, cb?: () => void): boolean;
    cork(): void;
    uncork(): void;
    readonly writableLength: number;
  },
  parts: Buffer[],
  written?: () => void,
): boolean {
  const last = parts.length - 1;
  if (last === 0) {
    conn.write(parts[0]!, written);
  } else {
    conn.cork();
    for (let i = 0; i < last; i++) conn.write(parts[i]!);
    conn.write(parts[last]!, written);
    conn.uncork();
  }
  return conn.writableLength === 0;
}
