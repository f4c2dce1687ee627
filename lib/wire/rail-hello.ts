import { RDS_FLAG_PROBE_PORT, RDS_FLAG_RETRANSMITTED, RDS_HEADER_SIZE, RDSSOCK_EXTHDR_RAIL } from '../constants.js';
import { packExtensions, parseExtensions } from './extensions.js';
import { decodeHeader, encodeHeader, OFF_EXTHDR, OFF_LEN } from './header.js';

/** The rail hello's version; a node refuses (RAIL_REFUSED_VERSION) any other. */
export const RAIL_VERSION = 1;
/** The opening frame, sent by the node that dials the rail. */
export const RAIL_HELLO = 1;
/** The answer: the rail is accepted and both ends agree who they are. */
export const RAIL_ACCEPT = 2;
/** The answer: refused; the reason byte says why, and the connection is closed. */
export const RAIL_REFUSE = 3;

/** Why a rail was refused (the reason byte). */
export const RAIL_REFUSED_NOT_DECLARED = 1;
export const RAIL_REFUSED_OTHER_NODE = 2;
export const RAIL_REFUSED_GENERATION = 3;
export const RAIL_REFUSED_BAD_INDEX = 4;
export const RAIL_REFUSED_VERSION = 5;
export const RAIL_REFUSED_DISABLED = 6;
export const RAIL_REFUSED_HELD = 7;

const REASONS: Record<number, string> = {
  [RAIL_REFUSED_NOT_DECLARED]: 'no such rail is declared for this peer on the accepting node',
  [RAIL_REFUSED_OTHER_NODE]: 'the address pair leads to another node',
  [RAIL_REFUSED_GENERATION]: 'the other end is another incarnation of the peer than the one the connection knows',
  [RAIL_REFUSED_BAD_INDEX]: 'rail path index out of range',
  [RAIL_REFUSED_VERSION]: 'unknown rail hello version',
  [RAIL_REFUSED_DISABLED]: 'the accepting node runs no rails (acknowledgements off)',
  [RAIL_REFUSED_HELD]: 'the accepting node holds this rail down (disconnect)',
};

/** Text for a refusal reason byte. */
export function railRefusalText(reason: number): string {
  return REASONS[reason] ?? `reason ${reason}`;
}

/** Longest payload a rail hello may declare: two address texts and a generation. */
export const RAIL_HELLO_MAX_PAYLOAD = 4 + 2 * (1 + 45);

/** What a rail hello or its answer says. */
export interface RailHello {
  kind: number;
  /** The rail's path index in the connection (chosen by the dialling node, >= 8). */
  index: number;
  /** RAIL_REFUSED_*; 0 unless kind is RAIL_REFUSE. */
  reason: number;
  /** The sender's RDS address (its identity, the primary connection's address). */
  src: string;
  /** The RDS address the sender expects at the other end. */
  dst: string;
  /** The sender's generation (GEN_NUM of its stack). */
  genNum: number;
}

/**
 * Encodes a rail hello: an unsequenced frame (seq 0, RETRANSMITTED, sport 1 -> dport 0, as
 * rds-socket's hello) whose extension area holds RDSSOCK_EXTHDR_RAIL and whose payload is
 * be32 generation, u8 length + ASCII source address, u8 length + ASCII destination address.
 * A kernel that got one would count it as an old retransmission and drop it.
 */
export function encodeRailHello(h: RailHello): Buffer {
  const src = Buffer.from(h.src, 'latin1');
  const dst = Buffer.from(h.dst, 'latin1');
  const payload = Buffer.alloc(4 + 1 + src.length + 1 + dst.length);
  payload.writeUInt32BE(h.genNum >>> 0, 0);
  payload[4] = src.length;
  src.copy(payload, 5);
  payload[5 + src.length] = dst.length;
  dst.copy(payload, 6 + src.length);
  const frame = Buffer.alloc(RDS_HEADER_SIZE + payload.length);
  encodeHeader(frame, 0, {
    sport: RDS_FLAG_PROBE_PORT,
    dport: 0,
    flags: RDS_FLAG_RETRANSMITTED,
    len: payload.length,
    exthdr: packExtensions([
      { type: RDSSOCK_EXTHDR_RAIL, data: Uint8Array.of(RAIL_VERSION, h.kind, h.index, h.reason) },
    ]),
  });
  payload.copy(frame, RDS_HEADER_SIZE);
  return frame;
}

/** The payload length a rail hello header declares (to know how much more to read). */
export function railHelloPayloadLength(header: Uint8Array): number {
  return new DataView(header.buffer, header.byteOffset, RDS_HEADER_SIZE).getUint32(OFF_LEN);
}

/**
 * Decodes a rail hello (48-byte header + payload); null if it is not one or is malformed (the
 * caller refuses the connection). A version other than ours decodes with kind 0.
 */
export function decodeRailHello(header: Uint8Array, payload: Uint8Array): RailHello | null {
  if (header.length < RDS_HEADER_SIZE) return null;
  const h = decodeHeader(header);
  if (h.sequence !== 0 || h.sport !== RDS_FLAG_PROBE_PORT || h.dport !== 0) return null;
  if (h.len !== payload.length || payload.length > RAIL_HELLO_MAX_PAYLOAD || payload.length < 6) return null;
  const ext = parseExtensions(header.subarray(OFF_EXTHDR)).find((e) => e.type === RDSSOCK_EXTHDR_RAIL);
  if (ext === undefined) return null;
  const p = Buffer.from(payload.buffer, payload.byteOffset, payload.length);
  const sl = p[4]!;
  if (5 + sl + 1 > p.length) return null;
  const dl = p[5 + sl]!;
  if (6 + sl + dl !== p.length) return null;
  return {
    kind: ext.data[0] === RAIL_VERSION ? ext.data[1]! : 0,
    index: ext.data[2]!,
    reason: ext.data[3]!,
    genNum: p.readUInt32BE(0),
    src: p.toString('latin1', 5, 5 + sl),
    dst: p.toString('latin1', 6 + sl, 6 + sl + dl),
  };
}
