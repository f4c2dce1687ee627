import { RDS_HEADER_SIZE, RDS_MAX_MSG_SIZE } from '../constants.js';
import { OFF_LEN } from './header.js';

/** A protocol violation seen in a byte stream; the transport drops that connection. */
export class RdsProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RdsProtocolError';
  }
}

/** Called with each complete frame: its 48-byte header and its payload (views of the read buffer). */
export type FrameHandler = (header: Buffer, payload: Buffer) => void;

/** Reads land one after another in slabs this large (more for a bigger frame). */
export const READ_SLAB_SIZE = 256 * 1024;
/** A slab with less room than this left is replaced rather than read into. */
const MIN_READ = 16 * 1024;
/**
 * At most this much per read, as Node reads by default. Larger reads let one turn of the event
 * loop take in more than a sender's whole send buffer before the acknowledgements that free it
 * go out (they leave once the turn's reads are done), and the sender stalls: measured ~15% fewer
 * 1 KiB messages per second with unbounded reads, and no gain at 64 KiB.
 */
const READ_MAX = 64 * 1024;
/**
 * A quiet connection (its last read took less than it was offered, and ended between frames)
 * reads into a 2 KiB slab instead of keeping a 64 KiB one: an idle carrier holds almost no read
 * memory. A read that fills what it was offered means more is waiting, and the next slab is a
 * full one again.
 */
const QUIET_SLAB = 2048;
/** A quiet slab with less room than this left is replaced (a small frame or header still fits). */
const QUIET_MIN = 256;
/** A quiet connection keeps reading into its current slab up to this size (one grown for a frame). */
const QUIET_KEEP = 8192;

/**
 * Reassembles `[48-byte header][h_len bytes]` records from a TCP byte stream (spec §2.3), in one
 * of two ways:
 * - `push(chunk)`: chunks the stream allocated. A frame that lies whole inside one chunk is handed
 *   up as views of that chunk, without a copy (like the kernel, which keeps the socket buffers a
 *   message arrived in); only a frame split across chunks is assembled in memory of its own.
 * - `readBuffer()` / `filled(n)`: the socket reads into memory the reader hands out (net's
 *   `onread`). Reads go one after another into a slab, so a frame split across reads is still
 *   contiguous and every frame is handed up as views; only when a slab runs out is the one partial
 *   frame at its end copied to the next. This saves the per-read allocation and the copy of split
 *   frames, which is most of the receive cost for large messages.
 * Either way a delivered frame keeps the memory it lies in alive for as long as it is referenced.
 * h_len is bounded before any memory is allocated for it, so a lying header costs nothing.
 */
export class FrameReader {
  private readonly header = Buffer.allocUnsafe(RDS_HEADER_SIZE);
  private headerFill = 0;
  private payload: Buffer | null = null;
  private payloadFill = 0;
  private failed = false;
  /** Frames handed up so far. */
  frames = 0;
  /** Slab mode: the frame in progress starts at slabParse, and reads have filled up to slabFill. */
  private slab: Buffer | null = null;
  private slabParse = 0;
  private slabFill = 0;
  /** Bytes the last readBuffer() offered, and whether the read that followed took fewer (see QUIET_SLAB). */
  private offered = 0;
  /**
   * A new connection starts quiet: its first reads (handshake, a few messages) go into a 2 KiB slab,
   * and it moves to full slabs only once reads fill what they are offered. A 64 KiB first slab
   * released a moment later still cost the process its RSS (the allocator keeps the pages), per path.
   */
  private quiet = true;
  /** Reads in a row that took all they were offered (a stream, or a frame straddling a small slab). */
  private streak = 0;
  /** Bytes the last read took. */
  private lastRead = 0;

  /**
   * Set while the transport has stopped reading: readBuffer() then hands out what is left of the
   * current slab instead of allocating one for the frame in progress (Node asks for the next
   * buffer right after every read, paused or not), so a connection that waits holds no more
   * than it has read.
   */
  holdGrowth = false;

  constructor(
    private readonly onFrame: FrameHandler,
    private readonly maxLen = RDS_MAX_MSG_SIZE,
  ) {}

  /** Bytes still missing from the frame in progress: [header bytes, payload bytes] (rds-info -T). */
  get remaining(): [number, number] {
    if (this.slab !== null) {
      const have = this.slabFill - this.slabParse;
      if (have < RDS_HEADER_SIZE) return [RDS_HEADER_SIZE - have, 0];
      return [0, RDS_HEADER_SIZE + this.slab.readUInt32BE(this.slabParse + OFF_LEN) - have];
    }
    if (this.payload === null) return [RDS_HEADER_SIZE - this.headerFill, 0];
    return [0, this.payload.length - this.payloadFill];
  }

