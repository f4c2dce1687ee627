import { describe, expect, it } from 'vitest';
import { wire } from '../../lib/index.js';

const { FrameReader, RdsProtocolError, encodeHeader } = wire;

function frame(seq: number, payload: Buffer, flags = 0): Buffer {
  const b = Buffer.alloc(48 + payload.length);
  encodeHeader(b, 0, { sequence: seq, len: payload.length, sport: 5, dport: 6, flags });
  payload.copy(b, 48);
  return b;
}

describe('TCP stream framing (spec §2.3)', () => {
  const stream = Buffer.concat([
    frame(1, Buffer.from('hello')),
    frame(2, Buffer.alloc(0)),
    frame(3, Buffer.from('x'.repeat(100))),
    frame(0, Buffer.alloc(8192, 0xff), 1),
  ]);

  it('splits a stream cut at every byte boundary into the same frames', () => {
    for (let cut = 0; cut <= stream.length; cut++) {
      const got: [number, string][] = [];
      const r = new FrameReader((h, p) => got.push([h.readUInt32BE(4), p.toString('hex')]));
      r.push(stream.subarray(0, cut));
      r.push(stream.subarray(cut));
      expect(got.map((g) => g[0])).toEqual([1, 2, 3, 0]);
      expect(got[0]![1]).toBe(Buffer.from('hello').toString('hex'));
      expect(got[1]![1]).toBe('');
      expect(got[3]![1].length).toBe(16384);
      expect(r.idle).toBe(true);
    }
  });

  it('handles one byte at a time', () => {
    const got: number[] = [];
    const r = new FrameReader((h) => got.push(h.readUInt32BE(4)));
    for (let i = 0; i < stream.length; i++) r.push(stream.subarray(i, i + 1));
    expect(got).toEqual([1, 2, 3, 0]);
  });

  it('reports what is missing of a partial frame', () => {
    const r = new FrameReader(() => {});
    r.push(stream.subarray(0, 10));
    expect(r.remaining).toEqual([38, 0]);
    r.push(stream.subarray(10, 50));
    expect(r.remaining).toEqual([0, 3]);
  });

  it('rejects h_len above 1 MiB before allocating anything, and stays failed', () => {
    const h = Buffer.alloc(48);
    encodeHeader(h, 0, { sequence: 1, len: (1 << 20) + 1 });
    const r = new FrameReader(() => {});
    expect(() => r.push(h)).toThrow(RdsProtocolError);
    expect(() => r.push(Buffer.alloc(1))).toThrow(RdsProtocolError);
  });

  it('accepts exactly 1 MiB', () => {
    let n = -1;
    const r = new FrameReader((_h, p) => (n = p.length));
    r.push(frame(1, Buffer.alloc(1 << 20)));
    expect(n).toBe(1 << 20);
  });
});

describe('frame in progress (receive limits)', () => {
  const big = frame(9, Buffer.alloc(300 * 1024, 0x42));

  /** Feeds `bytes` through readBuffer()/filled() as a socket's onread would, up to `max` per read. */
  function feed(r: InstanceType<typeof FrameReader>, bytes: Buffer, max = 1 << 30): void {
    let off = 0;
    while (off < bytes.length) {
      const into = r.readBuffer();
      const n = Math.min(into.length, max, bytes.length - off);
      bytes.copy(into, 0, off, off + n);
      r.filled(n);
      off += n;
    }
  }

  it('partialPayload is h_len once the header is complete, in both reading modes', () => {
    for (const slab of [false, true]) {
      const got: number[] = [];
      const r = new FrameReader((_h, p) => got.push(p.length));
      const put = (b: Buffer): void => (slab ? feed(r, b) : r.push(b));
      put(big.subarray(0, 20));
      expect(r.partialPayload).toBe(0); // only part of the header
      put(big.subarray(20, 1000));
      expect(r.partialPayload).toBe(300 * 1024);
      put(big.subarray(1000));
      expect(r.partialPayload).toBe(0);
      expect(got).toEqual([300 * 1024]);
    }
  });

  it('while growth is held, a frame in progress gets no memory of its own, and completes once released', () => {
    const got: Buffer[] = [];
    const r = new FrameReader((_h, p) => got.push(Buffer.from(p)));
    // The first read fills the first slab (a small one: a new connection starts quiet) with the
    // header and part of the payload.
    const first = r.readBuffer();
    const n0 = first.length;
    big.copy(first, 0, 0, n0);
    r.filled(n0);
    r.holdGrowth = true;
    const next = r.readBuffer();
    // Room for one more read, not for the 300 KiB frame.
    expect(next.buffer.byteLength).toBeLessThan(100 * 1024);
    const n = Math.min(next.length, 4096);
    big.copy(next, 0, n0, n0 + n);
    r.filled(n);
    r.holdGrowth = false;
    feed(r, big.subarray(n0 + n), 64 * 1024);
    expect(got.length).toBe(1);
    expect(got[0]!.equals(big.subarray(48))).toBe(true);
  });
});

