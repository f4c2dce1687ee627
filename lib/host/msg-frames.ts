// The delivery frame of the control protocol, MSG (node to client: a received message), with a
// fixed binary meta (see hot-frames.ts for why). Protocol 5 adds M_WIRE: the data is the message
// as the node's stack received it from the peer, its 48-byte RDS header and the payload, and the
// client reads the port and length from that header (the node's cut-through receive,
// node-deliver.ts).
import { type Frame, type FrameOut, JOIN_BELOW, N_MSG, ProtocolError } from './protocol.js';
import type { RdsMessage } from '../core/types.js';
import { RDS_HEADER_SIZE } from '../constants.js';
import { get32, OFF_LEN, OFF_SPORT, put16 } from '../wire/header.js';
import { asParts, checkShort, finish, header, readAddress, writeShort } from './frame-encode.js';

const NO_DATA = Buffer.alloc(0);
const M_TS = 1;
const M_ZC = 2;
const M_CU = 4;
/** MSG carries the node's receive-path stamps 0-2 (SO_RDS_MSG_RXPATH_LATENCY): 3 x u64 ns. */
const M_RT = 8;
/**
 * Protocol 5: the data is the RDS header as received and the payload (the meta's port is 0: the
 * header's source port is the one). Written only to a client whose hello said 5 or later.
 */
const M_WIRE = 16;
/** MSG carries the index of the connection path the message came on (RdsMessage.path): u8. */
const M_PATH = 32;

/** The most zero-copy completions one MSG carries (the core reports them in batches far smaller). */
const MAX_ZC = 4096;

export interface MsgMeta {
  address: string;
  port: number;
  timestamp: number | undefined;
  zcopyCompletions: number[] | undefined;
  congestionUpdate: bigint | undefined;
  path: number | undefined;
}

/**
 * What a MSG frame carries of a received message: the node passes the RdsMessage itself (so
 * nothing is allocated per message), tests a literal.
 */
export interface MsgFields {
  readonly address: string;
  readonly port: number;
  readonly data: Uint8Array;
  readonly timestamp?: number | undefined;
  readonly zcopyCompletions?: readonly number[] | undefined;
  readonly congestionUpdate?: bigint | undefined;
  /** The node's receive-path stamps 0-2 (SO_RDS_MSG_RXPATH_LATENCY). */
  readonly rxStamps?: readonly bigint[] | undefined;
  readonly path?: number | undefined;
}

/**
 * MSG: u8 alen, address, u16 port, u8 bits, [f64 timestamp], [u16 n, n x u32 cookies], [u64
 * congestion bits], [3 x u64 receive-path stamps], [u8 path]. A reader ignores bits it does not
 * know (each field follows the ones before it, and the meta's length is in the frame header).
 */
export function writeMsg(w: FrameOut, sock: number, m: MsgFields): void {
  writeAny(
    w,
    sock,
    m.address,
    m.port,
    m.timestamp,
    m.zcopyCompletions,
    m.congestionUpdate,
    m.data,
    m.rxStamps,
    m.path,
    null,
  );
}

/**
 * MSG with M_WIRE (protocol 5): writeMsg's meta with port 0 (the header's source port is the one;
 * `m.port`, zero-copy completions and congestion bits are not written), then the data as the peer
 * sent it, its RDS header `wire` (48 bytes, copied into the slab) and the payload `m.data` after it
 * (inline under JOIN_BELOW, else by reference, as writeMsg writes a payload).
 */
export function writeMsgWire(w: FrameOut, sock: number, m: MsgFields, wire: Uint8Array): void {
  if (wire.length !== RDS_HEADER_SIZE) throw new ProtocolError(`an RDS header is ${RDS_HEADER_SIZE} bytes`);
  writeAny(w, sock, m.address, 0, m.timestamp, undefined, undefined, m.data, m.rxStamps, m.path, wire);
}

