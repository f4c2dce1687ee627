import {
  RDS_INFO_CONNECTIONS,
  RDS_INFO_COUNTERS,
  RDS_INFO_FIRST,
  RDS_INFO_IB_CONNECTIONS,
  RDS_INFO_LAST,
  RDS_INFO_RECV_MESSAGES,
  RDS_INFO_RETRANS_MESSAGES,
  RDS_INFO_SEND_MESSAGES,
  RDS_INFO_SOCKETS,
  RDS_INFO_TCP_SOCKETS,
  RDS6_INFO_CONNECTIONS,
  RDS6_INFO_IB_CONNECTIONS,
  RDS6_INFO_RECV_MESSAGES,
  RDS6_INFO_RETRANS_MESSAGES,
  RDS6_INFO_SEND_MESSAGES,
  RDS6_INFO_SOCKETS,
  RDS6_INFO_TCP_SOCKETS,
} from '../constants.js';
import { RdsError } from '../errors.js';
import { RdsInfoSpaceError, type RdsInfoResult } from './info-result.js';
import type { StackInfo } from './info.js';
import {
  connectionRecords,
  counterRecords,
  ibConnectionRecords,
  type InfoRecords,
  messageRecords,
  socketRecords,
  tcpSocketRecords,
} from './info-records.js';

export { RdsInfoSpaceError, type RdsInfoResult };

// getsockopt(SOL_RDS, RDS_INFO_*) with the kernel's calling convention (info.c
// rds_info_getsockopt): the caller's buffer receives every record or none; the answer is the size
// of one record and the bytes the records take (the kernel's return value and *optlen); a buffer
// too small is ENOSPC carrying the length needed, so a probe with an empty buffer finds it.

const NAMES: Record<number, string> = {
  [RDS_INFO_COUNTERS]: 'RDS_INFO_COUNTERS',
  [RDS_INFO_CONNECTIONS]: 'RDS_INFO_CONNECTIONS',
  [RDS_INFO_SEND_MESSAGES]: 'RDS_INFO_SEND_MESSAGES',
  [RDS_INFO_RETRANS_MESSAGES]: 'RDS_INFO_RETRANS_MESSAGES',
  [RDS_INFO_RECV_MESSAGES]: 'RDS_INFO_RECV_MESSAGES',
  [RDS_INFO_SOCKETS]: 'RDS_INFO_SOCKETS',
  [RDS_INFO_TCP_SOCKETS]: 'RDS_INFO_TCP_SOCKETS',
  [RDS_INFO_IB_CONNECTIONS]: 'RDS_INFO_IB_CONNECTIONS',
  [RDS6_INFO_CONNECTIONS]: 'RDS6_INFO_CONNECTIONS',
  [RDS6_INFO_SEND_MESSAGES]: 'RDS6_INFO_SEND_MESSAGES',
  [RDS6_INFO_RETRANS_MESSAGES]: 'RDS6_INFO_RETRANS_MESSAGES',
  [RDS6_INFO_RECV_MESSAGES]: 'RDS6_INFO_RECV_MESSAGES',
  [RDS6_INFO_SOCKETS]: 'RDS6_INFO_SOCKETS',
  [RDS6_INFO_TCP_SOCKETS]: 'RDS6_INFO_TCP_SOCKETS',
  [RDS6_INFO_IB_CONNECTIONS]: 'RDS6_INFO_IB_CONNECTIONS',
};

/** Whether `optname` is in the kernel's RDS_INFO_FIRST..RDS_INFO_LAST range (getsockopt routes it here). */
export function isInfoOption(optname: number): boolean {
  return optname >= RDS_INFO_FIRST && optname <= RDS_INFO_LAST;
}

/** The records of one RDS_INFO_* request, or null for a number with no handler (10002, 10009, 10010). */
export function infoRecords(info: StackInfo, optname: number): InfoRecords | null {
  switch (optname) {
    case RDS_INFO_COUNTERS:
      return counterRecords(info);
    case RDS_INFO_CONNECTIONS:
    case RDS6_INFO_CONNECTIONS:
      return connectionRecords(info, optname === RDS6_INFO_CONNECTIONS);
    case RDS_INFO_SEND_MESSAGES:
    case RDS6_INFO_SEND_MESSAGES:
      return messageRecords(info.sendQueue, optname === RDS6_INFO_SEND_MESSAGES);
    case RDS_INFO_RETRANS_MESSAGES:
    case RDS6_INFO_RETRANS_MESSAGES:
      return messageRecords(info.retransQueue, optname === RDS6_INFO_RETRANS_MESSAGES);
    case RDS_INFO_RECV_MESSAGES:
    case RDS6_INFO_RECV_MESSAGES:
      return messageRecords(info.recvQueue, optname === RDS6_INFO_RECV_MESSAGES);
    case RDS_INFO_SOCKETS:
    case RDS6_INFO_SOCKETS:
      return socketRecords(info.sockets, optname === RDS6_INFO_SOCKETS);
    case RDS_INFO_TCP_SOCKETS:
    case RDS6_INFO_TCP_SOCKETS:
      return tcpSocketRecords(info, optname === RDS6_INFO_TCP_SOCKETS);
    case RDS_INFO_IB_CONNECTIONS:
    case RDS6_INFO_IB_CONNECTIONS:
      return ibConnectionRecords(info, optname === RDS6_INFO_IB_CONNECTIONS);
    default:
      return null;
  }
}

/**
 * getsockopt(SOL_RDS, optname, buffer) for optname in RDS_INFO_FIRST..RDS_INFO_LAST. `info` is read
 * only when the request is valid. Throws ENOPROTOOPT for the numbers the kernel has no handler
 * for, EINVAL for a buffer that is not a Uint8Array, and RdsInfoSpaceError (ENOSPC, `length`
 * needed) when the records do not fit; the buffer is then left as it was.
 */
export function infoGetsockopt(info: () => StackInfo, optname: number, buffer: unknown): RdsInfoResult {
  if (!(buffer instanceof Uint8Array))
    throw new RdsError(
      'EINVAL',
      `getsockopt(SOL_RDS, ${NAMES[optname] ?? optname}) takes a Uint8Array to fill (length 0 probes the size needed)`,
    );
  if (!(optname in NAMES)) {
    if (isInfoOption(optname))
      throw new RdsError('ENOPROTOOPT', `RDS_INFO request ${optname} has no handler (none in the kernel either)`);
    throw new RdsError('ENOPROTOOPT', `${optname} is not an RDS_INFO_* request`);
  }
  const r = infoRecords(info(), optname)!;
  const length = r.each * r.records.length;
  if (length > buffer.length) throw new RdsInfoSpaceError(length, buffer.length, NAMES[optname]!);
  let off = 0;
  for (const rec of r.records) {
    buffer.set(rec, off);
    off += rec.length;
  }
  return { recordSize: r.each, length };
}

/**
 * getsockopt(SOL_RDS, RDS_INFO_*) on a socket attached to a host node: getsockopt answers
 * synchronously and the records are in the node's process, so the call cannot wait for them;
 * sock.rdsInfo() can.
 */
export function infoNeedsAwait(optname: number): RdsError {
  return new RdsError(
    'EOPNOTSUPP',
    `getsockopt(SOL_RDS, ${optname}) cannot answer synchronously on a socket attached to a host node (its records are the node's): use await sock.rdsInfo(${optname}, buffer)`,
  );
}