  /** A header has begun but is not complete (checked after every read, so it allocates nothing). */
  get partialHeader(): boolean {
    if (this.slab !== null) {
      const have = this.slabFill - this.slabParse;
      return have > 0 && have < RDS_HEADER_SIZE;
    }
    return this.headerFill > 0 && this.payload === null;
  }

  /**
   * h_len of the frame in progress once its header is complete, 0 when there is none or only part
   * of a header (checked after every read, so it allocates nothing).
   */
  get partialPayload(): number {
    if (this.slab !== null) {
      if (this.slabFill - this.slabParse < RDS_HEADER_SIZE) return 0;
      return this.slab.readUInt32BE(this.slabParse + OFF_LEN);
    }
    return this.payload === null ? 0 : this.payload.length;
  }

  /** True between frames: nothing partial is buffered. */
  get idle(): boolean {
    if (this.slab !== null) return this.slabFill === this.slabParse;
    return this.headerFill === 0 && this.payload === null;
  }

  /**
   * Where the next read should put its bytes. Frames already handed up are never written over:
   * reads only move forward, and a new slab starts when the frame in progress would not fit or
   * too little room is left.
   */
  readBuffer(): Buffer {
    // After a violation the connection is being dropped; whatever still arrives is discarded.
    if (this.failed) return this.header;
    let slab = this.slab;
    const have = this.slabFill - this.slabParse;
    if (this.holdGrowth && slab !== null) {
      // A connection that waits (for room for its frame, or for its application) keeps only what
      // it has read of the frame in progress, in memory of its own: not the rest of a large slab,
      // which (frames before it gone) would otherwise stay pinned by these few bytes (issue #39).
      // A frame begun by at most one read is copied; a larger part of one keeps its slab.
      if (slab.length > have + QUIET_KEEP && have <= READ_MAX + RDS_HEADER_SIZE) {
        const next = Buffer.allocUnsafeSlow(Math.max(QUIET_SLAB, have + QUIET_MIN));
        slab.copy(next, 0, this.slabParse, this.slabFill);
        this.slab = slab = next;
        this.slabParse = 0;
        this.slabFill = have;
      }
      if (slab.length > this.slabFill) {
        const end = Math.min(slab.length, this.slabFill + READ_MAX);
        this.offered = end - this.slabFill;
        return slab.subarray(this.slabFill, end);
      }
    }
    const quiet = this.quiet && !this.holdGrowth;
    if (quiet && have === 0) {
      // Between messages on a quiet connection: let a big slab go (the frames handed up keep
      // what they still reference), read into a small one.
      // Room for at least what the last read brought, so request/response traffic takes one read
      // per message, not two around a slab's end.
      if (
        slab === null ||
        slab.length > QUIET_KEEP ||
        slab.length - this.slabFill < Math.max(QUIET_MIN, this.lastRead)
      ) {
        // Memory of its own: a slice of Node's shared pool would keep a whole 8 KiB pool alive.
        this.slab = slab = Buffer.allocUnsafeSlow(QUIET_SLAB);
        this.slabParse = this.slabFill = 0;
      }
      this.offered = slab.length - this.slabFill;
      return slab.subarray(this.slabFill);
    }
    // filled() has bounded h_len, so a frame in progress is at most maxLen + header bytes.
    // While growth is held, only room for a little more: the frame gets its memory once it may.
    const need =
      have < RDS_HEADER_SIZE
        ? RDS_HEADER_SIZE
        : this.holdGrowth
          ? have + QUIET_MIN
          : RDS_HEADER_SIZE + slab!.readUInt32BE(this.slabParse + OFF_LEN);
    if (
      slab === null ||
      slab.length - this.slabParse < need ||
      slab.length - this.slabFill < (quiet ? QUIET_MIN : MIN_READ)
    ) {
      // The first slab is one read's worth: a connection that only ever carries a few messages
      // holds no more than Node's own read buffer would; one that streams moves to full slabs.
      // A quiet one partway through a frame gets room for that frame and a little more (so a read
      // that ends with it comes short: still quiet), and so does one whose first
      // read after quiet took all its small slab offered (a frame straddling it, as in
      // request/response): a 64 KiB slab per message there would cost more than it saves. A
      // second full read in a row is a stream.
      const small = slab !== null && slab.length <= QUIET_SLAB;
      const size = this.holdGrowth
        ? need
        : quiet || (small && this.streak <= 1)
          ? Math.max(QUIET_SLAB, need + QUIET_MIN)
          : Math.max(slab === null || small ? READ_MAX : READ_SLAB_SIZE, need);
      // A small slab may be what a quiet connection keeps: memory of its own (see above).
      const next = size <= QUIET_KEEP ? Buffer.allocUnsafeSlow(size) : Buffer.allocUnsafe(size);
      if (have > 0) slab!.copy(next, 0, this.slabParse, this.slabFill);
      this.slab = slab = next;
      this.slabParse = 0;
      this.slabFill = have;
    }
    const end = Math.min(slab.length, this.slabFill + READ_MAX);
    this.offered = end - this.slabFill;
    return slab.subarray(this.slabFill, end);
  }

