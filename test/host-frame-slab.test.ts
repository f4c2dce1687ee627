import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { feedChunk, OWN_ABOVE, SLAB_BYTES, SlabFrameParser } from '../lib/host/frame-slab.js';
import { C_REQ, encodeFrame, type Frame, HEADER_BYTES, MAX_FRAME_BYTES, ProtocolError } from '../lib/host/protocol.js';

/** One control frame as bytes: `sock` numbers it, its data is `size` bytes of a pattern. */
function frameBytes(sock: number, size: number): Buffer {
  return Buffer.concat(encodeFrame(C_REQ, sock, sock * 3, { n: sock }, pattern(sock, size)));
}

function pattern(sock: number, size: number): Buffer {
  const b = Buffer.allocUnsafe(size);
  for (let i = 0; i < size; i++) b[i] = (sock * 31 + i) & 0xff;
  return b;
}

/**
 * Plays a socket reading `stream` into the parser's memory: each read takes what `take` says of
 * what was offered (at least one byte), as the kernel hands a reader what has arrived.
 */
function readAll(p: SlabFrameParser, stream: Buffer, take: (offered: number, i: number) => number): Frame[] {
  const got: Frame[] = [];
  let i = 0;
  for (let off = 0; off < stream.length; i++) {
    const buf = p.readBuffer();
    const n = Math.max(1, Math.min(buf.length, stream.length - off, take(buf.length, i)));
    stream.copy(buf, 0, off, off + n);
    off += n;
    got.push(...p.filled(n));
  }
  return got;
}

function expectFrames(got: Frame[], sizes: number[]): void {
  expect(got.map((f) => f.sock)).toEqual(sizes.map((_, i) => i));
  got.forEach((f, i) => {
    expect(f.id).toBe(i * 3);
    expect(f.meta).toEqual({ n: i });
    expect(f.data.equals(pattern(i, sizes[i]!))).toBe(true);
  });
}

describe('SlabFrameParser: control frames read into our own memory', () => {
  it('hands up every frame intact however reads cut the stream (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.nat(300), fc.nat(5000), fc.integer({ min: OWN_ABOVE - 64, max: 200_000 })), {
          minLength: 1,
          maxLength: 25,
        }),
        fc.array(fc.integer({ min: 1, max: 300_000 }), { minLength: 1, maxLength: 50 }),
        (sizes, takes) => {
          const stream = Buffer.concat(sizes.map((n, i) => frameBytes(i, n)));
          const got = readAll(new SlabFrameParser(), stream, (_, i) => takes[i % takes.length]!);
          expectFrames(got, sizes);
        },
      ),
      { numRuns: 150, seed: 36 },
    );
  });

  it('reads the rest of a large frame into a buffer of exactly its size, copying only what came with its header', () => {
    const sizes = Array.from({ length: 8 }, () => 64 << 10);
    const stream = Buffer.concat(sizes.map((n, i) => frameBytes(i, n)));
    const p = new SlabFrameParser();
    const offers: number[] = [];
    const got = readAll(p, stream, (offered) => {
      offers.push(offered);
      return offered; // a stream: every read takes all it is offered
    });
    expectFrames(got, sizes);
    for (const f of got) {
      // Its own memory, exactly the frame: what the host node keeps by reference until the
      // peer acknowledges it (at most twice the frame, send-queue.ts queueWire).
      expect(f.raw.length).toBe(f.data.length + (f.data.byteOffset - f.raw.byteOffset));
      expect(f.raw.buffer.byteLength).toBe(f.raw.length);
    }
    // Each frame's header comes in a read of at most 1 KiB (the first in the 2 KiB slab of a new
    // connection): that is all that is copied of it; the rest is one read straight into its buffer.
    const headReads = offers.filter((o) => o < OWN_ABOVE);
    expect(headReads).toHaveLength(sizes.length);
    expect(headReads[0]).toBeLessThanOrEqual(2048);
    for (const o of headReads.slice(1)) expect(o).toBeLessThanOrEqual(1024);
    expect(offers).toHaveLength(2 * sizes.length);
  });

  it('hands small frames up as views of one slab, with no memory of their own per read', () => {
    const sizes = Array.from({ length: 40 }, (_, i) => 100 + i * 20);
    const stream = Buffer.concat(sizes.map((n, i) => frameBytes(i, n)));
    const got = readAll(new SlabFrameParser(), stream, () => 777);
    expectFrames(got, sizes);
    const slabs = new Set(got.map((f) => f.raw.buffer));
    // 40 frames, about 40 KiB, through reads of 777 bytes: a small slab first, then one of 64 KiB.
    expect(slabs.size).toBeLessThanOrEqual(3);
  });

  it('keeps only a small slab while the connection is idle', () => {
    const p = new SlabFrameParser();
    const stream = Buffer.concat(Array.from({ length: 30 }, (_, i) => frameBytes(i, 3000)));
    readAll(p, stream, (offered) => offered);
    expect(p.heldBytes).toBeGreaterThanOrEqual(SLAB_BYTES);
    // A request and its answer: a read shorter than offered, ending between frames.
    const one = frameBytes(30, 10);
    const buf = p.readBuffer();
    one.copy(buf);
    expect(p.filled(one.length)).toHaveLength(1);
    p.readBuffer();
    expect(p.heldBytes).toBeLessThanOrEqual(2048);
  });

  it('refuses a frame length out of bounds before allocating for it, and stays failed', () => {
    for (const len of [0, HEADER_BYTES - 5, MAX_FRAME_BYTES]) {
      const p = new SlabFrameParser();
      const buf = p.readBuffer();
      buf.writeUInt32BE(len, 0);
      expect(() => p.filled(4)).toThrow(ProtocolError);
      expect(p.heldBytes).toBeLessThanOrEqual(2048);
      // What still arrives while the connection is dropped is discarded.
      const next = p.readBuffer();
      next.fill(0);
      expect(p.filled(next.length)).toEqual([]);
    }
    const bad = Buffer.concat(encodeFrame(1, 0, 0, null));
    bad.write('[]', HEADER_BYTES);
    const p = new SlabFrameParser();
    expect(() => feedChunk(p, bad, (_, n) => p.filled(n))).toThrow(ProtocolError);
  });

  it('takes chunks a stream allocated (feedChunk) as the same frames', () => {
    const sizes = [10, 70_000, 0, 5000, 20_000, 1];
    const stream = Buffer.concat(sizes.map((n, i) => frameBytes(i, n)));
    const p = new SlabFrameParser();
    const got: Frame[] = [];
    for (let off = 0; off < stream.length; off += 9000)
      feedChunk(p, stream.subarray(off, off + 9000), (_, n) => got.push(...p.filled(n)));
    expectFrames(got, sizes);
  });
});
