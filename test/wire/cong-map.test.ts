import { describe, expect, it } from 'vitest';
import { CongMap } from '../../lib/core/cong-map.js';

describe('congestion map bit numbering (spec §5.1)', () => {
  it('port p is bit (p & 7) of byte (p >> 3), from the least-significant bit', () => {
    const m = new CongMap();
    m.set(0);
    m.set(9);
    m.set(4000);
    m.set(65535);
    expect(m.bits[0]).toBe(0x01);
    expect(m.bits[1]).toBe(0x02);
    expect(m.bits[500]).toBe(0x01); // 4000 = 8 * 500 + 0
    expect(m.bits[8191]).toBe(0x80);
    expect(m.test(4000)).toBe(true);
    expect(m.test(4001)).toBe(false);
  });

  it('reports ports that cleared as a 64-bit p % 64 mask when a map is applied', () => {
    const m = new CongMap();
    m.set(3);
    m.set(64 + 40);
    m.set(7);
    const next = Buffer.alloc(8192);
    next[0] = 0x80; // port 7 stays congested
    const cleared = m.apply(next);
    expect(cleared).toBe((1n << 3n) | (1n << 40n));
    expect(m.test(7)).toBe(true);
    expect(m.test(3)).toBe(false);
  });

  it('set and clear say whether anything changed', () => {
    const m = new CongMap();
    expect(m.set(5)).toBe(true);
    expect(m.set(5)).toBe(false);
    expect(m.clear(5)).toBe(true);
    expect(m.clear(5)).toBe(false);
    expect(m.isClear()).toBe(true);
  });
});
