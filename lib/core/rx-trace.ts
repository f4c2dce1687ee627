import { RdsError } from '../errors.js';

// SO_RDS_MSG_RXPATH_LATENCY and RDS_CMSG_RXPATH_LATENCY (af_rds.c rds_recv_track_latency,
// recv.c rds_cmsg_recv): which receive-path intervals a socket asks for, and the control message
// that reports them per message. The kernel stamps each message four times: header received (0),
// reassembly started (1), reassembly ended and queued to the socket (2), handed to recvmsg (3);
// trace point j is the time from stamp j to stamp j + 1, in nanoseconds.
//
// Here a transport hands the core whole frames (reassembly is the transport's), so the stamps are
// taken where the core sees a message: 0 when the transport hands the frame up (rds_recv_incoming),
// 1 when delivery to the socket begins (after the sequence, ack and ping checks), 2 when it is
// queued on the socket, 3 when recvmsg returns it. Stamps are taken only while some socket of the
// stack asks for them (RxTraceClock.sockets), so the receive path pays one compare otherwise.

/**
 * A stack's stamps for the frame it is handling now (delivery is synchronous from the transport's
 * hand-up to the socket's queue), taken only while `sockets` > 0.
 * @internal
 */
export class RxTraceClock {
  /** Sockets of the stack with SO_RDS_MSG_RXPATH_LATENCY on. */
  sockets = 0;
  /** Stamp 0 of the frame being handled. */
  frameAt = 0n;
  /** Stamp 1 of the frame being handled. */
  deliverAt = 0n;

  /** The three stamps of a message queued now to a tracing socket. */
  stamps(): [bigint, bigint, bigint] {
    const now = process.hrtime.bigint();
    return [this.frameAt || now, this.deliverAt || now, now];
  }
}

/** What RDS_CMSG_RXPATH_LATENCY carries: the trace points asked for and their intervals (ns). */
export interface RxTrace {
  /** rx_trace_pos: the trace points, in the order SO_RDS_MSG_RXPATH_LATENCY gave them. */
  positions: number[];
  /** rx_trace: for each point j, stamp j + 1 minus stamp j, in nanoseconds. */
  values: bigint[];
}

/**
 * recvmsg on a socket with SO_RDS_MSG_RXPATH_LATENCY: the message's trace, stamp 3 taken now. A
 * message without stamps (it was queued before the option was set, or by a host node that does not
 * stamp) reports zeros, as the kernel's stamps that were never taken subtract to garbage.
 */
export function rxTraceOf(points: readonly number[], stamps: readonly bigint[] | undefined): RxTrace {
  if (stamps === undefined) return { positions: [...points], values: points.map(() => 0n) };
  const all: RxStamps = [stamps[0]!, stamps[1]!, stamps[2]!, process.hrtime.bigint()];
  return { positions: [...points], values: rxTraceValues(points, all).map((v) => (v < 0n ? 0n : v)) };
}

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
 * for another length, more than 3 points, or a point of 3 or more (`onBadPoint` is called first:
 * the kernel turns the trace off then). [] turns the trace off.
 */
export function parseRxTraceOption(value: unknown, onBadPoint?: () => void): number[] {
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
    if (!Number.isInteger(p) || p < 0 || p >= RDS_MSG_RX_DGRAM_TRACE_MAX) {
      // The kernel has taken the count by then: a bad point leaves the trace off (rs_rx_traces = 0).
      onBadPoint?.();
      throw new RdsError('EFAULT', `SO_RDS_MSG_RXPATH_LATENCY: trace point ${String(p)} is not 0, 1 or 2`);
    }
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

/** A struct rds_rx_trace_so for the points, its 4 bytes as one number (count + pos[i] << 8(i + 1)): how a host node is told. */
export function packRxTrace(points: readonly number[]): number {
  let v = points.length;
  points.forEach((p, i) => (v += p * 2 ** (8 * (i + 1))));
  return v;
}

/** The struct rds_rx_trace_so packRxTrace() made (any other number gives bytes the option's checks refuse or take as given). */
export function unpackRxTrace(v: number): Uint8Array {
  return Uint8Array.of(v & 0xff, (v >>> 8) & 0xff, (v >>> 16) & 0xff, (v >>> 24) & 0xff);
}
