import { RDS_FLAG_CONG_BITMAP, RDS_HEADER_SIZE } from '../constants.js';

/** The 48-byte RDS header (spec §1.1). All multi-byte fields are big-endian. */
export interface RdsHeader {
  sequence: number;
  ack: number;
  len: number;
  sport: number;
  dport: number;
  flags: number;
  credit: number;
  csum: number;
  /** The raw 16-byte extension area; parse with parseExtensions(). */
  exthdr: Uint8Array;
}

/** Offset of h_sequence (be64) in the RDS header. */
export const OFF_SEQUENCE = 0;
/** Offset of h_ack (be64) in the RDS header. */
export const OFF_ACK = 8;
/** Offset of h_len (be32, the payload length) in the RDS header. */
export const OFF_LEN = 16;
/** Offset of h_sport (be16) in the RDS header. */
export const OFF_SPORT = 20;
/** Offset of h_dport (be16) in the RDS header. */
export const OFF_DPORT = 22;
/** Offset of h_flags (u8) in the RDS header. */
export const OFF_FLAGS = 24;
/** Offset of h_credit (u8, RDS/IB credits) in the RDS header. */
export const OFF_CREDIT = 25;
/** Offset of h_csum (be16) in the RDS header. */
export const OFF_CSUM = 30;
/** Offset of the 16-byte extension area in the RDS header. */
export const OFF_EXTHDR = 32;
/** Size of the extension area of the RDS header. */
export const EXTHDR_SIZE = 16;

const TWO_32 = 0x1_0000_0000;

// Sequence numbers are be64 on the wire; JS numbers hold them exactly up to 2^53, which a
// path counting from 1 never reaches. Larger values from a hostile peer lose low bits only.
// Byte arithmetic instead of a DataView or Buffer's readUInt32BE() (its range checks): these run
// for every frame sent and received, here and in the host node's attach frames.
/** `v` as a big-endian u32 at `off` of `buf` (taken modulo 2^32); returns the offset after it. */
export function put32(buf: Uint8Array, off: number, v: number): number {
  buf[off] = v >>> 24;
  buf[off + 1] = v >>> 16;
  buf[off + 2] = v >>> 8;
  buf[off + 3] = v;
  return off + 4;
}

/** `v` (0 to 65535) as a big-endian u16 at `off` of `buf`; returns the offset after it. */
export function put16(buf: Uint8Array, off: number, v: number): number {
  buf[off] = v >>> 8;
  buf[off + 1] = v;
  return off + 2;
}

/** The big-endian u32 at `off` of `buf`, which the caller knows holds 4 bytes there. */
export function get32(buf: Uint8Array, off: number): number {
  return ((buf[off]! << 24) >>> 0) + (buf[off + 1]! << 16) + (buf[off + 2]! << 8) + buf[off + 3]!;
}

/** Writes a be64 from a JavaScript number (exact up to 2^53). */
export function writeU64(buf: Uint8Array, off: number, value: number): void {
  put32(buf, off, Math.floor(value / TWO_32) >>> 0);
  put32(buf, off + 4, value >>> 0);
}

/** Reads a be64 as a JavaScript number (exact up to 2^53). */
export function readU64(buf: Uint8Array, off: number): number {
  return get32(buf, off) * TWO_32 + get32(buf, off + 4);
}

/**
 * Writes a data message's header at off: h_ack, flags, credit, checksum and the extension area
 * zero (the sender fills h_ack and flags as it transmits). Positional, for the send path.
 */
export function encodeDataHeader(
  buf: Uint8Array,
  off: number,
  seq: number,
  len: number,
  sport: number,
  dport: number,
): void {
  writeU64(buf, off + OFF_SEQUENCE, seq);
  put32(buf, off + OFF_ACK, 0);
  put32(buf, off + OFF_ACK + 4, 0);
  put32(buf, off + OFF_LEN, len >>> 0);
  buf[off + OFF_SPORT] = sport >>> 8;
  buf[off + OFF_SPORT + 1] = sport & 0xff;
  buf[off + OFF_DPORT] = dport >>> 8;
  buf[off + OFF_DPORT + 1] = dport & 0xff;
  // Flags through the extension area: 24 zero bytes, as stores (cheaper than fill() this small).
  for (let i = off + OFF_FLAGS; i < off + RDS_HEADER_SIZE; i += 4) put32(buf, i, 0);
}

/** Writes a header into buf at off (48 bytes). The extension area is copied or zero-filled. */
export function encodeHeader(buf: Uint8Array, off: number, h: Partial<RdsHeader>): void {
  encodeDataHeader(buf, off, h.sequence ?? 0, h.len ?? 0, h.sport ?? 0, h.dport ?? 0);
  writeU64(buf, off + OFF_ACK, h.ack ?? 0);
  buf[off + OFF_FLAGS] = h.flags ?? 0;
  buf[off + OFF_CREDIT] = h.credit ?? 0;
  const csum = h.csum ?? 0;
  buf[off + OFF_CSUM] = csum >>> 8;
  buf[off + OFF_CSUM + 1] = csum & 0xff;
  if (h.exthdr) buf.set(h.exthdr.subarray(0, EXTHDR_SIZE), off + OFF_EXTHDR);
}

/** Decodes the 48-byte RDS header at `off`. */
export function decodeHeader(buf: Uint8Array, off = 0): RdsHeader {
  const dv = new DataView(buf.buffer, buf.byteOffset + off, RDS_HEADER_SIZE);
  return {
    sequence: readU64(buf, off + OFF_SEQUENCE),
    ack: readU64(buf, off + OFF_ACK),
    len: dv.getUint32(OFF_LEN),
    sport: dv.getUint16(OFF_SPORT),
    dport: dv.getUint16(OFF_DPORT),
    flags: dv.getUint8(OFF_FLAGS),
    credit: dv.getUint8(OFF_CREDIT),
    csum: dv.getUint16(OFF_CSUM),
    exthdr: buf.slice(off + OFF_EXTHDR, off + RDS_HEADER_SIZE),
  };
}

/**
 * RFC 1071 one's-complement sum over the 48-byte header with h_csum taken as zero; the result
 * is what goes into h_csum (stored big-endian). Used by the IB transport; TCP sends 0.
 */
export function headerChecksum(buf: Uint8Array, off = 0): number {
  let sum = 0;
  for (let i = 0; i < RDS_HEADER_SIZE; i += 2) {
    if (i === OFF_CSUM) continue;
    sum += (buf[off + i]! << 8) | buf[off + i + 1]!;
  }
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

/** True when h_csum is 0 ("not present") or matches the header. */
export function verifyHeaderChecksum(buf: Uint8Array, off = 0): boolean {
  const stored = (buf[off + OFF_CSUM]! << 8) | buf[off + OFF_CSUM + 1]!;
  return stored === 0 || stored === headerChecksum(buf, off);
}

/** A congestion map update as every transport sends it: seq 0, ports 0, h_flags exactly 0x01, the map (spec §5.3). */
export function encodeCongUpdate(map: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(RDS_HEADER_SIZE + map.length);
  encodeHeader(frame, 0, { len: map.length, flags: RDS_FLAG_CONG_BITMAP });
  frame.set(map, RDS_HEADER_SIZE);
  return frame;
}