function writeAny(
  w: FrameOut,
  sock: number,
  address: string,
  port: number,
  timestamp: number | undefined,
  zc: readonly number[] | undefined,
  cu: bigint | undefined,
  data: Uint8Array,
  rt: readonly bigint[] | undefined,
  path: number | undefined,
  wire: Uint8Array | null,
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
    (rt !== undefined ? 24 : 0) +
    (path !== undefined ? 1 : 0);
  const len = data.length;
  const hlen = wire === null ? 0 : RDS_HEADER_SIZE;
  let o = header(w, N_MSG, sock, 0, mlen, hlen + len, hlen + (len < JOIN_BELOW ? len : 0));
  const h = w.slab;
  o = writeShort(h, o, address);
  o = put16(h, o, port);
  h[o++] =
    (timestamp !== undefined ? M_TS : 0) |
    (zc !== undefined ? M_ZC : 0) |
    (cu !== undefined ? M_CU : 0) |
    (rt !== undefined ? M_RT : 0) |
    (path !== undefined ? M_PATH : 0) |
    (wire !== null ? M_WIRE : 0);
  if (timestamp !== undefined) o = h.writeDoubleBE(timestamp, o);
  if (zc !== undefined) {
    o = h.writeUInt16BE(zc.length, o);
    for (const c of zc) o = h.writeUInt32BE(c >>> 0, o);
  }
  if (cu !== undefined) o = h.writeBigUInt64BE(BigInt.asUintN(64, cu), o);
  if (rt !== undefined) for (let i = 0; i < 3; i++) o = h.writeBigUInt64BE(BigInt.asUintN(64, rt[i] ?? 0n), o);
  if (path !== undefined) h[o++] = path;
  if (wire !== null) {
    h.set(wire, o);
    o += RDS_HEADER_SIZE;
  }
  finish(w, o, data, len, false);
}

/** A MSG frame as its buffers. */
export function encodeMsg(sock: number, m: MsgFields): Buffer[] {
  return asParts((f) => writeMsg(f, sock, m));
}

/** A MSG frame with M_WIRE as its buffers. */
export function encodeMsgWire(sock: number, m: MsgFields, wire: Uint8Array): Buffer[] {
  return asParts((f) => writeMsgWire(f, sock, m, wire));
}

/**
 * A MSG frame as the message recvmsg() returns: its meta (`b` from `off` to `end`) read straight
 * into it, the optional fields present only when the frame carries them. With M_WIRE, `data` is
 * the RDS header and the payload: the port and length come from the header (a length that is not
 * the payload's is a protocol error), the message's data is the payload after it.
 */
export function readMsg(b: Buffer, off: number, end: number, data: Buffer): RdsMessage {
  return parse(b, off, end, data, 0, true);
}

/** readMsg of a MSG frame as read: its data taken apart where it lies in the frame's buffer (one view made). */
export function readMsgFrame(f: Frame): RdsMessage {
  return parse(f.raw, f.metaStart, f.metaEnd, null, f.end, true);
}

/**
 * readMsg; `wire` false: the meta alone (decodeMsg), an M_WIRE frame's port left as the meta's 0.
 * The data: `data`, or when null `b` from `end` (the meta's end) to `dataEnd`.
 */
function parse(b: Buffer, off: number, end: number, data: Buffer | null, dataEnd: number, wire: boolean): RdsMessage {
  const address = readAddress(b, off, end);
  let o = off + 1 + address.length;
  if (o + 3 > end) throw new ProtocolError('MSG meta too short');
  const bits = b[o + 2]!;
  const m: RdsMessage =
    (bits & M_WIRE) === 0 || !wire
      ? { data: data ?? (dataEnd > end ? b.subarray(end, dataEnd) : NO_DATA), address, port: (b[o]! << 8) | b[o + 1]! }
      : data !== null
        ? fromWire(data, 0, data.length, address)
        : fromWire(b, end, dataEnd, address);
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
    o += 24;
  }
  if ((bits & M_PATH) !== 0) {
    if (o + 1 > end) throw new ProtocolError('MSG meta too short');
    m.path = b[o]!;
  }
  return m;
}

/** The meta of a MSG frame: `b` from `off` to `end` (a whole buffer by default). */
export function decodeMsg(b: Buffer, off = 0, end = b.length): MsgMeta {
  const m = parse(b, off, end, NO_DATA, 0, false);
  return {
    address: m.address,
    port: m.port,
    timestamp: m.timestamp,
    zcopyCompletions: m.zcopyCompletions,
    congestionUpdate: m.congestionUpdate,
    path: m.path,
  };
}

/** The message whose data is an RDS header and its payload (M_WIRE). */
function fromWire(b: Buffer, start: number, stop: number, address: string): RdsMessage {
  const n = stop - start;
  if (n < RDS_HEADER_SIZE) throw new ProtocolError(`MSG data of ${n} bytes is shorter than an RDS header`);
  const len = get32(b, start + OFF_LEN);
  if (len !== n - RDS_HEADER_SIZE)
    throw new ProtocolError(`MSG header length ${len} is not its payload's ${n - RDS_HEADER_SIZE} bytes`);
  const port = (b[start + OFF_SPORT]! << 8) | b[start + OFF_SPORT + 1]!;
  return { data: b.subarray(start + RDS_HEADER_SIZE, stop), address, port };
}