describe('read memory of a quiet connection', () => {
  /** One socket read: takes what readBuffer() offers, up to what `bytes` has left. */
  function read(r: InstanceType<typeof FrameReader>, bytes: Buffer): number {
    const into = r.readBuffer();
    const n = Math.min(into.length, bytes.length);
    bytes.copy(into, 0, 0, n);
    r.filled(n);
    return n;
  }

  it('a new connection reads its first frames (handshake, a message) into a 2 KiB slab, never a 64 KiB one', () => {
    const got: number[] = [];
    const r = new FrameReader((h) => got.push(h.readUInt32BE(4)));
    expect(r.readBuffer().length).toBeLessThanOrEqual(2048);
    for (let i = 0; i < 3; i++) {
      const f = frame(1 + i, Buffer.alloc(200, i));
      let off = 0;
      while (off < f.length) off += read(r, f.subarray(off));
      r.readBuffer();
      expect(r.slabBytes).toBeLessThanOrEqual(2048);
    }
    expect(got).toHaveLength(3);
  });

  it('after a read that ends between frames and took less than offered, no big slab is kept', () => {
    const got: number[] = [];
    const r = new FrameReader((h) => got.push(h.readUInt32BE(4)));
    // A burst: reads take all they are offered, so the slabs grow to full ones.
    const burst = Buffer.concat(Array.from({ length: 100 }, (_, i) => frame(1 + i, Buffer.alloc(1000, i))));
    let off = 0;
    let most = 0;
    while (off < burst.length) {
      off += read(r, burst.subarray(off));
      most = Math.max(most, r.slabBytes);
    }
    expect(most).toBeGreaterThanOrEqual(64 * 1024);
    expect(got).toHaveLength(100);
    // The burst's last read took less than offered and ended between frames: the big slab goes.
    const next = r.readBuffer();
    expect(r.slabBytes).toBeLessThanOrEqual(2048);
    expect(next.length).toBeLessThanOrEqual(2048);
  });

  it('a quiet connection reads frames of any size, split anyhow, into small slabs and grows for a stream', () => {
    const got: Buffer[] = [];
    const r = new FrameReader((_h, p) => got.push(Buffer.from(p)));
    const frames = [
      frame(1, Buffer.alloc(100, 1)),
      frame(2, Buffer.alloc(5000, 2)),
      frame(3, Buffer.alloc(1, 3)),
      frame(4, Buffer.alloc(70000, 4)),
    ];
    for (const f of frames) {
      // A frame at a time, as a peer that sends now and then: reads end where the frame ends.
      let off = 0;
      while (off < f.length) off += read(r, f.subarray(off));
      expect(r.idle).toBe(true);
      r.readBuffer();
      // A slab grown for a frame is kept while it is small; a bigger one is let go.
      expect(r.slabBytes).toBeLessThanOrEqual(8192);
    }
    expect(got.map((p) => [p.length, p[0]])).toEqual([
      [100, 1],
      [5000, 2],
      [1, 3],
      [70000, 4],
    ]);
    // A stream (every read takes all it is offered) goes back to full slabs.
    const stream = Buffer.concat(Array.from({ length: 200 }, (_, i) => frame(10 + i, Buffer.alloc(1000, i))));
    let off = 0;
    while (off < stream.length) off += read(r, stream.subarray(off));
    expect(got.length).toBe(4 + 200);
    expect(r.slabBytes).toBeGreaterThanOrEqual(64 * 1024);
    for (let i = 0; i < 200; i++) expect(got[4 + i]!.equals(Buffer.alloc(1000, i))).toBe(true);
  });
});
