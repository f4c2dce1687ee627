import { RdsProtocolError } from './frame-reader.js';
import { readU64, writeU64 } from './header.js';

/** struct rds_ib_connect_private, IPv4 form: 32 bytes, big-endian fields (spec §7.1). */
export const RDS_IB_PRIVATE_DATA_SIZE = 32;
/** The protocol mainline proposes (RDS_PROTOCOL_VERSION) and the minors it supports. */
export const RDS_PROTOCOL_3_1 = 0x0301;
/** RDS/IB protocol version 4.0, accepted from a peer. */
export const RDS_PROTOCOL_4_0 = 0x0400;
/** The minor versions of 3.x mainline supports, as a bit mask. */
export const RDS_IB_SUPPORTED_PROTOCOLS = 0x0003;
/**
 * rds-socket's mark in the reserved bytes 13..15 ("RSK"), which kernels send as zero and ignore:
 * it tells an rds-socket peer from a kernel before any frame, so a kernel never gets the
 * multipath probe (6.1 answers one received over IB with a WARN_ON).
 */
export const RDS_SOCKET_IB_MARK = Buffer.from('RSK', 'latin1');

/** The fields of struct rds_ib_connect_private. */
export interface IbPrivateData {
  saddr: string;
  daddr: string;
  major: number;
  minor: number;
  minorMask: number;
  tos: number;
  ackSeq: number;
  credit: number;
  /** The sender is rds-socket (RDS_SOCKET_IB_MARK in the reserved bytes); kernels: false. */
  rdsSocket?: boolean;
}

function ipv4(buf: Uint8Array, off: number): string {
  return `${buf[off]}.${buf[off + 1]}.${buf[off + 2]}.${buf[off + 3]}`;
}

function putIpv4(buf: Buffer, off: number, addr: string): void {
  const parts = addr.split('.').map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) {
    throw new RdsProtocolError(`not an IPv4 address: ${addr}`);
  }
  for (let i = 0; i < 4; i++) buf[off + i] = parts[i]!;
}

/** Encodes the connection private data an RDS/IB connect request or accept carries. */
export function encodeIbPrivateData(d: IbPrivateData): Buffer {
  const b = Buffer.alloc(RDS_IB_PRIVATE_DATA_SIZE);
  putIpv4(b, 0, d.saddr);
  putIpv4(b, 4, d.daddr);
  b[8] = d.major;
  b[9] = d.minor;
  b.writeUInt16BE(d.minorMask, 10);
  b[12] = d.tos;
  if (d.rdsSocket === true) RDS_SOCKET_IB_MARK.copy(b, 13);
  writeU64(b, 16, d.ackSeq);
  b.writeUInt32BE(d.credit >>> 0, 24);
  return b;
}

/**
 * Reads what the peer sent. Short data (older peers) keeps what is there; fields past the end
 * read as 0. Less than the two addresses cannot identify a connection: null.
 */
export function decodeIbPrivateData(buf: Uint8Array): IbPrivateData | null {
  if (buf.length < 8) return null;
  const b = Buffer.alloc(RDS_IB_PRIVATE_DATA_SIZE);
  b.set(buf.subarray(0, RDS_IB_PRIVATE_DATA_SIZE));
  return {
    saddr: ipv4(b, 0),
    daddr: ipv4(b, 4),
    major: b[8]!,
    minor: b[9]!,
    minorMask: b.readUInt16BE(10),
    tos: b[12]!,
    ackSeq: readU64(b, 16),
    credit: b.readUInt32BE(24),
    rdsSocket: b.compare(RDS_SOCKET_IB_MARK, 0, 3, 13, 16) === 0,
  };
}

/**
 * The passive side's choice (rds_ib_protocol_compatible): short data or major 0 means 4.0; major
 * 4 takes the highest minor both support; exactly 3.1 stays 3.1; anything else is refused (0).
 */
export function negotiateIbVersion(d: IbPrivateData, length: number): number {
  if (length < RDS_IB_PRIVATE_DATA_SIZE || d.major === 0) return RDS_PROTOCOL_4_0;
  if (d.major === 4) {
    const common = d.minorMask & RDS_IB_SUPPORTED_PROTOCOLS;
    if (common !== 0) return (4 << 8) | (31 - Math.clz32(common));
    return 0;
  }
  if (d.major === 3 && d.minor === 1) return RDS_PROTOCOL_3_1;
  return 0;
}