  /**
   * The connection is gone: its read memory is let go now, whatever still refers to the reader
   * (a closure of the closed carrier kept the slab of a stalled frame alive, issue #39).
   */
  discard(): void {
    this.failed = true;
    this.slab = null;
    this.payload = null;
    this.slabParse = this.slabFill = 0;
  }

  /** Bytes of read memory this reader keeps for the next read (0 before the first). */
  get slabBytes(): number {
    return this.slab === null ? 0 : this.slab.length;
  }

  /** `n` bytes were read into the last readBuffer(); throws RdsProtocolError on a violation. */
  filled(n: number): void {
    if (this.failed) throw new RdsProtocolError('stream already failed');
    const slab = this.slab!;
    this.lastRead = n;
    if (n < this.offered) {
      this.quiet = true;
      this.streak = 0;
    } else {
      this.quiet = false;
      this.streak++;
    }
    const end = (this.slabFill += n);
    let off = this.slabParse;
    while (end - off >= RDS_HEADER_SIZE) {
      const len = slab.readUInt32BE(off + OFF_LEN);
      if (len > this.maxLen) {
        this.failed = true;
        throw new RdsProtocolError(`h_len ${len} exceeds the ${this.maxLen}-byte maximum`);
      }
      const start = off + RDS_HEADER_SIZE;
      if (end - start < len) break;
      off = start + len;
      this.slabParse = off;
      this.frames++;
      this.onFrame(slab.subarray(start - RDS_HEADER_SIZE, start), slab.subarray(start, off));
    }
  }

  /** Feeds bytes; throws RdsProtocolError on a violation (and refuses further input). */
  push(chunk: Buffer): void {
    if (this.failed) throw new RdsProtocolError('stream already failed');
    let off = 0;
    while (off < chunk.length) {
      if (this.headerFill === 0 && this.payload === null && chunk.length - off >= RDS_HEADER_SIZE) {
        const len = chunk.readUInt32BE(off + OFF_LEN);
        if (len <= this.maxLen && chunk.length - off - RDS_HEADER_SIZE >= len) {
          const start = off + RDS_HEADER_SIZE;
          off = start + len;
          this.frames++;
          this.onFrame(chunk.subarray(start - RDS_HEADER_SIZE, start), chunk.subarray(start, off));
          continue;
        }
      }
      if (this.payload === null) {
        const n = Math.min(RDS_HEADER_SIZE - this.headerFill, chunk.length - off);
        chunk.copy(this.header, this.headerFill, off, off + n);
        this.headerFill += n;
        off += n;
        if (this.headerFill < RDS_HEADER_SIZE) return;
        const len = this.header.readUInt32BE(OFF_LEN);
        if (len > this.maxLen) {
          this.failed = true;
          throw new RdsProtocolError(`h_len ${len} exceeds the ${this.maxLen}-byte maximum`);
        }
        if (len === 0) {
          this.emit(Buffer.alloc(0));
          continue;
        }
        this.payload = Buffer.allocUnsafe(len);
        this.payloadFill = 0;
      }
      const need = this.payload.length - this.payloadFill;
      const n = Math.min(need, chunk.length - off);
      chunk.copy(this.payload, this.payloadFill, off, off + n);
      this.payloadFill += n;
      off += n;
      if (this.payloadFill === this.payload.length) {
        const p = this.payload;
        this.payload = null;
        this.emit(p);
      }
    }
  }

  private emit(payload: Buffer): void {
    const header = Buffer.from(this.header);
    this.headerFill = 0;
    this.frames++;
    this.onFrame(header, payload);
  }
}
