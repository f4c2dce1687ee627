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

export interface Frame {
  type: number;
  sock: number;
  id: number;
  /** The JSON meta; empty for the binary-meta types. */
  meta: Record<string, unknown>;
  /** The raw meta bytes of a binary-meta type (BINARY_META), decoded by hot-frames.ts; empty otherwise. */
  bin: Buffer;
  data: Buffer;
}

/** Frame types whose meta is binary (hot-frames.ts), not JSON. */
const BINARY_META = new Set([C_SEND, C_CREDIT, N_MSG, N_SENT]);
const NO_META: Record<string, unknown> = Object.freeze({}) as Record<string, unknown>;

export class ProtocolError extends Error {}

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
  private buffered = 0;
  private need = -1;

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
      const buf = this.take(this.need);
      this.need = -1;
      out.push(decodeFrame(buf));
    }
    return out;
  }

  private peekLength(): number {
    const c = this.chunks[0]!;
    if (c.length >= 4) return c.readUInt32BE(0);
    let v = 0;
    let k = 0;
    let i = 0;
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
   * The next `n` bytes. A frame inside one chunk is a view of it; a frame spanning chunks is
   * copied once into a buffer of exactly its size, and the rest of its last chunk stays a view:
   * joining whole chunks instead would copy that rest again with the next frame (with 64 KiB
   * socket reads and 64 KiB messages, every byte twice).
   */
  private take(n: number): Buffer {
    this.buffered -= n;
    const first = this.chunks[0]!;
    if (first.length >= n) {
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const b = Buffer.allocUnsafe(n);
    let off = 0;
    while (off < n) {
      const c = this.chunks[0]!;
      const want = n - off;
      if (c.length <= want) {
        c.copy(b, off);
        off += c.length;
        this.chunks.shift();
      } else {
        c.copy(b, off, 0, want);
        off = n;
        this.chunks[0] = c.subarray(want);
      }
    }
    return b;
  }
}

function decodeFrame(b: Buffer): Frame {
  const type = b.readUInt8(4);
  const sock = b.readUInt32BE(5);
  const id = b.readUInt32BE(9);
  const mlen = b.readUInt32BE(13);
  if (mlen > MAX_META_BYTES || HEADER_BYTES + mlen > b.length)
    throw new ProtocolError(`meta length ${mlen} out of bounds`);
  const data = b.length > HEADER_BYTES + mlen ? b.subarray(HEADER_BYTES + mlen) : EMPTY;
  if (BINARY_META.has(type))
    return { type, sock, id, meta: NO_META, bin: b.subarray(HEADER_BYTES, HEADER_BYTES + mlen), data };
  let meta: unknown;
  try {
    meta = mlen === 0 ? {} : JSON.parse(b.toString('utf8', HEADER_BYTES, HEADER_BYTES + mlen));
  } catch {
    throw new ProtocolError('meta is not JSON');
  }
  if (meta === null || typeof meta !== 'object' || Array.isArray(meta))
    throw new ProtocolError('meta is not a JSON object');
  return { type, sock, id, meta: meta as Record<string, unknown>, bin: EMPTY, data };
}

/** Bytes a turn collects before they are written without waiting for the turn's end. */
const FLUSH_BYTES = 256 << 10;
/** A connection whose last turn wrote more frames than this is carrying a stream: it batches. */
const EAGER_MAX_FRAMES = 2;

/**
 * Collects frames and writes them in one batch per event-loop turn, except on a connection that
 * carries single frames: when the last turn wrote at most EAGER_MAX_FRAMES frames and nothing is
 * queued (`idle()`), the first frame of this turn goes out at once, with whatever beforeFlush()
 * summaries are due. A lone request or reply (a round trip) then does not wait for the end of the
 * turn, while a stream of messages still leaves in one write per turn, with one wakeup of the
 * reader per turn rather than two.
 */
export class FrameWriter {
  private parts: Buffer[] = [];
  private bytes = 0;
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

  constructor(
    private readonly sink: (parts: Buffer[]) => void,
    private readonly idle: () => boolean = () => false,
  ) {}

  private readonly tick = (): void => {
    this.scheduled = false;
    this.eagerUsed = false;
    this.flush();
    if (this.turnFrames > 0) this.lastTurnFrames = this.turnFrames;
    this.turnFrames = 0;
  };

  get pendingBytes(): number {
    return this.bytes;
  }

  write(frame: Buffer[]): void {
    for (const p of frame) {
      this.parts.push(p);
      this.bytes += p.length;
    }
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
    if (this.parts.length === 0) return;
    if (this.piggyback !== null) {
      this.flushing = true;
      try {
        this.piggyback();
      } finally {
        this.flushing = false;
      }
    }
    const parts = this.parts;
    this.parts = [];
    this.bytes = 0;
    this.sink(parts);
  }
}

/** Parts at least this long are written as they are; shorter ones are joined. */
const JOIN_BELOW = 16 << 10;

/**
 * Writes one turn's frames. Small parts (headers, metas, small payloads) are joined into one
 * buffer: one copy is cheaper than a writev of thousands of tiny buffers; large payloads are
 * written as they are, between the joined runs, in one corked writev (copying them would cost a
 * second pass over every byte).
 */
export function writeBatch(conn: { write(b: Buffer): boolean; cork(): void; uncork(): void }, parts: Buffer[]): void {
  if (parts.length === 1) {
    conn.write(parts[0]!);
    return;
  }
  let total = 0;
  let large = false;
  for (const p of parts) {
    total += p.length;
    if (p.length >= JOIN_BELOW) large = true;
  }
  if (!large) {
    conn.write(Buffer.concat(parts, total));
    return;
  }
  conn.cork();
  let run: Buffer[] = [];
  let runBytes = 0;
  const writeRun = (): void => {
    if (run.length === 0) return;
    conn.write(run.length === 1 ? run[0]! : Buffer.concat(run, runBytes));
    run = [];
    runBytes = 0;
  };
  for (const p of parts) {
    if (p.length >= JOIN_BELOW) {
      writeRun();
      conn.write(p);
    } else {
      run.push(p);
      runBytes += p.length;
    }
  }
  writeRun();
  conn.uncork();
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
