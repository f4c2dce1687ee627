import { ProtocolError } from './protocol-error.js';
import { RDS_MAX_MSG_SIZE } from '../constants.js';

/**
 * The control protocol between a host node and the processes attached to it, over a Unix stream
 * socket. Every frame is length-prefixed and binary:
 *
 *   u32 length (of what follows) | u8 type | u32 sock | u32 id | u32 metaLength | meta | data
 *
 * `meta` is a small UTF-8 JSON object (call arguments, errors), except in the per-message frames
 * (SEND, CREDIT, MSG, SENT), whose meta is a fixed binary layout (hot-frames.ts); `data` is a
 * message payload, carried as raw bytes. The first frame of an idle connection is written at once;
 * the rest of that event-loop turn's frames follow in one write (FrameWriter). A frame that breaks
 * any rule here is a protocol error: the node drops that client (and counts it), the client
 * treats its node as gone.
 */
export const PROTOCOL_VERSION = 3;

/** Client to node. */
export const C_HELLO = 1;
export const C_OPEN = 2;
export const C_REQ = 3;
export const C_SEND = 4;
export const C_CREDIT = 5;
export const C_ABORT = 6;
/** Node to client. */
export const N_WELCOME = 16;
export const N_RESP = 17;
export const N_MSG = 18;
export const N_EVENT = 19;
export const N_SENT = 20;

export const HEADER_BYTES = 4 + 1 + 4 + 4 + 4;
/** The largest meta object either side accepts. */
export const MAX_META_BYTES = 16 * 1024;
/** The largest frame: one RDS message of the largest size, plus its meta. */
export const MAX_FRAME_BYTES = HEADER_BYTES + MAX_META_BYTES + RDS_MAX_MSG_SIZE;

/**
 * One frame as read: fields decoded, the meta left where it arrived (`raw` from `metaStart` to
 * `metaEnd`): a binary meta is read in place by hot-frames.ts, with no buffer of its own.
 */
export class Frame {
  constructor(
    readonly type: number,
    readonly sock: number,
    readonly id: number,
    /** The JSON meta; empty for the binary-meta types. */
    readonly meta: Record<string, unknown>,
    readonly raw: Buffer,
    readonly metaStart: number,
    readonly metaEnd: number,
    readonly data: Buffer,
  ) {}

  /** The raw meta bytes of a binary-meta type (BINARY_META), decoded by hot-frames.ts; empty otherwise. */
  get bin(): Buffer {
    return this.raw.subarray(this.metaStart, this.metaEnd);
  }
}

/** Frame types whose meta is binary (hot-frames.ts), not JSON. */
const BINARY_META = new Set([C_SEND, C_CREDIT, N_MSG, N_SENT]);
const NO_META: Record<string, unknown> = Object.freeze({}) as Record<string, unknown>;

export { ProtocolError };

const EMPTY = Buffer.alloc(0);
const EMPTY_META = Buffer.from('{}');

/** One frame as the list of buffers to write (the payload is not copied here). */
export function encodeFrame(
  type: number,
  sock: number,
  id: number,
  meta: object | null,
  data?: Uint8Array | readonly Uint8Array[],
): Buffer[] {
  const m = meta === null ? EMPTY_META : Buffer.from(JSON.stringify(meta));
  let dlen = 0;
  const parts: Uint8Array[] = data === undefined ? [] : data instanceof Uint8Array ? [data] : (data as Uint8Array[]);
  for (const p of parts) dlen += p.length;
  const h = Buffer.allocUnsafe(HEADER_BYTES);
  h.writeUInt32BE(HEADER_BYTES - 4 + m.length + dlen, 0);
  h.writeUInt8(type, 4);
  h.writeUInt32BE(sock >>> 0, 5);
  h.writeUInt32BE(id >>> 0, 9);
  h.writeUInt32BE(m.length, 13);
  const out: Buffer[] = [h, m];
  for (const p of parts) out.push(Buffer.isBuffer(p) ? p : Buffer.from(p.buffer, p.byteOffset, p.length));
  return out;
}

/**
 * Reassembles frames from a byte stream. Throws ProtocolError on a length out of bounds, a meta
 * that is not a JSON object, or more than `maxBuffered` bytes of an unfinished frame.
 */
