import {
  RDS_EXTHDR_NONE,
  RDS_EXTHDR_VERSION,
  RDS_EXTHDR_RDMA,
  RDS_EXTHDR_RDMA_DEST,
  RDS_EXTHDR_RDMA_BYTES,
  RDS_EXTHDR_NPATHS,
  RDS_EXTHDR_GEN_NUM,
  RDS_EXTHDR_CAP_BITS,
  RDS_EXTHDR_SPORT_IDX,
  RDS_EXTHDR_CSUM,
  RDSSOCK_EXTHDR_CAPS,
  RDSSOCK_EXTHDR_MOVED,
  RDSSOCK_EXTHDR_WITHDRAWN,
  RDSSOCK_EXTHDR_READ,
  RDSSOCK_EXTHDR_REFUSED,
  RDSSOCK_EXTHDR_RAIL,
} from '../constants.js';
import { EXTHDR_SIZE } from './header.js';

/** Payload length implied by each extension type (spec §1.4). Types not listed are unknown. */
export const EXTHDR_LENGTHS: ReadonlyMap<number, number> = new Map([
  [RDS_EXTHDR_VERSION, 4],
  [RDS_EXTHDR_RDMA, 4],
  [RDS_EXTHDR_RDMA_DEST, 8],
  [RDS_EXTHDR_RDMA_BYTES, 8],
  [RDS_EXTHDR_NPATHS, 2],
  [RDS_EXTHDR_GEN_NUM, 4],
  [RDS_EXTHDR_CAP_BITS, 4],
  [RDS_EXTHDR_SPORT_IDX, 1],
  [RDS_EXTHDR_CSUM, 8],
  [RDSSOCK_EXTHDR_CAPS, 4],
  [RDSSOCK_EXTHDR_MOVED, 9],
  [RDSSOCK_EXTHDR_WITHDRAWN, 0],
  [RDSSOCK_EXTHDR_READ, 12],
  [RDSSOCK_EXTHDR_REFUSED, 9],
  [RDSSOCK_EXTHDR_RAIL, 4],
]);

/** One extension record of the header: its type (RDS_EXTHDR_*) and bytes. */
export interface RdsExtension {
  type: number;
  data: Uint8Array;
}

/** The fields of the extensions this implementation acts on, decoded. */
export interface HandshakeExtensions {
  npaths?: number;
  genNum?: number;
  sportIdx?: boolean;
  capBits?: number;
  /** rds-socket capabilities (RDSSOCK_CAP_*), present only from rds-socket peers. */
  rdsCaps?: number;
}

/**
 * Walks the extension area the way a careful kernel does, but stops at any type whose length it
 * does not know instead of guessing: a ≤6.19 kernel would treat such a type as zero-length and
 * read its payload as the next type, which turns garbage into phantom extensions.
 * Old UEK headers put a NONE byte between records; they parse here as their first record only,
 * exactly as mainline parses them.
 */
export function parseExtensions(area: Uint8Array): RdsExtension[] {
  const out: RdsExtension[] = [];
  let off = 0;
  while (off < area.length && off < EXTHDR_SIZE) {
    const type = area[off]!;
    if (type === RDS_EXTHDR_NONE) break;
    const len = EXTHDR_LENGTHS.get(type);
    if (len === undefined) break;
    if (off + 1 + len > EXTHDR_SIZE) break;
    out.push({ type, data: area.slice(off + 1, off + 1 + len) });
    off += 1 + len;
  }
  return out;
}

/**
 * Packs records back to back from offset 0 (the 7.0/UEK form). A record that does not fit is
 * left out, as the kernel does; callers put the most important record first because a ≤6.19
 * peer only ever writes one but reads all.
 */
export function packExtensions(exts: readonly RdsExtension[]): Uint8Array {
  const area = new Uint8Array(EXTHDR_SIZE);
  let off = 0;
  for (const e of exts) {
    const len = EXTHDR_LENGTHS.get(e.type);
    if (len === undefined) throw new TypeError(`unknown extension header type ${e.type}`);
    if (e.data.length !== len) throw new TypeError(`extension type ${e.type} needs ${len} bytes, got ${e.data.length}`);
    if (off + 1 + len > EXTHDR_SIZE) continue;
    area[off] = e.type;
    area.set(e.data, off + 1);
    off += 1 + len;
  }
  return area;
}

