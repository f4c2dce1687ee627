// The per-message frames of the control protocol (SEND, CREDIT, MSG, SENT) with a fixed binary
// meta instead of JSON: they are the data path, written and read once per message, where
// JSON.stringify / JSON.parse and a separately allocated header cost more than the rest of the
// hop. Each is encoded straight into the writer's slab (FrameWriter): header, meta and a payload
// under JOIN_BELOW bytes in one place, with nothing allocated per frame; a larger payload follows
// as a part of its own, written as it is.
import {
  type C_CREDIT,
  C_SEND,
  type FrameOut,
  HEADER_BYTES,
  JOIN_BELOW,
  N_MSG,
  type N_SENT,
  ProtocolError,
} from './protocol.js';
import type { RdsMessage } from '../core/types.js';
import { RDS_HEADER_SIZE } from '../constants.js';
import { encodeDataHeader } from '../wire/header.js';

const NO_DATA = Buffer.alloc(0);

const F_CONFIRM = 1;
const F_COOKIE = 2;
/**
 * Protocol 4: the data is the message in the RDS wire format, the 48-byte data header (ports and
 * length set, every other field zero) followed by the payload; the node stamps the sequence and
 * queues those bytes (send-wire.ts checks them).
 */
const F_WIRE = 4;
/**
 * A client writes F_WIRE for frames (header and payload) larger than this: the node's wire slab's
 * small-frame size, past which the node keeps the client's bytes by reference. Smaller ones it
 * copies into its slab either way (PathSend.queueWire), so they go without the header.
 */
export const WIRE_SEND_ABOVE = 16 * 1024;
const M_TS = 1;
const M_ZC = 2;
const M_CU = 4;
/** MSG carries the node's receive-path stamps 0-2 (SO_RDS_MSG_RXPATH_LATENCY): 3 x u64 ns. */
const M_RT = 8;

/** The most zero-copy completions one MSG carries (the core reports them in batches far smaller). */
const MAX_ZC = 4096;

/** Writes a frame header at the start of `n` reserved bytes of `w`; returns the offset after it. */
function header(
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
  b.writeUInt32BE(HEADER_BYTES - 4 + metaLen + dataLen, o);
  b[o + 4] = type;
  b.writeUInt32BE(sock >>> 0, o + 5);
  b.writeUInt32BE(id >>> 0, o + 9);
  b.writeUInt32BE(metaLen, o + 13);
  return o + HEADER_BYTES;
}

/**
 * Ends a frame whose meta ends at `o`: a payload under JOIN_BELOW is copied after it in the
 * slab; a larger one follows as parts of its own, copied first into one buffer when `copy`.
 */