export class FrameParser {
  private chunks: Buffer[] = [];
  /** Where the unread bytes of chunks[0] start. */
  private head = 0;
  private buffered = 0;
  private need = -1;
  /** Where the frame take() returned starts in the buffer it returned. */
  private at = 0;

  constructor(private readonly maxFrame = MAX_FRAME_BYTES) {}

  /** Feeds bytes; returns the frames now complete. */
  push(chunk: Buffer): Frame[] {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const out: Frame[] = [];
    for (;;) {
      if (this.need < 0) {
        if (this.buffered < 4) break;
        const len = this.peekLength();
        if (len < HEADER_BYTES - 4 || len + 4 > this.maxFrame)
          throw new ProtocolError(`frame length ${len} out of bounds`);
        this.need = len + 4;
      }
      if (this.buffered < this.need) break;
      const n = this.need;
      const buf = this.take(n);
      this.need = -1;
      out.push(decodeFrame(buf, this.at, this.at + n));
    }
    return out;
  }

  private peekLength(): number {
    const c = this.chunks[0]!;
    if (c.length - this.head >= 4) return c.readUInt32BE(this.head);
    let v = 0;
    let k = 0;
    let i = this.head;
    for (let got = 0; got < 4; got++) {
      while (i >= this.chunks[k]!.length) {
        k++;
        i = 0;
      }
      v = v * 256 + this.chunks[k]![i++]!;
    }
    return v;
  }

  /**
   * The buffer holding the next `n` bytes, from `this.at`. A frame inside one chunk is read where
   * it lies; a frame spanning chunks is copied once into a buffer of exactly its size, and the
   * rest of its last chunk stays where it is: joining whole chunks instead would copy that rest
   * again with the next frame (with 64 KiB socket reads and 64 KiB messages, every byte twice).
   */
  private take(n: number): Buffer {
    this.buffered -= n;
    const first = this.chunks[0]!;
    if (first.length - this.head >= n) {
      this.at = this.head;
      this.head += n;
      if (this.head === first.length) {
        this.chunks.shift();
        this.head = 0;
      }
      return first;
    }
    const b = Buffer.allocUnsafe(n);
    let off = 0;
    while (off < n) {
      const c = this.chunks[0]!;
      const want = n - off;
      const have = c.length - this.head;
      if (have <= want) {
        c.copy(b, off, this.head);
        off += have;
        this.chunks.shift();
        this.head = 0;
      } else {
        c.copy(b, off, this.head, this.head + want);
        off = n;
        this.head += want;
      }
    }
    this.at = 0;
    return b;
  }
}

function decodeFrame(b: Buffer, start: number, end: number): Frame {
  const type = b[start + 4]!;
  const sock = b.readUInt32BE(start + 5);
  const id = b.readUInt32BE(start + 9);
  const mlen = b.readUInt32BE(start + 13);
  const metaStart = start + HEADER_BYTES;
  if (mlen > MAX_META_BYTES || HEADER_BYTES + mlen > end - start)
    throw new ProtocolError(`meta length ${mlen} out of bounds`);
  const metaEnd = metaStart + mlen;
  const data = end > metaEnd ? b.subarray(metaEnd, end) : EMPTY;
  if (BINARY_META.has(type)) return new Frame(type, sock, id, NO_META, b, metaStart, metaEnd, data);
  let meta: unknown;
  try {
    meta = mlen === 0 ? {} : JSON.parse(b.toString('utf8', metaStart, metaEnd));
  } catch {
    throw new ProtocolError('meta is not JSON');
  }
  if (meta === null || typeof meta !== 'object' || Array.isArray(meta))
    throw new ProtocolError('meta is not a JSON object');
  return new Frame(type, sock, id, meta as Record<string, unknown>, b, metaStart, metaEnd, data);
}

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

/** An error as carried in meta. */
export interface WireError {
  code: string;
  message: string;
}

export function str(v: unknown, what: string): string {
  if (typeof v !== 'string' || v.length > 256) throw new ProtocolError(`${what} must be a short string`);
  return v;
}

export function num(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new ProtocolError(`${what} must be a number`);
  return v;
}
