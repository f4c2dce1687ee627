import { isIPv4 } from 'node:net';
import { addressKey } from './address.js';
import type { StackInfo } from './info.js';
import type { ConnectionInfo, MessageInfo, PathInfo, SocketInfo } from './types.js';

// The binary records of getsockopt(SOL_RDS, RDS_INFO_*) (uapi linux/rds.h, all packed but the
// RDMA ones), built from the same StackInfo rds-info's control endpoint serves (info.ts). Integers
// the kernel keeps in host order are written little-endian (every platform rds-socket builds
// for); addresses and ports are in network order, as in the kernel's structs.

/** One RDS_INFO_* answer: the size of each record and the records, back to back. */
export interface InfoRecords {
  each: number;
  records: Buffer[];
}

/** rds_info_connection.flags / rds6_info_connection.flags. */
export const RDS_INFO_CONNECTION_FLAG_SENDING = 0x01;
export const RDS_INFO_CONNECTION_FLAG_CONNECTING = 0x02;
export const RDS_INFO_CONNECTION_FLAG_CONNECTED = 0x04;

/** The transport names the kernel's records carry (TRANSNAMSIZ 16, NUL-padded). */
const KERNEL_TRANSPORT_NAME: Record<string, string> = { ib: 'infiniband', tcp: 'tcp', loopback: 'loopback' };

/** The 16 bytes of an address, IPv4 as v4-mapped (in6_addr), network order. */
function in6(a: string): Buffer {
  return Buffer.from(addressKey(a), 'hex');
}

/** The 4 bytes of an IPv4 address (__be32). */
function in4(a: string): Buffer {
  return in6(a).subarray(12);
}

/** Two addresses back to back at `off` (in6_addr or __be32 each); returns the offset past them. */
function addrs(b: Buffer, off: number, first: string, second: string, v6: boolean): number {
  const put = v6 ? in6 : in4;
  put(first).copy(b, off);
  put(second).copy(b, off + (v6 ? 16 : 4));
  return off + (v6 ? 32 : 8);
}

function u64(b: Buffer, off: number, v: number): void {
  b.writeBigUInt64LE(BigInt(Math.max(0, Math.trunc(v))), off);
}

/** A u32 the kernel keeps as a TCP sequence number: the low 32 bits. */
function u32(b: Buffer, off: number, v: number): void {
  b.writeUInt32LE(Math.trunc(v) >>> 0, off);
}

function name(b: Buffer, off: number, size: number, s: string): void {
  b.write(s.slice(0, size - 1), off, size - 1, 'latin1');
}

function connFlags(p: PathInfo): number {
  // SENDING is the kernel's "a thread is inside rds_send_xmit now": a reader on this event loop
  // never runs during a transmit, so it is never set, as a kernel reader almost never sees it.
  if (p.state === 'UP') return RDS_INFO_CONNECTION_FLAG_CONNECTED;
  if (p.state === 'CONNECTING') return RDS_INFO_CONNECTION_FLAG_CONNECTING;
  return 0;
}

/** rds_info_counter[]: name[32], u64 value, in the order rds-info prints them. */
export function counterRecords(info: StackInfo): InfoRecords {
  return {
    each: 40,
    records: Object.entries(info.counters).map(([n, v]) => {
      const b = Buffer.alloc(40);
      name(b, 0, 32, n);
      u64(b, 32, v);
      return b;
    }),
  };
}

/** The kernel lists path 0 of each connection (rds_conn_info_visitor reads c_path[0]). */
function firstPath(c: ConnectionInfo): PathInfo | undefined {
  return c.paths.find((p) => p.index === 0) ?? c.paths[0];
}

/** rds_info_connection[] (v6 false: IPv4 connections only) or rds6_info_connection[] (all). */
export function connectionRecords(info: StackInfo, v6: boolean): InfoRecords {
  const each = v6 ? 65 : 42;
  const records: Buffer[] = [];
  for (const c of info.connections) {
    if (!v6 && !isIPv4(c.localAddress)) continue;
    const p = firstPath(c);
    if (p === undefined) continue;
    const b = Buffer.alloc(each);
    u64(b, 0, p.nextTxSeq);
    u64(b, 8, p.nextRxSeq);
    const t = addrs(b, 16, c.localAddress, c.peerAddress, v6);
    name(b, t, 16, KERNEL_TRANSPORT_NAME[c.transport] ?? c.transport);
    b[t + 16] = connFlags(p);
    // v4 only: c_tos (rds6_info_connection has none). TCP connections carry 0 (every TOS maps to 0).
    if (!v6) b[t + 17] = c.tos ?? 0;
    records.push(b);
  }
  return { each, records };
}

