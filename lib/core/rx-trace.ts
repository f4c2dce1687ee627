import { RdsError } from '../errors.js';

// SO_RDS_MSG_RXPATH_LATENCY and RDS_CMSG_RXPATH_LATENCY (af_rds.c rds_recv_track_latency,
// recv.c rds_cmsg_recv): which receive-path intervals a socket asks for, and the control message
// that reports them per message. The kernel stamps each message four times: header received (0),
// reassembly started (1), reassembly ended (2), handed to recvmsg (3); trace point j is the time
// from stamp j to stamp j + 1, in nanoseconds.
//
// Not wired yet (the receive path is being rewritten): the hook this needs is described in
// docs/socket-api.md; these are the option's checks and the message's layout, tested on their own.

/** enum rds_message_rxpath_latency: header to datagram start, reassembly, delivery. */
export const RDS_MSG_RX_HDR_TO_DGRAM_START = 0;
export const RDS_MSG_RX_DGRAM_REASSEMBLE = 1;
export const RDS_MSG_RX_DGRAM_DELIVERED = 2;
export const RDS_MSG_RX_DGRAM_TRACE_MAX = 3;

/** sizeof(struct rds_rx_trace_so), the only option length the kernel takes. */
export const RX_TRACE_SO_BYTES = 4;
/** sizeof(struct rds_cmsg_rx_trace): u8 count, u8 positions[3], 4 bytes padding, u64 values[3]. */
export const RX_TRACE_CMSG_BYTES = 32;

/**
 * The trace points an SO_RDS_MSG_RXPATH_LATENCY value asks for: a 4-byte struct rds_rx_trace_so
 * (u8 rx_traces, u8 rx_trace_pos[3]) or an array of trace points. As the kernel answers, EFAULT
 * for another length, more than 3 points, or a point of 3 or more. [] turns the trace off.
 */
export function parseRxTraceOption(value: unknown): number[] {
  let points: number[];
  if (value instanceof Uint8Array) {
    if (value.length !== RX_TRACE_SO_BYTES)
      throw new RdsError(
        'EFAULT',
        `SO_RDS_MSG_RXPATH_LATENCY takes a ${RX_TRACE_SO_BYTES}-byte struct rds_rx_trace_so, got ${value.length} bytes`,
      );
    if (value[0]! > RDS_MSG_RX_DGRAM_TRACE_MAX)
      throw new RdsError(
        'EFAULT',
        `SO_RDS_MSG_RXPATH_LATENCY: rx_traces ${value[0]} is more than ${RDS_MSG_RX_DGRAM_TRACE_MAX}`,
      );
    points = [...value.subarray(1, 1 + value[0]!)];
  } else if (Array.isArray(value)) {
    if (value.length > RDS_MSG_RX_DGRAM_TRACE_MAX)
      throw new RdsError(
        'EFAULT',
        `SO_RDS_MSG_RXPATH_LATENCY takes at most ${RDS_MSG_RX_DGRAM_TRACE_MAX} trace points, got ${value.length}`,
      );
    points = value as number[];
  } else {
    throw new RdsError(
      'EFAULT',
      'SO_RDS_MSG_RXPATH_LATENCY takes a struct rds_rx_trace_so (4 bytes) or an array of trace points',
    );
  }
  for (const p of points)
    if (!Number.isInteger(p) || p < 0 || p >= RDS_MSG_RX_DGRAM_TRACE_MAX)
      throw new RdsError('EFAULT', `SO_RDS_MSG_RXPATH_LATENCY: trace point ${String(p)} is not 0, 1 or 2`);
  return points;
}

/** One message's four receive stamps (nanoseconds, any common origin: process.hrtime.bigint()). */
export type RxStamps = readonly [header: bigint, reassemblyStart: bigint, reassemblyEnd: bigint, delivered: bigint];

/** The intervals asked for, in the order asked: point j is stamps[j + 1] - stamps[j]. */
export function rxTraceValues(points: readonly number[], stamps: RxStamps): bigint[] {
  return points.map((j) => stamps[j + 1]! - stamps[j]!);
}

/** struct rds_cmsg_rx_trace for a message (host order: little-endian). */
export function encodeRxTraceCmsg(points: readonly number[], stamps: RxStamps): Buffer {
  const b = Buffer.alloc(RX_TRACE_CMSG_BYTES);
  b[0] = points.length;
  points.forEach((p, i) => (b[1 + i] = p));
  rxTraceValues(points, stamps).forEach((v, i) => b.writeBigUInt64LE(v < 0n ? 0n : v, 8 + 8 * i));
  return b;
}
