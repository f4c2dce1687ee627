import { describe, expect, it } from 'vitest';
import { encodeFrame, FrameParser, MAX_FRAME_BYTES, ProtocolError } from '../lib/host/protocol.js';

describe('host node control framing', () => {
  it('reassembles frames however the stream is cut, payload and meta intact', () => {
    const frames = Array.from({ length: 300 }, (_, i) =>
      Buffer.concat(encodeFrame(i % 30, i, i * 7, { i, s: 'x'.repeat(i % 50) }, Buffer.alloc(i * 37, i & 0xff))),
    );
    const stream = Buffer.concat(frames);
    let seed = 7;
    const p = new FrameParser();
    const got = [];
    for (let off = 0; off < stream.length; ) {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      const n = 1 + (seed % 3000);
      got.push(...p.push(stream.subarray(off, off + n)));
      off += n;
    }
    expect(got).toHaveLength(300);
    got.forEach((f, i) => {
      expect(f).toMatchObject({ type: i % 30, sock: i, id: i * 7, meta: { i, s: 'x'.repeat(i % 50) } });
      expect(f.data.equals(Buffer.alloc(i * 37, i & 0xff))).toBe(true);
    });
  });

  it('rejects lengths out of bounds and metas that are not JSON objects', () => {
    const big = Buffer.alloc(4);
    big.writeUInt32BE(MAX_FRAME_BYTES, 0);
    expect(() => new FrameParser().push(big)).toThrow(ProtocolError);
    const f = Buffer.concat(encodeFrame(1, 0, 0, null));
    f.write('[]', 17);
    expect(() => new FrameParser().push(f)).toThrow(ProtocolError);
    const g = Buffer.concat(encodeFrame(1, 0, 0, { a: 1 }));
    g.writeUInt32BE(1 << 20, 13);
    expect(() => new FrameParser().push(g)).toThrow(ProtocolError);
  });
});