/** rds_info_message[] / rds6_info_message[] of one queue (send, retransmit or receive). */
export function messageRecords(list: MessageInfo[], v6: boolean): InfoRecords {
  const each = v6 ? 50 : 26;
  const records: Buffer[] = [];
  for (const m of list) {
    if (!v6 && !isIPv4(m.localAddress)) continue;
    const b = Buffer.alloc(each);
    u64(b, 0, m.seq);
    u32(b, 8, m.bytes);
    const p = addrs(b, 12, m.localAddress, m.peerAddress, v6);
    b.writeUInt16BE(m.localPort, p);
    b.writeUInt16BE(m.peerPort, p + 2);
    // flags (ACK / FAST_ACK: the kernel fills 0) and tos (0) stay 0.
    records.push(b);
  }
  return { each, records };
}

/** rds_info_socket[] (IPv4-bound sockets) / rds6_info_socket[] (all bound sockets). */
export function socketRecords(sockets: SocketInfo[], v6: boolean): InfoRecords {
  const each = v6 ? 52 : 28;
  const records: Buffer[] = [];
  for (const s of sockets) {
    if (!v6 && !isIPv4(s.boundAddress)) continue;
    const b = Buffer.alloc(each);
    u32(b, 0, s.sndbuf);
    // An unconnected socket shows the all-zero address (its SocketInfo says 0.0.0.0 or ::).
    const unconnected = s.connectedPort === 0 && (s.connectedAddress === '0.0.0.0' || s.connectedAddress === '::');
    const p = addrs(b, 4, s.boundAddress, unconnected ? '0.0.0.0' : s.connectedAddress, v6);
    if (unconnected && v6) b.fill(0, 4 + 16, 4 + 32);
    b.writeUInt16BE(s.boundPort, p);
    b.writeUInt16BE(s.connectedPort, p + 2);
    u32(b, p + 4, s.rcvbuf);
    u64(b, p + 8, s.inode);
    records.push(b);
  }
  return { each, records };
}

function num(t: Record<string, unknown> | null, k: string): number {
  const v = t?.[k];
  return typeof v === 'number' ? v : 0;
}

/**
 * rds_info_tcp_socket[] / rds6_info_tcp_socket[]: one per TCP path with a socket. The kernel's
 * three u32 are TCP sequence numbers; here they are byte counts of the same TCP socket (what was
 * written, and what of it the kernel took), mod 2^32, so their differences mean what the
 * kernel's do (bytes written not yet taken by TCP).
 */
export function tcpSocketRecords(info: StackInfo, v6: boolean): InfoRecords {
  const each = v6 ? 64 : 41;
  const records: Buffer[] = [];
  for (const c of info.connections) {
    if (c.transport !== 'tcp' || (!v6 && !isIPv4(c.localAddress))) continue;
    for (const p of c.paths) {
      const t = p.transport;
      if (t === null || typeof t.localPort !== 'number') continue;
      const b = Buffer.alloc(each);
      const alen = v6 ? 16 : 4;
      (v6 ? in6 : in4)(p.source).copy(b, 0);
      b.writeUInt16BE(num(t, 'localPort'), alen);
      (v6 ? in6 : in4)(p.destination).copy(b, alen + 2);
      b.writeUInt16BE(num(t, 'peerPort'), 2 * alen + 2);
      const o = 2 * alen + 4;
      u64(b, o, num(t, 'hdrRemaining'));
      u64(b, o + 8, num(t, 'dataRemaining'));
      const written = num(t, 'bytesWritten');
      u32(b, o + 16, written);
      u32(b, o + 20, written);
      u32(b, o + 24, written - num(t, 'writeQueued'));
      // v4 only: tos (0: TCP maps every TOS to 0).
      records.push(b);
    }
  }
  return { each, records };
}

/**
 * rds_info_rdma_connection[] / rds6_info_rdma_connection[]: one per IB connection. The GIDs and
 * the kernel's MR pool figures have no counterpart in the userspace IB transport and are 0; the
 * ring sizes are the path's when the transport reports them.
 */
export function ibConnectionRecords(info: StackInfo, v6: boolean): InfoRecords {
  const each = v6 ? 92 : 68;
  const records: Buffer[] = [];
  for (const c of info.connections) {
    // The IB transport's name is the kernel's, 'infiniband' ('ib': what SO_RDS_TRANSPORT calls it).
    if ((c.transport !== 'infiniband' && c.transport !== 'ib') || (!v6 && !isIPv4(c.localAddress))) continue;
    const p = firstPath(c);
    const b = Buffer.alloc(each);
    const o = addrs(b, 0, c.localAddress, c.peerAddress, v6) + 32; // past src_gid[16], dst_gid[16]
    const t = p?.transport ?? null;
    u32(b, o, num(t, 'maxSendWr'));
    u32(b, o + 4, num(t, 'maxRecvWr'));
    u32(b, o + 8, num(t, 'maxSendSge'));
    // rdma_mr_max, rdma_mr_size (o + 12, o + 16) and cache_allocs (o + 24): 0. tos, and sl as
    // rds_rdma derives the path's service level from it (TOS_TO_SL: the low 4 bits).
    b[o + 20] = c.tos ?? 0;
    b[o + 21] = (c.tos ?? 0) & 0x0f;
    records.push(b);
  }
  return { each, records };
}
