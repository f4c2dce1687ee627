import { describe, expect, it } from 'vitest';
import {
  encodeRxTraceCmsg,
  parseRxTraceOption,
  RDS_MSG_RX_DGRAM_DELIVERED,
  RDS_MSG_RX_DGRAM_REASSEMBLE,
  RDS_MSG_RX_HDR_TO_DGRAM_START,
  rxTraceValues,
} from '../lib/core/rx-trace.js';

// SO_RDS_MSG_RXPATH_LATENCY's checks and RDS_CMSG_RXPATH_LATENCY's layout (issue 38), on their
// own: the receive path does not stamp messages yet.
describe('receive-path latency trace', () => {
  it('takes struct rds_rx_trace_so or an array; EFAULT for what the kernel refuses', () => {
    expect(parseRxTraceOption(Buffer.from([2, 2, 0, 9]))).toEqual([2, 0]);
    expect(parseRxTraceOption([1])).toEqual([1]);
    expect(parseRxTraceOption(Buffer.from([0, 0, 0, 0]))).toEqual([]);
    for (const bad of [
      Buffer.alloc(3),
      Buffer.alloc(5),
      Buffer.from([4, 0, 0, 0]),
      Buffer.from([1, 3, 0, 0]),
      [0, 1, 2, 0],
      [3],
      [-1],
      7,
    ])
      expect(() => parseRxTraceOption(bad)).toThrow(expect.objectContaining({ code: 'EFAULT' }));
  });

  it('reports stamp j+1 minus stamp j for each point asked, in the order asked, in the 32-byte cmsg', () => {
    const stamps = [1000n, 1250n, 1900n, 5000n] as const;
    const points = [RDS_MSG_RX_DGRAM_DELIVERED, RDS_MSG_RX_HDR_TO_DGRAM_START, RDS_MSG_RX_DGRAM_REASSEMBLE];
    expect(rxTraceValues(points, stamps)).toEqual([3100n, 250n, 650n]);
    const c = encodeRxTraceCmsg(points, stamps);
    expect(c).toHaveLength(32);
    expect([...c.subarray(0, 8)]).toEqual([3, 2, 0, 1, 0, 0, 0, 0]);
    expect([c.readBigUInt64LE(8), c.readBigUInt64LE(16), c.readBigUInt64LE(24)]).toEqual([3100n, 250n, 650n]);
    const one = encodeRxTraceCmsg([1], stamps);
    expect(one[0]).toBe(1);
    expect(one.readBigUInt64LE(8)).toBe(650n);
    expect(one.readBigUInt64LE(16)).toBe(0n);
  });
});
