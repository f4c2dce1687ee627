import { decodeFrame, type Frame, HEADER_BYTES, MAX_FRAME_BYTES, ProtocolError } from './protocol.js';
import { get32 } from '../wire/header.js';

/** Reads of a busy control socket go one after another into slabs this large. */
export const SLAB_BYTES = 64 * 1024;
/** A slab with less room than this left is replaced rather than read into. */
const MIN_ROOM = 4 * 1024;
/**
 * A frame larger than this that a read leaves unfinished gets a buffer of exactly its size, and
 * the socket reads the rest of it straight into that buffer: one copy of what the read brought of
 * it (at most HEAD_READ bytes in a stream of such frames), not of the whole frame.
 */
export const OWN_ABOVE = 16 * 1024;
/**
 * The read after a frame that had a buffer of its own is offered this much: in a stream of large
 * frames the next one's header and meta arrive with little of its payload, which is all that is
 * copied before the rest is read into the frame's own buffer.
 */
const HEAD_READ = 1024;
/** An idle connection (its last read came short and ended between frames) reads into this much. */
const QUIET_SLAB = 2048;
/** A quiet slab with less room than this (or than the last read brought) left is replaced. */
const QUIET_MIN = 256;

/**
 * Reassembles control frames (protocol.ts) as a Unix socket reads them into memory this parser
 * hands out (net's `onread`), as the TCP carriers' FrameReader does for RDS frames: reads go one
 * after another into a slab, so frames split across reads are still contiguous and are handed up
 * as views, with no allocation per read; only the partial frame at a slab's end is copied to the
 * next. A large frame is read into a buffer of its own (see OWN_ABOVE): the host node keeps a
 * large SEND's bytes by reference until the peer acknowledges them (send-queue.ts `queueWire`
 * does so only for a buffer at most twice the frame), and the attached process keeps a MSG's
 * payload until it is read. FrameParser (push, for streams that allocate their own chunks)
 * copied every frame that spanned reads, a 64 KiB message about twice per hop.
 *
 * A frame's length is checked before memory is allocated for it (at most MAX_FRAME_BYTES, the one
 * largest message with its meta). Throws ProtocolError as FrameParser does; after one, the
 * connection is being dropped and further reads are discarded.
 */
export class SlabFrameParser {
  private slab: Buffer | null = null;
  /** The frame in progress starts at `at`; reads have filled the slab up to `fill`. */
  private at = 0;
  private fill = 0;
  /** A large frame in progress, read straight into a buffer of its own, filled up to ownFill. */
  private own: Buffer | null = null;
  private ownFill = 0;
  /** The last read finished a frame that had its own buffer (see HEAD_READ). */
  private afterOwn = false;
  /** The last read took less than it was offered and ended between frames. */
  private quiet = true;
  private offered = 0;
  private lastRead = 0;
  private failed = false;
  private static readonly SCRATCH = Buffer.allocUnsafeSlow(QUIET_SLAB);

  constructor(
    private readonly maxFrame = MAX_FRAME_BYTES,
    /**
     * Memory for a large frame (OWN_ABOVE): the host node takes it from its stack's WireSlab,
     * which takes it back once a SEND read into it has been acknowledged (no new 64 KiB buffer
     * per message for the collector: a third of the sending node's CPU went to that).
     */
    private readonly allocLarge: (n: number) => Buffer = Buffer.allocUnsafe,
  ) {}

  /** Where the next read should put its bytes (net's `onread.buffer`). */
  readBuffer(): Buffer {
    if (this.failed) return SlabFrameParser.SCRATCH;
    const own = this.own;
    if (own !== null) return own.subarray(this.ownFill);
    let slab = this.slab;
    const have = this.fill - this.at;
    if (have === 0 && this.quiet) {
      // Between frames on an idle connection: a small slab of its own, so an attached process
      // that is quiet keeps 2 KiB for its next read, not a 64 KiB one.
      if (slab === null || slab.length > QUIET_SLAB || slab.length - this.fill < Math.max(QUIET_MIN, this.lastRead)) {
        this.slab = slab = Buffer.allocUnsafeSlow(QUIET_SLAB);
        this.at = this.fill = 0;
      }
    } else if (slab === null || slab.length - this.fill < MIN_ROOM) {
      // A partial frame here is at most OWN_ABOVE bytes (a larger one has a buffer of its own).
      const next = Buffer.allocUnsafe(SLAB_BYTES);
      if (have > 0) slab!.copy(next, 0, this.at, this.fill);
      this.slab = slab = next;
      this.at = 0;
      this.fill = have;
    }
    const end = this.afterOwn ? Math.min(slab.length, this.fill + HEAD_READ) : slab.length;
    this.offered = end - this.fill;
    return slab.subarray(this.fill, end);
  }

  /** `n` bytes were read into the last readBuffer(): the frames now complete, in order. */
  filled(n: number): Frame[] {
    if (this.failed) return [];
    const out: Frame[] = [];
    const own = this.own;
    if (own !== null) {
      this.ownFill += n;
      if (this.ownFill < own.length) return out;
      // Reads into it were bounded by its end: nothing after it was read yet.
      this.own = null;
      this.afterOwn = true;
      this.quiet = false;
      out.push(this.decode(own, 0, own.length));
      return out;
    }
    const slab = this.slab!;
    this.afterOwn = false;
    this.lastRead = n;
    const short = n < this.offered;
    const end = (this.fill += n);
    let at = this.at;
    while (end - at >= 4) {
      const len = get32(slab, at);
      if (len < HEADER_BYTES - 4 || len + 4 > this.maxFrame) {
        this.failed = true;
        throw new ProtocolError(`frame length ${len} out of bounds`);
      }
      const next = at + 4 + len;
      if (next > end) {
        if (len + 4 > OWN_ABOVE) {
          const b = this.allocLarge(len + 4);
          slab.copy(b, 0, at, end);
          this.own = b;
          this.ownFill = end - at;
          at = end;
        }
        break;
      }
      out.push(this.decode(slab, at, next));
      at = next;
    }
    this.at = at;
    this.quiet = short && at === end && this.own === null;
    return out;
  }

  private decode(b: Buffer, start: number, end: number): Frame {
    try {
      return decodeFrame(b, start, end);
    } catch (e) {
      this.failed = true;
      throw e;
    }
  }

  /** Bytes of read memory held for the next read (the slab, or a large frame's own buffer). */
  get heldBytes(): number {
    return (this.slab?.length ?? 0) + (this.own?.length ?? 0);
  }
}

/**
 * The host node's parser for a client's control socket: large frames (a SEND of more than
 * OWN_ABOVE) are read into memory from `alloc`, the stack's WireSlab, which takes a SEND's memory
 * back once the peer has acknowledged the message (send-queue.ts queueWire).
 */
export function nodeFrameParser(alloc: (n: number) => Buffer): SlabFrameParser {
  return new SlabFrameParser(MAX_FRAME_BYTES, alloc);
}

/**
 * Hands `chunk` (bytes a stream allocated) to `parser` as if it had been read into the parser's
 * memory, calling `read(buf, n)` after each piece as a socket's `onread` callback would be: for
 * a socket that cannot read into memory of ours (see adoptWithOnread), and for tests.
 */
export function feedChunk(parser: SlabFrameParser, chunk: Buffer, read: (buf: Buffer, n: number) => void): void {
  for (let off = 0; off < chunk.length; ) {
    const b = parser.readBuffer();
    const n = Math.min(b.length, chunk.length - off);
    chunk.copy(b, 0, off, off + n);
    off += n;
    read(b, n);
  }
}
