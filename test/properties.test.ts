import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { RdsError, RdsSocket, RdsStack, constants, wire } from '../lib/index.js';
import { TEST_TCP_PORT } from './helpers.js';

const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
afterAll(() => stack.close());

describe('wire properties', () => {
  const header = fc.record({
    sequence: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
    ack: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
    len: fc.integer({ min: 0, max: 0xffffffff }),
    sport: fc.integer({ min: 0, max: 0xffff }),
    dport: fc.integer({ min: 0, max: 0xffff }),
    flags: fc.integer({ min: 0, max: 0xff }),
    credit: fc.integer({ min: 0, max: 0xff }),
    csum: fc.integer({ min: 0, max: 0xffff }),
    exthdr: fc.uint8Array({ minLength: 16, maxLength: 16 }),
  });

  it('a header survives encode/decode unchanged', () => {
    fc.assert(
      fc.property(header, (h) => {
        const b = Buffer.alloc(48);
        wire.encodeHeader(b, 0, h);
        const d = wire.decodeHeader(b);
        expect({ ...d, exthdr: [...d.exthdr] }).toEqual({ ...h, exthdr: [...h.exthdr] });
      }),
    );
  });

  it('any 16 bytes parse into known records that re-pack to a prefix of the same bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 16, maxLength: 16 }), (area) => {
        const exts = wire.parseExtensions(area);
        const packed = wire.packExtensions(exts);
        const used = exts.reduce((n, e) => n + 1 + e.data.length, 0);
        expect(Buffer.from(packed.subarray(0, used)).equals(Buffer.from(area.subarray(0, used)))).toBe(true);
      }),
    );
  });

  it('a stream of frames cut anywhere decodes to the same frames, and h_len over 1 MiB always fails', () => {
    const frame = fc.record({ seq: fc.nat(), payload: fc.uint8Array({ maxLength: 300 }) });
    fc.assert(
      fc.property(fc.array(frame, { maxLength: 20 }), fc.array(fc.nat(), { maxLength: 10 }), (frames, cuts) => {
        const stream = Buffer.concat(
          frames.map((f) => {
            const b = Buffer.alloc(48 + f.payload.length);
            wire.encodeHeader(b, 0, { sequence: f.seq, len: f.payload.length });
            b.set(f.payload, 48);
            return b;
          }),
        );
        const got: [number, string][] = [];
        const r = new wire.FrameReader((h, p) => got.push([wire.decodeHeader(h).sequence, p.toString('hex')]));
        const points = [...new Set(cuts.map((c) => c % (stream.length + 1)))].sort((a, b) => a - b);
        let prev = 0;
        for (const p of [...points, stream.length]) {
          r.push(stream.subarray(prev, p));
          prev = p;
        }
        expect(got).toEqual(frames.map((f) => [f.seq, Buffer.from(f.payload).toString('hex')]));
      }),
    );
    fc.assert(
      fc.property(fc.integer({ min: (1 << 20) + 1, max: 0xffffffff }), (len) => {
        const h = Buffer.alloc(48);
        wire.encodeHeader(h, 0, { len });
        expect(() => new wire.FrameReader(() => {}).push(h)).toThrow(wire.RdsProtocolError);
      }),
    );
  });

  // The socket reads into memory the reader hands out (net's onread). Delivered frames are views
  // of that memory, so the property checks them after the whole stream: a later read must never
  // have written over a frame already handed up.
  it("reading into the reader's slabs, in reads of any size, delivers every frame intact and never overwrites one", () => {
    const sizes = fc.oneof(
      fc.integer({ min: 0, max: 2000 }),
      fc.integer({ min: 60_000, max: 70_000 }),
      fc.integer({ min: wire.READ_SLAB_SIZE - 100, max: 1 << 20 }),
    );
    const frame = fc.record({ seq: fc.nat(), len: sizes, fill: fc.integer({ min: 0, max: 255 }) });
    fc.assert(
      fc.property(
        fc.array(frame, { maxLength: 12 }),
        fc.array(fc.integer({ min: 1, max: 300_000 }), { minLength: 1, maxLength: 8 }),
        (frames, reads) => {
          const stream = Buffer.concat(
            frames.map((f) => {
              const b = Buffer.alloc(48 + f.len, f.fill);
              wire.encodeHeader(b, 0, { sequence: f.seq, len: f.len });
              return b;
            }),
          );
          const ends = new Set<number>([0]);
          frames.reduce((end, f) => {
            ends.add(end + 48 + f.len);
            return end + 48 + f.len;
          }, 0);
          const nextEnd = (at: number): number => Math.min(...[...ends].filter((e) => e > at));
          const got: { seq: number; payload: Buffer }[] = [];
          const r = new wire.FrameReader((h, p) => got.push({ seq: wire.decodeHeader(h).sequence, payload: p }));
          let off = 0;
          for (let i = 0; off < stream.length; i++) {
            const into = r.readBuffer();
            expect(into.length).toBeGreaterThan(0);
            // The given read sizes for a while, then whole regions, so a tiny read size cannot make a
            // multi-megabyte stream take millions of steps.
            const n = Math.min(into.length, i < 400 ? reads[i % reads.length]! : into.length, stream.length - off);
            stream.copy(into, 0, off, off + n);
            off += n;
            r.filled(n);
            expect(r.idle).toBe(ends.has(off));
            if (!ends.has(off)) {
              // Header bytes missing while the header is incomplete, then payload bytes missing.
              const start = Math.max(...[...ends].filter((e) => e < off));
              expect(r.remaining).toEqual(off - start < 48 ? [48 - (off - start), 0] : [0, nextEnd(off) - off]);
              expect(r.partialHeader).toBe(off - start < 48);
            } else {
              expect(r.partialHeader).toBe(false);
            }
          }
          expect(r.idle).toBe(true);
          expect(got.map((g) => g.seq)).toEqual(frames.map((f) => f.seq));
          got.forEach((g, i) => {
            expect(g.payload.length).toBe(frames[i]!.len);
            expect(g.payload.equals(Buffer.alloc(frames[i]!.len, frames[i]!.fill))).toBe(true);
          });
        },
      ),
      { numRuns: 60 },
    );
    const r = new wire.FrameReader(() => {});
    const into = r.readBuffer();
    wire.encodeHeader(into, 0, { len: (1 << 20) + 1 });
    expect(() => r.filled(48)).toThrow(wire.RdsProtocolError);
    expect(r.readBuffer().length).toBeLessThanOrEqual(48); // nothing large allocated for a lying header
  });
});

