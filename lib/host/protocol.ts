import { ProtocolError } from './protocol-error.js';
import { RDS_MAX_MSG_SIZE } from '../constants.js';
import { get32 } from '../wire/header.js';

/**
 * The control protocol between a host node and the processes attached to it, over a Unix stream
 * socket. Every frame is length-prefixed and binary:
 *
 *   u32 length (of what follows) | u8 type | u32 sock | u32 id | u32 metaLength | meta | data
 *
 * `meta` is a small UTF-8 JSON object (call arguments, errors), except in the per-message frames
 * (SEND, CREDIT, MSG, SENT), whose meta is a fixed binary layout (hot-frames.ts, msg-frames.ts); `data` is a
 * message payload, carried as raw bytes. The first frame of an idle connection is written at once;
 * the rest of that event-loop turn's frames follow in one write (FrameWriter, frame-writer.ts). A frame that breaks
 * any rule here is a protocol error: the node drops that client (and counts it), the client
 * treats its node as gone.
 */
export const PROTOCOL_VERSION = 5;
/**
 * The oldest client version a node serves. 4 added SEND's F_WIRE (the client encodes the RDS data
 * header, hot-frames.ts); a version 3 client never sets it and is served as before. A client
 * writes F_WIRE only to a node whose welcome says 4 or later. 5 added MSG's M_WIRE (the node
 * forwards a received message's RDS header and payload, msg-frames.ts, node-deliver.ts): the node
 * writes it only to a client whose hello says 5 or later, older ones get MSG as before.
 */
export const MIN_CLIENT_VERSION = 3;

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
  #data: Buffer | null = null;

  constructor(
    readonly type: number,
    readonly sock: number,
    readonly id: number,
    /** The JSON meta; empty for the binary-meta types. */
    readonly meta: Record<string, unknown>,
    readonly raw: Buffer,
    readonly metaStart: number,
    readonly metaEnd: number,
    /** Where the frame ends in `raw`: its data is `raw` from metaEnd to here. */
    readonly end: number,
  ) {}

  /**
   * The frame's data, a view of `raw`, made when first asked for: a reader that takes the data
   * apart in place (a MSG with its RDS header, readMsgFrame) makes one view, not two.
   */
  get data(): Buffer {
    if (this.#data === null) this.#data = this.end > this.metaEnd ? this.raw.subarray(this.metaEnd, this.end) : EMPTY;
    return this.#data;
  }

  /** The raw meta bytes of a binary-meta type (BINARY_META), decoded by hot-frames.ts; empty otherwise. */
  get bin(): Buffer {
    return this.raw.subarray(this.metaStart, this.metaEnd);
  }
}

/** Frame types whose meta is binary (hot-frames.ts), not JSON: 1 at their type (a table, not a Set: read per frame). */
const BINARY_META = new Uint8Array(256);
for (const t of [C_SEND, C_CREDIT, N_MSG, N_SENT]) BINARY_META[t] = 1;

const NO_META: Record<string, unknown> = Object.freeze({}) as Record<string, unknown>;

export { ProtocolError };
// The writing side lives in frame-writer.ts; importers of the protocol find it here too.
export { FrameWriter, type FrameOut, JOIN_BELOW, writeBatch } from './frame-writer.js';

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
 *
 * The reference parser: chunks pushed in, frames out, nothing else. The control sockets of the
 * node and of attached processes read through SlabFrameParser (frame-slab.ts), which must accept
 * and refuse exactly what this one does; tests, the fuzz corpus check and hostile-client fixtures
 * use this one because it needs no socket.
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

/** The frame in `b` from `start` to `end` (its length field included); throws ProtocolError. */
export function decodeFrame(b: Buffer, start: number, end: number): Frame {
  if (end - start < HEADER_BYTES || end > b.length) throw new ProtocolError('frame shorter than its header');
  const type = b[start + 4]!;
  const sock = get32(b, start + 5);
  const id = get32(b, start + 9);
  const mlen = get32(b, start + 13);
  const metaStart = start + HEADER_BYTES;
  if (mlen > MAX_META_BYTES || HEADER_BYTES + mlen > end - start)
    throw new ProtocolError(`meta length ${mlen} out of bounds`);
  const metaEnd = metaStart + mlen;
  if (BINARY_META[type] === 1) return new Frame(type, sock, id, NO_META, b, metaStart, metaEnd, end);
  let meta: unknown;
  try {
    meta = mlen === 0 ? {} : JSON.parse(b.toString('utf8', metaStart, metaEnd));
  } catch {
    throw new ProtocolError('meta is not JSON');
  }
  if (meta === null || typeof meta !== 'object' || Array.isArray(meta))
    throw new ProtocolError('meta is not a JSON object');
  return new Frame(type, sock, id, meta as Record<string, unknown>, b, metaStart, metaEnd, end);
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
