// The per-message frames of the control protocol (SEND, CREDIT, MSG, SENT) with a fixed binary
// meta instead of JSON: they are the data path, written and read once per message, where
// JSON.stringify / JSON.parse and a separately allocated header cost more than the rest of the
// hop. Header and meta share one allocation; the payload is written as it is.
import { type C_CREDIT, C_SEND, HEADER_BYTES, N_MSG, type N_SENT, ProtocolError } from './protocol.js';

const F_CONFIRM = 1;
const F_COOKIE = 2;
const M_TS = 1;
const M_ZC = 2;
const M_CU = 4;

/** The most zero-copy completions one MSG carries (the core reports them in batches far smaller). */
const MAX_ZC = 4096;

function header(type: number, sock: number, id: number, metaLen: number, dataLen: number): Buffer {
  const b = Buffer.allocUnsafe(HEADER_BYTES + metaLen);
  b.writeUInt32BE(HEADER_BYTES - 4 + metaLen + dataLen, 0);
  b[4] = type;
  b.writeUInt32BE(sock >>> 0, 5);
  b.writeUInt32BE(id >>> 0, 9);
  b.writeUInt32BE(metaLen, 13);
  return b;
}

function withData(h: Buffer, data: Uint8Array | readonly Uint8Array[]): Buffer[] {
  const out = [h];
  if (data instanceof Uint8Array) {
    if (data.length > 0)
      out.push(Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.length));
  } else {
    for (const p of data)
      if (p.length > 0) out.push(Buffer.isBuffer(p) ? p : Buffer.from(p.buffer, p.byteOffset, p.length));
  }
  return out;
}

function lengthOf(data: Uint8Array | readonly Uint8Array[]): number {
  if (data instanceof Uint8Array) return data.length;
  let n = 0;
  for (const p of data) n += p.length;
  return n;
}

/** Reads a u8-length-prefixed latin1 string at `off`; returns it and the offset after it. */
function readShort(bin: Buffer, off: number, what: string): [string, number] {
  if (off >= bin.length) throw new ProtocolError(`${what} missing`);
  const n = bin[off]!;
  if (off + 1 + n > bin.length) throw new ProtocolError(`${what} runs past its frame`);
  return [bin.toString('latin1', off + 1, off + 1 + n), off + 1 + n];
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
}

/** SEND: u8 alen, address, u16 port, u32 flags, u8 bits (confirm, cookie), [u32 cookie]. */
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
  checkShort(address, 'address');
  const mlen = 1 + address.length + 2 + 4 + 1 + (cookie !== undefined ? 4 : 0);
  const h = header(C_SEND, sock, id, mlen, lengthOf(data));
  let o = writeShort(h, HEADER_BYTES, address);
  o = h.writeUInt16BE(port, o);
  o = h.writeUInt32BE(flags >>> 0, o);
  h[o++] = (confirm ? F_CONFIRM : 0) | (cookie !== undefined ? F_COOKIE : 0);
  if (cookie !== undefined) h.writeUInt32BE(cookie >>> 0, o);
  return withData(h, data);
}

export function decodeSend(bin: Buffer): SendMeta {
  const [address, o] = readShort(bin, 0, 'address');
  if (o + 7 > bin.length) throw new ProtocolError('SEND meta too short');
  const port = bin.readUInt16BE(o);
  const flags = bin.readUInt32BE(o + 2);
  const bits = bin[o + 6]!;
  let cookie: number | undefined;
  if ((bits & F_COOKIE) !== 0) {
    if (o + 11 > bin.length) throw new ProtocolError('SEND meta too short for its cookie');
    cookie = bin.readUInt32BE(o + 7);
  }
  return { address, port, flags, confirm: (bits & F_CONFIRM) !== 0, cookie };
}

export interface MsgMeta {
  address: string;
  port: number;
  timestamp: number | undefined;
  zcopyCompletions: number[] | undefined;
  congestionUpdate: bigint | undefined;
}

/** MSG: u8 alen, address, u16 port, u8 bits, [f64 timestamp], [u16 n, n x u32 cookies], [u64 congestion bits]. */
export function encodeMsg(
  sock: number,
  address: string,
  port: number,
  timestamp: number | undefined,
  zc: readonly number[] | undefined,
  cu: bigint | undefined,
  data: Uint8Array,
): Buffer[] {
  checkShort(address, 'address');
  if (zc !== undefined && zc.length > MAX_ZC) throw new ProtocolError(`more than ${MAX_ZC} completions in one message`);
  const mlen =
    1 +
    address.length +
    2 +
    1 +
    (timestamp !== undefined ? 8 : 0) +
    (zc !== undefined ? 2 + 4 * zc.length : 0) +
    (cu !== undefined ? 8 : 0);
  const h = header(N_MSG, sock, 0, mlen, data.length);
  let o = writeShort(h, HEADER_BYTES, address);
  o = h.writeUInt16BE(port, o);
  h[o++] = (timestamp !== undefined ? M_TS : 0) | (zc !== undefined ? M_ZC : 0) | (cu !== undefined ? M_CU : 0);
  if (timestamp !== undefined) o = h.writeDoubleBE(timestamp, o);
  if (zc !== undefined) {
    o = h.writeUInt16BE(zc.length, o);
    for (const c of zc) o = h.writeUInt32BE(c >>> 0, o);
  }
  if (cu !== undefined) h.writeBigUInt64BE(BigInt.asUintN(64, cu), o);
  return withData(h, data);
}

export function decodeMsg(bin: Buffer): MsgMeta {
  let [address, o] = readShort(bin, 0, 'address');
  if (o + 3 > bin.length) throw new ProtocolError('MSG meta too short');
  const port = bin.readUInt16BE(o);
  const bits = bin[o + 2]!;
  o += 3;
  const need = (n: number): void => {
    if (o + n > bin.length) throw new ProtocolError('MSG meta too short');
  };
  let timestamp: number | undefined;
  let zcopyCompletions: number[] | undefined;
  let congestionUpdate: bigint | undefined;
  if ((bits & M_TS) !== 0) {
    need(8);
    timestamp = bin.readDoubleBE(o);
    o += 8;
  }
  if ((bits & M_ZC) !== 0) {
    need(2);
    const n = bin.readUInt16BE(o);
    o += 2;
    need(4 * n);
    zcopyCompletions = [];
    for (let i = 0; i < n; i++, o += 4) zcopyCompletions.push(bin.readUInt32BE(o));
  }
  if ((bits & M_CU) !== 0) {
    need(8);
    congestionUpdate = bin.readBigUInt64BE(o);
  }
  return { address, port, timestamp, zcopyCompletions, congestionUpdate };
}

/** SENT (node to client: bytes and messages handed on) and CREDIT (client to node: read): f64 bytes, u32 messages. */
export function encodeCount(
  type: typeof N_SENT | typeof C_CREDIT,
  sock: number,
  bytes: number,
  msgs: number,
): Buffer[] {
  const h = header(type, sock, 0, 12, 0);
  h.writeDoubleBE(bytes, HEADER_BYTES);
  h.writeUInt32BE(msgs >>> 0, HEADER_BYTES + 8);
  return [h];
}

export function decodeCount(bin: Buffer): { n: number; k: number } {
  if (bin.length < 12) throw new ProtocolError('count meta too short');
  const n = bin.readDoubleBE(0);
  if (!Number.isFinite(n)) throw new ProtocolError('count is not a number');
  return { n, k: bin.readUInt32BE(8) };
}
