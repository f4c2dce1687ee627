import { describe, expect, it } from 'vitest';
import { wire, constants } from '../../lib/index.js';

const { encodeHeader, decodeHeader, headerChecksum, verifyHeaderChecksum } = wire;

// A header built by hand from spec §1.1: seq 0x001a030405060708, ack 0x0011121314151617,
// len 0x21222324, sport 0x3132, dport 0x4142, flags 0x04, credit 0x07, csum 0, exthdr NPATHS=8.
const VECTOR = Buffer.from(
  '001a030405060708' +
    '0011121314151617' +
    '21222324' +
    '3132' +
    '4142' +
    '04' +
    '07' +
    '00000000' +
    '0000' +
    '050008' +
    '00'.repeat(13),
  'hex',
);

describe('RDS header (spec §1.1)', () => {
  it('is 48 bytes with big-endian fields at the kernel offsets', () => {
    expect(VECTOR.length).toBe(constants.RDS_HEADER_SIZE);
    const h = decodeHeader(VECTOR);
    expect(h.sequence).toBe(0x001a030405060708);
    expect(h.ack).toBe(0x0011121314151617);
    expect(h.len).toBe(0x21222324);
    expect(h.sport).toBe(0x3132);
    expect(h.dport).toBe(0x4142);
    expect(h.flags).toBe(constants.RDS_FLAG_RETRANSMITTED);
    expect(h.credit).toBe(7);
    expect(h.csum).toBe(0);
    expect(Buffer.from(h.exthdr).toString('hex')).toBe('050008' + '00'.repeat(13));
  });

  it('encodes back to the same bytes', () => {
    const h = decodeHeader(VECTOR);
    const out = Buffer.alloc(48, 0xee);
    encodeHeader(out, 0, h);
    expect(out.equals(VECTOR)).toBe(true);
  });

  it('zero-fills padding and the extension area when none is given', () => {
    const out = Buffer.alloc(48, 0xff);
    encodeHeader(out, 0, { sequence: 1, len: 5, sport: 4000, dport: 4001 });
    expect(out.toString('hex')).toBe(
      '0000000000000001' +
        '0000000000000000' +
        '00000005' +
        '0fa0' +
        '0fa1' +
        '00' +
        '00' +
        '00000000' +
        '0000' +
        '00'.repeat(16),
    );
  });

  it('encodes a congestion-map header exactly as the kernel sends it', () => {
    const out = Buffer.alloc(48);
    encodeHeader(out, 0, { len: 8192, flags: constants.RDS_FLAG_CONG_BITMAP });
    expect(out.toString('hex')).toBe('00'.repeat(16) + '00002000' + '0000' + '0000' + '01' + '00'.repeat(23));
  });

  it('computes the RFC 1071 checksum the IB transport uses and verifies it', () => {
    const h = Buffer.from(VECTOR);
    const c = headerChecksum(h);
    h.writeUInt16BE(c, 30);
    expect(verifyHeaderChecksum(h)).toBe(true);
    // the one's-complement sum over all 48 bytes, checksum included, folds to 0xffff
    let sum = 0;
    for (let i = 0; i < 48; i += 2) sum += h.readUInt16BE(i);
    while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
    expect(sum).toBe(0xffff);
    h[0] ^= 1;
    expect(verifyHeaderChecksum(h)).toBe(false);
    h.writeUInt16BE(0, 30);
    expect(verifyHeaderChecksum(h)).toBe(true); // zero means "not present"
  });
});
