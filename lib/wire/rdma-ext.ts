import {
  RDS_EXTHDR_RDMA,
  RDS_EXTHDR_RDMA_BYTES,
  RDS_EXTHDR_RDMA_DEST,
  RDS_FLAG_RDMA_RD_BYTES,
  RDS_FLAG_RDMA_WR_BYTES,
} from '../constants.js';
import type { RdsExtension } from './extensions.js';

/*
 * The RDMA extension records of a data message's header (spec §1.4, §7.6):
 *   RDMA (2):       be32 R_Key of the receiver's MR an RDMA op of this message used
 *   RDMA_DEST (3):  be32 R_Key, be32 offset: a cookie the sender exposes to the receiver
 *   RDMA_BYTES (4): be32 byte count, u8 flags (0x01 write, 0x02 read), 3 pad bytes (7.0+/UEK, IB)
 */

const MASK32 = 0xffffffffn;

/** An MR cookie as the kernel builds it: (offset << 32) + rkey. */
export function rdmaCookie(rkey: number, offset: number): bigint {
  return (BigInt(offset >>> 0) << 32n) | BigInt(rkey >>> 0);
}

/** The R_Key half of a cookie. */
export function cookieRkey(cookie: bigint): number {
  return Number(cookie & MASK32);
}

/** The offset half of a cookie (where in the registered region the exposed bytes begin). */
export function cookieOffset(cookie: bigint): number {
  return Number((cookie >> 32n) & MASK32);
}

/** RDS_EXTHDR_RDMA: the R_Key of the peer's region the message's RDMA op used. */
export function rdmaExtension(rkey: number): RdsExtension {
  const data = new Uint8Array(4);
  new DataView(data.buffer).setUint32(0, rkey >>> 0);
  return { type: RDS_EXTHDR_RDMA, data };
}

/** RDS_EXTHDR_RDMA_DEST: a region named to the peer, by its cookie (R_Key and offset). */
export function rdmaDestExtension(cookie: bigint): RdsExtension {
  const data = new Uint8Array(8);
  const dv = new DataView(data.buffer);
  dv.setUint32(0, cookieRkey(cookie));
  dv.setUint32(4, cookieOffset(cookie));
  return { type: RDS_EXTHDR_RDMA_DEST, data };
}

/** RDS_EXTHDR_RDMA_BYTES: how many bytes an RDMA op moved, and which way (7.x). */
export function rdmaBytesExtension(bytes: number, write: boolean): RdsExtension {
  const data = new Uint8Array(8);
  new DataView(data.buffer).setUint32(0, bytes >>> 0);
  data[4] = write ? RDS_FLAG_RDMA_WR_BYTES : RDS_FLAG_RDMA_RD_BYTES;
  return { type: RDS_EXTHDR_RDMA_BYTES, data };
}

/** The RDMA records of one message, decoded. */
export interface RdmaExtensions {
  /** RDMA: the R_Key of our MR the sender's RDMA op used (a USE_ONCE MR is released on it). */
  rkey?: number;
  /** RDMA_DEST: the cookie the sender exposes, as recvmsg reports it (RDS_CMSG_RDMA_DEST). */
  destCookie?: bigint;
  /** RDMA_BYTES: how many bytes the op moved and which way (from the sender's point of view). */
  bytes?: { count: number; write: boolean; read: boolean };
}

/** The RDMA records of one message. */
export function decodeRdmaExtensions(exts: readonly RdsExtension[]): RdmaExtensions {
  const out: RdmaExtensions = {};
  for (const e of exts) {
    const dv = new DataView(e.data.buffer, e.data.byteOffset, e.data.byteLength);
    switch (e.type) {
      case RDS_EXTHDR_RDMA:
        out.rkey = dv.getUint32(0);
        break;
      case RDS_EXTHDR_RDMA_DEST:
        out.destCookie = rdmaCookie(dv.getUint32(0), dv.getUint32(4));
        break;
      case RDS_EXTHDR_RDMA_BYTES: {
        const f = e.data[4]!;
        out.bytes = {
          count: dv.getUint32(0),
          write: (f & RDS_FLAG_RDMA_WR_BYTES) !== 0,
          read: (f & RDS_FLAG_RDMA_RD_BYTES) !== 0,
        };
        break;
      }
      default:
        break;
    }
  }
  return out;
}