describe('API properties: random calls only ever throw RdsError or TypeError, and the socket keeps working', () => {
  const anything = fc.oneof(
    fc.anything(),
    fc.integer(),
    fc.string(),
    fc.constant(undefined),
    fc.constant(null),
    fc.record({
      address: fc.oneof(fc.ipV4(), fc.string(), fc.constant('127.33.0.1')),
      port: fc.oneof(fc.integer({ min: -5, max: 70000 }), fc.anything()),
    }),
    fc.uint8Array({ maxLength: 64 }),
    fc.array(fc.uint8Array({ maxLength: 8 }), { maxLength: 3 }),
  );
  const call = fc.oneof(
    fc.record({ op: fc.constant('sendmsg'), a: anything, b: anything }),
    fc.record({
      op: fc.constant('setsockopt'),
      a: fc.oneof(fc.integer(), fc.constantFrom(constants.SOL_RDS, constants.SOL_SOCKET)),
      b: fc.oneof(fc.integer({ min: -2, max: 12 }), fc.integer()),
      c: anything,
    }),
    fc.record({
      op: fc.constant('getsockopt'),
      a: fc.oneof(fc.integer(), fc.constantFrom(constants.SOL_RDS, constants.SOL_SOCKET)),
      b: fc.integer({ min: -2, max: 12 }),
    }),
    fc.record({ op: fc.constant('connect'), a: anything }),
    fc.record({ op: fc.constant('recvmsg') }),
    fc.record({ op: fc.constant('poll') }),
    fc.record({ op: fc.constant('address') }),
  );

  let host = 0;
  it('holds for random call sequences', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(call, { maxLength: 25 }), fc.boolean(), async (calls, bindFirst) => {
        const s = new RdsSocket({ stack });
        const me = { address: `127.33.${Math.floor(++host / 250)}.${(host % 250) + 1}`, port: 4000 };
        if (bindFirst) await s.bind(me);
        for (const c of calls) {
          try {
            const sock = s as unknown as Record<string, (...a: unknown[]) => unknown>;
            const args =
              c.op === 'setsockopt'
                ? [c.a, c.b, c.c]
                : c.op === 'getsockopt'
                  ? [c.a, c.b]
                  : c.op === 'sendmsg'
                    ? [c.a, c.b]
                    : c.op === 'connect'
                      ? [c.a]
                      : [];
            sock[c.op]!(...args);
          } catch (e) {
            if (!(e instanceof RdsError) && !(e instanceof TypeError)) throw e;
            expect((e as Error).message.length).toBeGreaterThan(10);
          }
        }
        // Still a working socket: bind if needed, and a message to itself arrives.
        if (!bindFirst) {
          try {
            await s.bind(me);
          } catch (e) {
            expect(e).toBeInstanceOf(RdsError);
          }
        }
        const addr = (() => {
          try {
            return s.address();
          } catch {
            return null;
          }
        })();
        if (addr !== null) {
          s.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 1 << 20);
          s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 1 << 20);
          s.setsockopt(constants.SOL_RDS, constants.RDS_CONG_MONITOR, 0);
          while (s.recvmsg() !== null);
          s.sendmsg(Buffer.from('still here'), addr);
          const m = await s.recv({ timeout: 2000 });
          expect(m.data.toString()).toBe('still here');
        }
        await s.close();
      }),
      { numRuns: 150 },
    );
  });
});
