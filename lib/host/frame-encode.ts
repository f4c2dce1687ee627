// What the per-message frames (hot-frames.ts, msg-frames.ts) share: a frame header written
// straight into the writer's slab, a payload after it (inline under JOIN_BELOW, else as parts of
// its own), and the short latin1 address strings their metas carry.
import { put32 } from '../wire/header.js';
import { type FrameOut, HEADER_BYTES, JOIN_BELOW, ProtocolError } from './protocol.js';

/** Writes a frame header at the start of `n` reserved bytes of `w`; returns the offset after it. */
export function header(
  w: FrameOut,
  type: number,
  sock: number,
  id: number,
  metaLen: number,
  dataLen: number,
  inline: number,
): number {
  const o = w.reserve(HEADER_BYTES + metaLen + inline);
  const b = w.slab;
  // Byte arithmetic, not writeUInt32BE() (its range checks, four per frame, every message).
  put32(b, o, HEADER_BYTES - 4 + metaLen + dataLen);
  b[o + 4] = type;
  put32(b, o + 5, sock);
  put32(b, o + 9, id);
  put32(b, o + 13, metaLen);
  return o + HEADER_BYTES;
}

/**
 * Ends a frame whose meta ends at `o`: a payload under JOIN_BELOW is copied after it in the
 * slab; a larger one follows as parts of its own, copied first into one buffer when `copy`.
 */
export function finish(
  w: FrameOut,
  o: number,
  data: Uint8Array | readonly Uint8Array[],
  len: number,
  copy: boolean,
): void {
  if (len < JOIN_BELOW) {
    const b = w.slab;
    if (data instanceof Uint8Array) {
      b.set(data, o);
      o += data.length;
    } else {
      for (const p of data) {
        b.set(p, o);
        o += p.length;
      }
    }
    w.commit(o);
    return;
  }
  const parts = data instanceof Uint8Array ? [data] : data;
  if (copy) {
    const one = Buffer.allocUnsafe(len);
    let k = 0;
    for (const p of parts) {
      one.set(p, k);
      k += p.length;
    }
    w.commit(o, [one]);
    return;
  }
  const large: Buffer[] = [];
  for (const p of parts)
    if (p.length > 0) large.push(Buffer.isBuffer(p) ? p : Buffer.from(p.buffer, p.byteOffset, p.length));
  w.commit(o, large);
}

/** Keeps one frame as its own buffers: for callers that write frames themselves (tests, raw clients). */
class OneFrame implements FrameOut {
  slab: Buffer = Buffer.alloc(0);
  readonly parts: Buffer[] = [];
  reserve(n: number): number {
    this.slab = Buffer.allocUnsafe(n);
    return 0;
  }
  commit(end: number, large?: readonly Buffer[]): void {
    this.parts.push(this.slab.subarray(0, end));
    if (large !== undefined) this.parts.push(...large);
  }
}

/** The frame `write` encodes, as its own buffers. */
export function asParts(write: (f: FrameOut) => void): Buffer[] {
  const f = new OneFrame();
  write(f);
  return f.parts;
}

export function lengthOf(data: Uint8Array | readonly Uint8Array[]): number {
  if (data instanceof Uint8Array) return data.length;
  let n = 0;
  for (const p of data) n += p.length;
  return n;
}

/**
 * The last address read, kept as bytes and as its string: every message on a socket names the
 * same few peers, so a read that finds the same bytes again returns the string already made.
 */
const lastAddr = { bytes: Buffer.alloc(256), len: -1, str: '' };

/** Reads a u8-length-prefixed latin1 string at `off` (`end`: where the meta ends); `off + 1 + b[off]` follows it. */
export function readAddress(b: Buffer, off: number, end: number): string {
  if (off >= end) throw new ProtocolError('address missing');
  const n = b[off]!;
  const from = off + 1;
  if (from + n > end) throw new ProtocolError('address runs past its frame');
  const last = lastAddr;
  if (n === last.len) {
    let i = 0;
    while (i < n && b[from + i] === last.bytes[i]) i++;
    if (i === n) return last.str;
  }
  last.str = b.toString('latin1', from, from + n);
  b.copy(last.bytes, 0, from, from + n);
  last.len = n;
  return last.str;
}

export function writeShort(b: Buffer, off: number, s: string): number {
  const n = s.length;
  b[off] = n;
  // An address is a few characters: a loop costs less than a native write() call per message.
  for (let i = 0; i < n; i++) b[off + 1 + i] = s.charCodeAt(i);
  return off + 1 + n;
}

export function checkShort(s: string, what: string): void {
  if (s.length > 255) throw new ProtocolError(`${what} longer than 255 characters`);
}
