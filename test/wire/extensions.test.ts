import { describe, expect, it } from 'vitest';
import { wire, constants } from '../../lib/index.js';

const { parseExtensions, packExtensions, npathsExtension, genNumExtension, sportIdxExtension, decodeHandshake } = wire;
const hex = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s.replace(/ /g, ''), 'hex'));

describe('extension headers (spec §1.4)', () => {
  it('packs the 7.0 probe contiguously: NPATHS, GEN_NUM, SPORT_IDX', () => {
    const area = packExtensions([npathsExtension(8), genNumExtension(0xdeadbeef), sportIdxExtension()]);
    expect(Buffer.from(area).toString('hex')).toBe('050008' + '06deadbeef' + '0800' + '000000000000');
  });

  it('parses the one-extension form a <=6.19 kernel writes', () => {
    const exts = parseExtensions(hex('05 0008 00' + '00'.repeat(12)));
    expect(exts).toHaveLength(1);
    expect(decodeHandshake(exts)).toEqual({ npaths: 8 });
  });

  it('parses several records back to back', () => {
    const hs = decodeHandshake(parseExtensions(hex('050004 0600000007 0800 000000000000')));
    expect(hs).toEqual({ npaths: 4, genNum: 7, sportIdx: true });
  });

  it('reads only the first record of the old UEK NONE-separated form, as mainline does', () => {
    const exts = parseExtensions(hex('050008 00 0600000007 00 00000000'));
    expect(exts.map((e) => e.type)).toEqual([constants.RDS_EXTHDR_NPATHS]);
  });

  it('stops at a type it does not know instead of guessing its length', () => {
    const exts = parseExtensions(hex('050002 0f01020304 0600000009 000000'));
    expect(exts.map((e) => e.type)).toEqual([constants.RDS_EXTHDR_NPATHS]);
  });

  it('stops when a record would run past the 16-byte area', () => {
    // NPATHS + GEN_NUM + CSUM(8 bytes) starting at offset 8 would need bytes 8..16
    const exts = parseExtensions(hex('050008 0600000001 09 aabbccddeeff00'));
    expect(exts.map((e) => e.type)).toEqual([constants.RDS_EXTHDR_NPATHS, constants.RDS_EXTHDR_GEN_NUM]);
  });

  it('fills all 16 bytes without a trailing NONE', () => {
    const area = packExtensions([
      { type: constants.RDS_EXTHDR_RDMA_DEST, data: hex('0102030405060708') },
      { type: constants.RDS_EXTHDR_VERSION, data: hex('00000301') },
      sportIdxExtension(),
    ]);
    expect(Buffer.from(area).toString('hex')).toBe('030102030405060708' + '0100000301' + '0800');
    expect(parseExtensions(area)).toHaveLength(3);
  });

  it('leaves out a record that does not fit, as the kernel does', () => {
    const area = packExtensions([
      { type: constants.RDS_EXTHDR_CSUM, data: hex('0000000000000000') },
      { type: constants.RDS_EXTHDR_RDMA_BYTES, data: hex('0000000000000000') },
      npathsExtension(1),
    ]);
    expect(parseExtensions(area).map((e) => e.type)).toEqual([constants.RDS_EXTHDR_CSUM, constants.RDS_EXTHDR_NPATHS]);
  });

  it('rejects records whose length does not match the type', () => {
    expect(() => packExtensions([{ type: constants.RDS_EXTHDR_NPATHS, data: hex('08') }])).toThrow(TypeError);
    expect(() => packExtensions([{ type: 42, data: hex('08') }])).toThrow(TypeError);
  });
});