function finish(w: FrameOut, o: number, data: Uint8Array | readonly Uint8Array[], len: number, copy: boolean): void {
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
function asParts(write: (f: FrameOut) => void): Buffer[] {
  const f = new OneFrame();
  write(f);
  return f.parts;
}

function lengthOf(data: Uint8Array | readonly Uint8Array[]): number {
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
function readAddress(b: Buffer, off: number, end: number): string {
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

function writeShort(b: Buffer, off: number, s: string): number {
  b[off] = s.length;
  b.write(s, off + 1, 'latin1');
  return off + 1 + s.length;
}

function checkShort(s: string, what: string): void {
  if (s.length > 255) throw new ProtocolError(`${what} longer than 255 characters`);
}

export interface SendMeta {
  address: string;
  port: number;
  flags: number;
  confirm: boolean;
  cookie: number | undefined;
  /** True: the data is an RDS data header and the payload (F_WIRE), not the payload alone; absent otherwise. */
  wire?: true;
}

/**
 * SEND: u8 alen, address, u16 port, u32 flags, u8 bits (confirm, cookie), [u32 cookie]. `copy`:
 * a large payload is copied (sendmsg copies); without it, it is written from the caller's buffers
 * (zero-copy: the caller leaves them alone until the completion).
 */
export function writeSend(
  w: FrameOut,
  sock: number,
  id: number,
  address: string,
  port: number,
  flags: number,
  confirm: boolean,
  cookie: number | undefined,
  data: Uint8Array | readonly Uint8Array[],
  copy: boolean,
): void {
  const len = lengthOf(data);
  const o = sendMeta(w, sock, id, address, port, flags, confirm, cookie, false, len, len < JOIN_BELOW ? len : 0);
  finish(w, o, data, len, copy);
}

/**
 * SEND with F_WIRE (protocol 4): the meta as writeSend's, then the message as the node will put
 * it on the wire, a 48-byte RDS data header from `sport` to `port` (sequence, ack, flags,
 * checksum and extensions zero: the node's to set) and the payload after it, written as
 * writeSend writes a payload (`copy` likewise).
 */
export function writeSendWire(
  w: FrameOut,
  sock: number,
  id: number,
  address: string,
  port: number,
  sport: number,
  flags: number,
  confirm: boolean,
  cookie: number | undefined,
  data: Uint8Array | readonly Uint8Array[],
  copy: boolean,
): void {
  const len = lengthOf(data);
  const inline = RDS_HEADER_SIZE + (len < JOIN_BELOW ? len : 0);
  let o = sendMeta(w, sock, id, address, port, flags, confirm, cookie, true, RDS_HEADER_SIZE + len, inline);
  encodeDataHeader(w.slab, o, 0, len, sport, port);
  o += RDS_HEADER_SIZE;
  finish(w, o, data, len, copy);
}

/** The header and meta of a SEND frame carrying `dataLen` bytes, `inline` of them in the slab; returns where the data starts. */
function sendMeta(
  w: FrameOut,
  sock: number,
  id: number,
  address: string,
  port: number,
  flags: number,
  confirm: boolean,
  cookie: number | undefined,
  wire: boolean,
  dataLen: number,
  inline: number,
): number {
  checkShort(address, 'address');
  const mlen = 1 + address.length + 2 + 4 + 1 + (cookie !== undefined ? 4 : 0);
  let o = header(w, C_SEND, sock, id, mlen, dataLen, inline);
  const h = w.slab;
  o = writeShort(h, o, address);
  o = h.writeUInt16BE(port, o);
  o = h.writeUInt32BE(flags >>> 0, o);
  h[o++] = (confirm ? F_CONFIRM : 0) | (cookie !== undefined ? F_COOKIE : 0) | (wire ? F_WIRE : 0);
  if (cookie !== undefined) o = h.writeUInt32BE(cookie >>> 0, o);
  return o;
}

/** A SEND frame as its buffers (the payload not copied). */
export function encodeSend(
  sock: number,
  id: number,
  address: string,
  port: number,
  flags: number,
  confirm: boolean,
  cookie: number | undefined,
  data: Uint8Array | readonly Uint8Array[],
): Buffer[] {
  return asParts((f) => writeSend(f, sock, id, address, port, flags, confirm, cookie, data, false));
}

/** A SEND frame with F_WIRE as its buffers (the payload not copied). */
export function encodeSendWire(
  sock: number,
  id: number,
  address: string,
  port: number,
  sport: number,
  flags: number,
  confirm: boolean,
  cookie: number | undefined,
  data: Uint8Array | readonly Uint8Array[],
): Buffer[] {
  return asParts((f) => writeSendWire(f, sock, id, address, port, sport, flags, confirm, cookie, data, false));
}

/** The meta of a SEND frame: `b` from `off` to `end` (a whole buffer by default). */
export function decodeSend(b: Buffer, off = 0, end = b.length): SendMeta {
  const address = readAddress(b, off, end);
  const o = off + 1 + address.length;
  if (o + 7 > end) throw new ProtocolError('SEND meta too short');
  const port = b.readUInt16BE(o);
  const flags = b.readUInt32BE(o + 2);
  const bits = b[o + 6]!;
  let cookie: number | undefined;
  if ((bits & F_COOKIE) !== 0) {
    if (o + 11 > end) throw new ProtocolError('SEND meta too short for its cookie');
    cookie = b.readUInt32BE(o + 7);
  }
  return {
    address,
    port,
    flags,
    confirm: (bits & F_CONFIRM) !== 0,
    cookie,
    wire: (bits & F_WIRE) !== 0 ? true : undefined,
  };
}

export interface MsgMeta {
  address: string;
  port: number;
  timestamp: number | undefined;
  zcopyCompletions: number[] | undefined;
  congestionUpdate: bigint | undefined;
}

/**
 * MSG: u8 alen, address, u16 port, u8 bits, [f64 timestamp], [u16 n, n x u32 cookies], [u64
 * congestion bits], [3 x u64 receive-path stamps]. A reader ignores bits it does not know (each
 * field follows the ones before it).
 */
export function writeMsg(
  w: FrameOut,
  sock: number,
  address: string,
  port: number,
  timestamp: number | undefined,
  zc: readonly number[] | undefined,
  cu: bigint | undefined,
  data: Uint8Array,
  rt?: readonly bigint[],
): void {
  checkShort(address, 'address');
  if (zc !== undefined && zc.length > MAX_ZC) throw new ProtocolError(`more than ${MAX_ZC} completions in one message`);
  const mlen =
    1 +
    address.length +
    2 +
    1 +
    (timestamp !== undefined ? 8 : 0) +
    (zc !== undefined ? 2 + 4 * zc.length : 0) +
    (cu !== undefined ? 8 : 0) +
    (rt !== undefined ? 24 : 0);
  const len = data.length;
  let o = header(w, N_MSG, sock, 0, mlen, len, len < JOIN_BELOW ? len : 0);
  const h = w.slab;
  o = writeShort(h, o, address);
  o = h.writeUInt16BE(port, o);
  h[o++] =
    (timestamp !== undefined ? M_TS : 0) |
    (zc !== undefined ? M_ZC : 0) |
    (cu !== undefined ? M_CU : 0) |
    (rt !== undefined ? M_RT : 0);
  if (timestamp !== undefined) o = h.writeDoubleBE(timestamp, o);
  if (zc !== undefined) {
    o = h.writeUInt16BE(zc.length, o);
    for (const c of zc) o = h.writeUInt32BE(c >>> 0, o);
  }
  if (cu !== undefined) o = h.writeBigUInt64BE(BigInt.asUintN(64, cu), o);
  if (rt !== undefined) for (let i = 0; i < 3; i++) o = h.writeBigUInt64BE(BigInt.asUintN(64, rt[i] ?? 0n), o);
  finish(w, o, data, len, false);
}

/** A MSG frame as its buffers. */
export function encodeMsg(
  sock: number,
  address: string,
  port: number,
  timestamp: number | undefined,
  zc: readonly number[] | undefined,
  cu: bigint | undefined,
  data: Uint8Array,
  rt?: readonly bigint[],
): Buffer[] {
  return asParts((f) => writeMsg(f, sock, address, port, timestamp, zc, cu, data, rt));
}

/**
 * A MSG frame as the message recvmsg() returns: its meta (`b` from `off` to `end`) read straight
 * into it, the optional fields present only when the frame carries them.
 */
export function readMsg(b: Buffer, off: number, end: number, data: Buffer): RdsMessage {
  const address = readAddress(b, off, end);
  let o = off + 1 + address.length;
  if (o + 3 > end) throw new ProtocolError('MSG meta too short');
  const m: RdsMessage = { data, address, port: b.readUInt16BE(o) };
  const bits = b[o + 2]!;
  o += 3;
  if (bits === 0) return m;
  if ((bits & M_TS) !== 0) {
    if (o + 8 > end) throw new ProtocolError('MSG meta too short');
    m.timestamp = b.readDoubleBE(o);
    o += 8;
  }
  if ((bits & M_ZC) !== 0) {
    if (o + 2 > end) throw new ProtocolError('MSG meta too short');
    const n = b.readUInt16BE(o);
    o += 2;
    if (o + 4 * n > end) throw new ProtocolError('MSG meta too short');
    const zc: number[] = [];
    for (let i = 0; i < n; i++, o += 4) zc.push(b.readUInt32BE(o));
    m.zcopyCompletions = zc;
  }
  if ((bits & M_CU) !== 0) {
    if (o + 8 > end) throw new ProtocolError('MSG meta too short');
    m.congestionUpdate = b.readBigUInt64BE(o);
    o += 8;
  }
  if ((bits & M_RT) !== 0) {
    if (o + 24 > end) throw new ProtocolError('MSG meta too short');
    m.rxStamps = [b.readBigUInt64BE(o), b.readBigUInt64BE(o + 8), b.readBigUInt64BE(o + 16)];
  }
  return m;
}

/** The meta of a MSG frame: `b` from `off` to `end` (a whole buffer by default). */
export function decodeMsg(b: Buffer, off = 0, end = b.length): MsgMeta {
  const m = readMsg(b, off, end, NO_DATA);
  return {
    address: m.address,
    port: m.port,
    timestamp: m.timestamp,
    zcopyCompletions: m.zcopyCompletions,
    congestionUpdate: m.congestionUpdate,
  };
}

/** SENT (node to client: bytes and messages handed on) and CREDIT (client to node: read): f64 bytes, u32 messages. */
export function writeCount(
  w: FrameOut,
  type: typeof N_SENT | typeof C_CREDIT,
  sock: number,
  bytes: number,
  msgs: number,
): void {
  const o = header(w, type, sock, 0, 12, 0, 0);
  w.slab.writeDoubleBE(bytes, o);
  w.slab.writeUInt32BE(msgs >>> 0, o + 8);
  w.commit(o + 12);
}

/** A SENT or CREDIT frame as its buffer. */
export function encodeCount(
  type: typeof N_SENT | typeof C_CREDIT,
  sock: number,
  bytes: number,
  msgs: number,
): Buffer[] {
  return asParts((f) => writeCount(f, type, sock, bytes, msgs));
}

/** The meta of a SENT or CREDIT frame: `b` from `off` to `end` (a whole buffer by default). */
export function decodeCount(b: Buffer, off = 0, end = b.length): { n: number; k: number } {
  if (end - off < 12) throw new ProtocolError('count meta too short');
  const n = b.readDoubleBE(off);
  if (!Number.isFinite(n)) throw new ProtocolError('count is not a number');
  return { n, k: b.readUInt32BE(off + 8) };
}