/** RDS_EXTHDR_NPATHS: how many paths the sender runs (be16). */
export function npathsExtension(n: number): RdsExtension {
  return { type: RDS_EXTHDR_NPATHS, data: Uint8Array.of((n >> 8) & 0xff, n & 0xff) };
}

/** RDS_EXTHDR_GEN_NUM: the sender's generation number (be32). */
export function genNumExtension(gen: number): RdsExtension {
  const data = new Uint8Array(4);
  new DataView(data.buffer).setUint32(0, gen >>> 0);
  return { type: RDS_EXTHDR_GEN_NUM, data };
}

/** RDSSOCK_EXTHDR_CAPS: rds-socket's capability bits (be32); kernels never parse it. */
export function rdsCapsExtension(caps: number): RdsExtension {
  const data = new Uint8Array(4);
  new DataView(data.buffer).setUint32(0, caps >>> 0);
  return { type: RDSSOCK_EXTHDR_CAPS, data };
}

/** RDSSOCK_EXTHDR_READ: the read cursor and how many refusals lie at or before it. */
export function readExtension(seq: number, refused: number): RdsExtension {
  const data = new Uint8Array(12);
  const dv = new DataView(data.buffer);
  dv.setBigUint64(0, BigInt(seq));
  dv.setUint32(8, refused >>> 0);
  return { type: RDSSOCK_EXTHDR_READ, data };
}

/** RDSSOCK_EXTHDR_REFUSED: the message `seq` was not delivered, and why (RDSSOCK_REFUSED_*). */
export function refusedExtension(seq: number, reason: number): RdsExtension {
  const data = new Uint8Array(9);
  new DataView(data.buffer).setBigUint64(0, BigInt(seq));
  data[8] = reason;
  return { type: RDSSOCK_EXTHDR_REFUSED, data };
}

/** What an ack-only frame from an RDSSOCK_CAP_CONFIRM peer reports besides h_ack. */
export interface ReadReport {
  read?: { seq: number; refused: number };
  refused?: { seq: number; reason: number };
}

/** The read cursor and refusal an ack-only frame reports (RDSSOCK_EXTHDR_READ, RDSSOCK_EXTHDR_REFUSED). */
export function decodeReadReport(exts: readonly RdsExtension[]): ReadReport {
  const out: ReadReport = {};
  for (const e of exts) {
    const dv = new DataView(e.data.buffer, e.data.byteOffset, e.data.byteLength);
    if (e.type === RDSSOCK_EXTHDR_READ) out.read = { seq: Number(dv.getBigUint64(0)), refused: dv.getUint32(8) };
    else if (e.type === RDSSOCK_EXTHDR_REFUSED) out.refused = { seq: Number(dv.getBigUint64(0)), reason: e.data[8]! };
  }
  return out;
}

/** RDS_EXTHDR_SPORT_IDX: paths are paired by TCP source port (7.x). */
export function sportIdxExtension(): RdsExtension {
  return { type: RDS_EXTHDR_SPORT_IDX, data: Uint8Array.of(0) };
}

/** What a probe or pong says: paths, generation, SPORT_IDX, capabilities. */
export function decodeHandshake(exts: readonly RdsExtension[]): HandshakeExtensions {
  const hs: HandshakeExtensions = {};
  for (const e of exts) {
    const dv = new DataView(e.data.buffer, e.data.byteOffset, e.data.byteLength);
    switch (e.type) {
      case RDS_EXTHDR_NPATHS:
        hs.npaths = dv.getUint16(0);
        break;
      case RDS_EXTHDR_GEN_NUM:
        hs.genNum = dv.getUint32(0);
        break;
      case RDS_EXTHDR_SPORT_IDX:
        hs.sportIdx = true;
        break;
      case RDS_EXTHDR_CAP_BITS:
        hs.capBits = dv.getUint32(0);
        break;
      case RDSSOCK_EXTHDR_CAPS:
        hs.rdsCaps = dv.getUint32(0);
        break;
      default:
        break;
    }
  }
  return hs;
}
