// The per-message frames of the control protocol (SEND, CREDIT, MSG, SENT) with a fixed binary
// meta instead of JSON: they are the data path, written and read once per message, where
// JSON.stringify / JSON.parse and a separately allocated header cost more than the rest of the
// hop. Each is encoded straight into the writer's slab (FrameWriter): header, meta and a payload
// under JOIN_BELOW bytes in one place, with nothing allocated per frame; a larger payload follows
// as a part of its own, written as it is.
// MSG lives in msg-frames.ts, the helpers they share in frame-encode.ts.
import { type C_CREDIT, C_SEND, type FrameOut, JOIN_BELOW, type N_SENT, ProtocolError } from './protocol.js';
import { RDS_HEADER_SIZE } from '../constants.js';
import { encodeDataHeader, get32, put16, put32 } from '../wire/header.js';
import { asParts, checkShort, finish, header, lengthOf, readAddress, writeShort } from './frame-encode.js';

export {
  decodeMsg,
  encodeMsg,
  encodeMsgWire,
  type MsgFields,
  type MsgMeta,
  readMsg,
  readMsgFrame,
  writeMsg,
  writeMsgWire,
} from './msg-frames.js';

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
  o = put16(h, o, port);
  o = put32(h, o, flags);
  h[o++] = (confirm ? F_CONFIRM : 0) | (cookie !== undefined ? F_COOKIE : 0) | (wire ? F_WIRE : 0);
  if (cookie !== undefined) o = put32(h, o, cookie);
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
  // Bounds checked just above: byte arithmetic, without the read methods' argument checks.
  const port = (b[o]! << 8) | b[o + 1]!;
  const flags = get32(b, o + 2);
  const bits = b[o + 6]!;
  let cookie: number | undefined;
  if ((bits & F_COOKIE) !== 0) {
    if (o + 11 > end) throw new ProtocolError('SEND meta too short for its cookie');
    cookie = get32(b, o + 7);
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
