import { describe, expect, it } from 'vitest';
import { wire } from '../../lib/index.js';

const base = { saddr: '10.1.2.3', daddr: '10.1.2.4', major: 3, minor: 1, minorMask: 3, tos: 0, ackSeq: 0, credit: 255 };

describe('IB connection private data (spec §7.1)', () => {
  it('encodes struct rds_ib_connect_private byte for byte (IPv4, 32 bytes, big-endian)', () => {
    const b = wire.encodeIbPrivateData({ ...base, ackSeq: 0x0102030405, credit: 0x10203 });
    expect(b.length).toBe(32);
    expect([...b.subarray(0, 16)]).toEqual([10, 1, 2, 3, 10, 1, 2, 4, 3, 1, 0, 3, 0, 0, 0, 0]);
    expect([...b.subarray(16, 24)]).toEqual([0, 0, 0, 1, 2, 3, 4, 5]);
    expect([...b.subarray(24, 32)]).toEqual([0, 1, 2, 3, 0, 0, 0, 0]);
    expect(wire.decodeIbPrivateData(b)).toEqual({ ...base, ackSeq: 0x0102030405, credit: 0x10203, rdsSocket: false });
  });

  it("rds-socket's mark in the reserved bytes 13..15 tells an rds-socket peer from a kernel (zeros there)", () => {
    const ours = wire.encodeIbPrivateData({ ...base, rdsSocket: true });
    expect([...ours.subarray(12, 16)]).toEqual([0, 0x52, 0x53, 0x4b]);
    expect(wire.decodeIbPrivateData(ours)?.rdsSocket).toBe(true);
    // A kernel's private data (ib_cm.c zeroes the reserved fields).
    expect(wire.decodeIbPrivateData(wire.encodeIbPrivateData(base))?.rdsSocket).toBe(false);
    // The rest of the struct reads the same with or without the mark.
    expect({ ...wire.decodeIbPrivateData(ours), rdsSocket: false }).toEqual(
      wire.decodeIbPrivateData(wire.encodeIbPrivateData(base)),
    );
  });

  it('negotiates as the passive kernel does', () => {
    const v = (d: Partial<typeof base>, len = 32) => wire.negotiateIbVersion({ ...base, ...d }, len);
    expect(v({})).toBe(0x0301); // mainline proposes 3.1
    expect(v({ major: 4, minor: 1, minorMask: 3 })).toBe(0x0401); // UEK proposes 4.1
    expect(v({ major: 4, minor: 0, minorMask: 1 })).toBe(0x0400);
    expect(v({ major: 4, minorMask: 4 })).toBe(0); // no common minor
    expect(v({ major: 3, minor: 0 })).toBe(0); // 3.0 is refused
    expect(v({ major: 0 })).toBe(0x0400);
    expect(v({}, 16)).toBe(0x0400); // short private data (an old peer)
  });

  it('short or missing data: addresses are needed to find the connection', () => {
    expect(wire.decodeIbPrivateData(new Uint8Array(7))).toBeNull();
    expect(wire.decodeIbPrivateData(Uint8Array.of(10, 0, 0, 1, 10, 0, 0, 2))).toMatchObject({
      saddr: '10.0.0.1',
      daddr: '10.0.0.2',
      major: 0,
      credit: 0,
    });
    expect(() => wire.encodeIbPrivateData({ ...base, saddr: '::1' })).toThrow();
  });
});
