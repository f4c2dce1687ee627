import { describe, expect, it, vi } from 'vitest';
import { SparePool } from '../lib/host/frame-writer.js';
import { encodeDataHeader } from '../lib/wire/header.js';
import {
  decodeCount,
  decodeMsg,
  decodeSend,
  encodeCount,
  encodeMsg,
  encodeMsgWire,
  encodeSend,
  readMsg,
  readMsgFrame,
} from '../lib/host/hot-frames.js';
import {
  C_CREDIT,
  C_REQ,
  C_SEND,
  decodeFrame,
  encodeFrame,
  FrameParser,
  FrameWriter,
  HEADER_BYTES,
  MAX_FRAME_BYTES,
  N_MSG,
  N_SENT,
  ProtocolError,
  writeBatch,
} from '../lib/host/protocol.js';

/** Frame types whose meta is JSON (the per-message ones are binary, tested below). */
const JSON_TYPES = Array.from({ length: 30 }, (_, i) => i).filter(
  (t) => ![C_SEND, C_CREDIT, N_MSG, N_SENT].includes(t),
);

describe('host node control framing', () => {
  it('reassembles frames however the stream is cut, payload and meta intact', () => {
    const frames = Array.from({ length: 300 }, (_, i) =>
      Buffer.concat(
        encodeFrame(
          JSON_TYPES[i % JSON_TYPES.length]!,
          i,
          i * 7,
          { i, s: 'x'.repeat(i % 50) },
          Buffer.alloc(i * 37, i & 0xff),
        ),
      ),
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
      expect(f).toMatchObject({
        type: JSON_TYPES[i % JSON_TYPES.length],
        sock: i,
        id: i * 7,
        meta: { i, s: 'x'.repeat(i % 50) },
      });
      expect(f.data.equals(Buffer.alloc(i * 37, i & 0xff))).toBe(true);
    });
  });

  it('copies a frame that spans reads once, and never the frames after it in the same read', () => {
    const big = Buffer.alloc(100 << 10, 3);
    const stream = Buffer.concat([
      ...encodeFrame(C_REQ, 1, 1, null, big),
      ...encodeFrame(C_REQ, 2, 2, null, Buffer.from('tail')),
      ...encodeFrame(C_REQ, 3, 3, null, Buffer.from('next')),
    ]);
    // Socket-sized reads, each its own memory; the third frame's length field is cut in two.
    const firstLen = stream.length - (HEADER_BYTES + 2 + 4) + 2;
    const cuts = [64 << 10, firstLen, stream.length];
    const chunks = cuts.map((end, i) => Buffer.from(stream.subarray(i === 0 ? 0 : cuts[i - 1], end)));
    const p = new FrameParser();
    const got = chunks.flatMap((c) => p.push(c));
    expect(got.map((f) => f.sock)).toEqual([1, 2, 3]);
    expect(got[0]!.data.equals(big)).toBe(true);
    expect(got[1]!.data.toString()).toBe('tail');
    expect(got[2]!.data.toString()).toBe('next');
    // The frame after the spanning one is still a view of the read that carried it, not a copy.
    expect(got[1]!.data.buffer).toBe(chunks[1]!.buffer);
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

  it('carries the per-message frames in binary metas, intact through a cut stream', () => {
    const payload = Buffer.alloc(3000, 9);
    const frames = [
      encodeSend(3, 77, '10.1.2.3', 4000, 0x40, true, 0xfffffffe, [payload.subarray(0, 10), payload.subarray(10)]),
      encodeSend(4, 0, 'fe80::1', 65535, 0, false, undefined, Buffer.alloc(0)),
      encodeMsg(5, {
        address: '2001:db8::7',
        port: 18634,
        timestamp: 1234.5,
        zcopyCompletions: [1, 2, 0xffffffff],
        congestionUpdate: 1n << 63n,
        data: payload,
      }),
      encodeMsg(6, { address: '127.0.0.1', port: 1, data: Buffer.from('x') }),
      encodeCount(N_SENT, 7, 2 ** 40 + 3, 12),
      encodeCount(C_CREDIT, 8, 0, 0),
    ];
    const stream = Buffer.concat(frames.flat());
    const p = new FrameParser();
    const got = [];
    for (let off = 0; off < stream.length; off += 7) got.push(...p.push(stream.subarray(off, off + 7)));
    expect(got.map((f) => [f.type, f.sock, f.id])).toEqual([
      [C_SEND, 3, 77],
      [C_SEND, 4, 0],
      [N_MSG, 5, 0],
      [N_MSG, 6, 0],
      [N_SENT, 7, 0],
      [C_CREDIT, 8, 0],
    ]);
    expect(decodeSend(got[0]!.bin)).toEqual({
      address: '10.1.2.3',
      port: 4000,
      flags: 0x40,
      confirm: true,
      cookie: 0xfffffffe,
    });
    expect(got[0]!.data.equals(payload)).toBe(true);
    expect(decodeSend(got[1]!.bin)).toEqual({
      address: 'fe80::1',
      port: 65535,
      flags: 0,
      confirm: false,
      cookie: undefined,
    });
    expect(decodeMsg(got[2]!.bin)).toEqual({
      address: '2001:db8::7',
      port: 18634,
      timestamp: 1234.5,
      zcopyCompletions: [1, 2, 0xffffffff],
      congestionUpdate: 1n << 63n,
    });
    expect(got[2]!.data.equals(payload)).toBe(true);
    expect(decodeMsg(got[3]!.bin)).toMatchObject({ address: '127.0.0.1', port: 1, timestamp: undefined });
    expect(decodeCount(got[4]!.bin)).toEqual({ n: 2 ** 40 + 3, k: 12 });
    expect(decodeCount(got[5]!.bin)).toEqual({ n: 0, k: 0 });
  });

  it('reads binary metas in place, at any offset of any read, and each address as it was written', () => {
    // Addresses of one length that differ in one byte, alternating, and one of another length:
    // the decoder's memory of the last address must never hand back the wrong one.
    const addrs = ['10.0.0.1', '10.0.0.2', '10.0.0.1', 'fe80::1', '10.0.0.2', '10.0.0.2'];
    const frames = addrs.flatMap((a, i) => [
      encodeSend(i, i, a, 1000 + i, 0, false, undefined, Buffer.alloc(i * 5, i)),
      encodeMsg(i, { address: a, port: 2000 + i, data: Buffer.alloc(i * 3, i) }),
      encodeCount(C_CREDIT, i, i * 1.5, i),
    ]);
    const stream = Buffer.concat(frames.flat());
    let seed = 11;
    const p = new FrameParser();
    const got = [];
    for (let off = 0; off < stream.length; ) {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      const n = 1 + (seed % 90);
      // Each read its own memory, at an offset inside a larger buffer.
      const chunk = Buffer.concat([Buffer.alloc(3, 0xee), stream.subarray(off, off + n)]).subarray(3);
      got.push(...p.push(chunk));
      off += n;
    }
    expect(got).toHaveLength(addrs.length * 3);
    addrs.forEach((a, i) => {
      const [send, msg, credit] = got.slice(i * 3, i * 3 + 3);
      expect(decodeSend(send!.raw, send!.metaStart, send!.metaEnd)).toMatchObject({ address: a, port: 1000 + i });
      expect(send!.data.equals(Buffer.alloc(i * 5, i))).toBe(true);
      expect(decodeMsg(msg!.raw, msg!.metaStart, msg!.metaEnd)).toMatchObject({ address: a, port: 2000 + i });
      expect(msg!.data.equals(Buffer.alloc(i * 3, i))).toBe(true);
      expect(decodeCount(credit!.raw, credit!.metaStart, credit!.metaEnd)).toEqual({ n: i * 1.5, k: i });
    });
  });

  it("MSG carries the node's receive-path stamps (SO_RDS_MSG_RXPATH_LATENCY) after every other field; a reader skips bits it does not know", () => {
    const stamps = [1n, 2n ** 63n + 5n, 3n];
    const meta = Buffer.concat(
      encodeMsg(1, {
        address: '10.0.0.1',
        port: 9,
        timestamp: 5,
        zcopyCompletions: [1, 2],
        congestionUpdate: 7n,
        data: Buffer.alloc(0),
        rxStamps: stamps,
      }),
    ).subarray(17);
    const m = readMsg(meta, 0, meta.length, Buffer.alloc(0));
    expect(m).toMatchObject({
      address: '10.0.0.1',
      port: 9,
      timestamp: 5,
      zcopyCompletions: [1, 2],
      congestionUpdate: 7n,
    });
    expect(m.rxStamps).toEqual(stamps);
    for (let n = 0; n < meta.length; n++)
      expect(() => readMsg(meta.subarray(0, n), 0, n, Buffer.alloc(0))).toThrow(ProtocolError);
    // As a client that predates the stamps reads it: the bit unknown, the 24 bytes after the rest ignored.
    const old = Buffer.from(meta);
    const bits = 1 + '10.0.0.1'.length + 2;
    old[bits] = old[bits]! & ~8;
    expect(readMsg(old, 0, old.length, Buffer.alloc(0))).toMatchObject({ port: 9, congestionUpdate: 7n });
    old[bits] = old[bits]! | 0x80;
    expect(readMsg(old, 0, old.length, Buffer.alloc(0))).toMatchObject({ port: 9, congestionUpdate: 7n });
  });

  it('MSG carries the path the message came on (RdsMessage.path) after the stamps, in both forms; a client that predates it reads the rest', () => {
    const meta = Buffer.concat(
      encodeMsg(1, {
        address: '10.0.0.1',
        port: 9,
        timestamp: 5,
        data: Buffer.alloc(0),
        rxStamps: [1n, 2n, 3n],
        path: 7,
      }),
    ).subarray(17);
    expect(readMsg(meta, 0, meta.length, Buffer.alloc(0))).toMatchObject({
      port: 9,
      timestamp: 5,
      rxStamps: [1n, 2n, 3n],
      path: 7,
    });
    expect(decodeMsg(meta)).toMatchObject({ port: 9, path: 7 });
    for (let n = 0; n < meta.length; n++)
      expect(() => readMsg(meta.subarray(0, n), 0, n, Buffer.alloc(0))).toThrow(ProtocolError);
    // Path 0 is a path: present, not dropped as falsy; no path: no byte and no field.
    const zero = Buffer.concat(encodeMsg(1, { address: '10.0.0.1', port: 9, data: Buffer.alloc(0), path: 0 })).subarray(
      17,
    );
    expect(readMsg(zero, 0, zero.length, Buffer.alloc(0)).path).toBe(0);
    const none = Buffer.concat(encodeMsg(1, { address: '10.0.0.1', port: 9, data: Buffer.alloc(0) })).subarray(17);
    expect(none.length).toBe(zero.length - 1);
    expect('path' in readMsg(none, 0, none.length, Buffer.alloc(0))).toBe(false);
    // As a client before it reads it: bit 32 unknown, its byte after the rest ignored.
    const old = Buffer.from(meta);
    const bits = 1 + '10.0.0.1'.length + 2;
    old[bits] = old[bits]! & ~32;
    const m = readMsg(old, 0, old.length, Buffer.alloc(0));
    expect(m).toMatchObject({ port: 9, timestamp: 5, rxStamps: [1n, 2n, 3n] });
    expect(m.path).toBeUndefined();
    // With M_WIRE too.
    const payload = Buffer.from('lane');
    const h = Buffer.alloc(48);
    encodeDataHeader(h, 0, 77, payload.length, 18634, 5000);
    const f = new FrameParser().push(
      Buffer.concat(encodeMsgWire(3, { address: '10.0.0.9', port: 0, data: payload, path: 3 }, h)),
    )[0]!;
    expect(readMsg(f.raw, f.metaStart, f.metaEnd, f.data)).toMatchObject({ port: 18634, path: 3 });
  });

  it("MSG with M_WIRE (protocol 5): the data is the RDS header and the payload; port and length come from the header, a length that is not the payload's is a ProtocolError", () => {
    const payload = Buffer.from('cut through');
    const h = Buffer.alloc(48);
    encodeDataHeader(h, 0, 77, payload.length, 18634, 5000);
    const got = new FrameParser().push(
      Buffer.concat(
        encodeMsgWire(3, { address: '10.0.0.9', port: 0, timestamp: 12.5, data: payload, rxStamps: [1n, 2n, 3n] }, h),
      ),
    );
    expect(got).toHaveLength(1);
    const f = got[0]!;
    expect(f.data.length).toBe(48 + payload.length);
    const m = readMsg(f.raw, f.metaStart, f.metaEnd, f.data);
    expect(m).toMatchObject({ address: '10.0.0.9', port: 18634, timestamp: 12.5, rxStamps: [1n, 2n, 3n] });
    expect(m.data.toString()).toBe('cut through');
    // Read in place from the frame (what an attached stack does): the same message, its data a
    // view of the frame's buffer, not a copy.
    const inPlace = readMsgFrame(f);
    expect(inPlace).toEqual(m);
    expect(inPlace.data.buffer).toBe(f.raw.buffer);
    // A frame whose header length is not what follows it is refused read in place too.
    const lying = Buffer.concat(encodeMsgWire(3, { address: '10.0.0.9', port: 0, data: payload }, h));
    lying.writeUInt32BE(payload.length + 1, lying.length - payload.length - 48 + 16);
    expect(() => readMsgFrame(new FrameParser().push(lying)[0]!)).toThrow(ProtocolError);
    // The meta alone (decodeMsg) has the meta's port, 0.
    expect(decodeMsg(f.raw, f.metaStart, f.metaEnd)).toMatchObject({ address: '10.0.0.9', port: 0 });
    // Shorter than a header, or a header whose length is not what follows it.
    expect(() => readMsg(f.raw, f.metaStart, f.metaEnd, f.data.subarray(0, 47))).toThrow(ProtocolError);
    expect(() => readMsg(f.raw, f.metaStart, f.metaEnd, f.data.subarray(0, f.data.length - 1))).toThrow(ProtocolError);
    expect(() => encodeMsgWire(3, { address: '10.0.0.9', port: 0, data: payload }, h.subarray(0, 40))).toThrow(
      ProtocolError,
    );
    // An empty message is a header alone.
    encodeDataHeader(h, 0, 78, 0, 18634, 5000);
    const empty = Buffer.concat(encodeMsgWire(3, { address: '10.0.0.9', port: 0, data: Buffer.alloc(0) }, h));
    const e = new FrameParser().push(empty)[0]!;
    expect(readMsg(e.raw, e.metaStart, e.metaEnd, e.data)).toMatchObject({ port: 18634, data: Buffer.alloc(0) });
  });

  it('decodeFrame refuses a frame shorter than its header, or running past its buffer, with a ProtocolError', () => {
    const one = Buffer.concat(encodeFrame(C_REQ, 1, 2, { a: 1 }));
    expect(decodeFrame(one, 0, one.length)).toMatchObject({ type: C_REQ, sock: 1, id: 2 });
    expect(() => decodeFrame(one, 0, HEADER_BYTES - 1)).toThrow(ProtocolError);
    expect(() => decodeFrame(one.subarray(0, one.length - 1), 0, one.length)).toThrow(ProtocolError);
  });

  it('rejects truncated or overlong binary metas with a ProtocolError, never another error', () => {
    const full = Buffer.concat(
      encodeMsg(1, {
        address: '10.0.0.1',
        port: 9,
        timestamp: 5,
        zcopyCompletions: [1, 2, 3],
        congestionUpdate: 7n,
        data: Buffer.alloc(0),
      }),
    );
    const meta = full.subarray(17);
    for (let n = 0; n < meta.length; n++) expect(() => decodeMsg(meta.subarray(0, n))).toThrow(ProtocolError);
    const send = Buffer.concat(encodeSend(1, 1, '10.0.0.1', 9, 0, false, 5, Buffer.alloc(0))).subarray(17);
    for (let n = 0; n < send.length; n++) expect(() => decodeSend(send.subarray(0, n))).toThrow(ProtocolError);
    expect(() => decodeCount(Buffer.alloc(11))).toThrow(ProtocolError);
    const nan = Buffer.alloc(12);
    nan.writeDoubleBE(Number.NaN, 0);
    expect(() => decodeCount(nan)).toThrow(ProtocolError);
    // A length byte claiming more than the meta holds.
    expect(() => decodeSend(Buffer.from([200, 1, 2, 3]))).toThrow(ProtocolError);
  });
});

describe('host node control writer (FrameWriter)', () => {
  const frame = (n: number, fill = 1): Buffer[] => [Buffer.alloc(n, fill)];
  const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));
  /** Frames of `size` bytes in each write the sink saw. */
  const counting =
    (out: number[], size = 10) =>
    (parts: Buffer[]) =>
      out.push(parts.reduce((a, p) => a + p.length, 0) / size);

  it('writes a lone frame on an idle connection at once, and a stream of frames in one write per turn', async () => {
    const writes: number[] = [];
    const w = new FrameWriter(counting(writes));
    // Constructed without an idle() test: never eager, one write per turn.
    w.write(frame(10));
    w.write(frame(10));
    expect(writes).toEqual([]);
    await nextTurn();
    expect(writes).toEqual([2]);

    const eager: number[] = [];
    const e = new FrameWriter(counting(eager), () => true);
    e.write(frame(10)); // a single frame: out at once
    expect(eager).toEqual([1]);
    e.write(frame(10)); // the rest of the turn waits for its end
    e.write(frame(10));
    expect(eager).toEqual([1]);
    await nextTurn();
    expect(eager).toEqual([1, 2]);
    // That turn wrote 3 frames: a stream, so the next turn batches from its first frame.
    for (let i = 0; i < 5; i++) e.write(frame(10));
    expect(eager).toEqual([1, 2]);
    await nextTurn();
    expect(eager).toEqual([1, 2, 5]);
    // A quiet turn (one frame) makes the connection eager again.
    e.write(frame(10));
    await nextTurn();
    e.write(frame(10));
    expect(eager).toEqual([1, 2, 5, 1, 1]);
  });

  it('writes a producer that never yields every 256 KiB, not once at the end of its burst', () => {
    const writes: number[] = [];
    const w = new FrameWriter((parts) => writes.push(parts.reduce((a, p) => a + p.length, 0)));
    for (let i = 0; i < 1000; i++) w.write(frame(1024));
    expect(writes.length).toBe(3);
    for (const n of writes) expect(n).toBe(256 * 1024);
  });

  it('hands the sink small frames joined and large payloads as they are, in order, and never rewrites what it handed over', async () => {
    const batches: Buffer[][] = [];
    const w = new FrameWriter(
      (parts) => batches.push(parts),
      () => true,
    );
    const big = Buffer.alloc(20000, 9);
    w.write(frame(10, 1)); // eager: out at once
    w.write(frame(10, 2));
    w.write([Buffer.alloc(5, 3), big]);
    w.write(frame(10, 4));
    const first = Buffer.from(batches[0]![0]!);
    await nextTurn();
    expect(batches.length).toBe(2);
    const [run1, large, run2] = batches[1]!;
    expect(batches[1]!.length).toBe(3);
    expect(run1!.equals(Buffer.concat([Buffer.alloc(10, 2), Buffer.alloc(5, 3)]))).toBe(true);
    expect(large).toBe(big); // not copied
    expect(run2!.equals(Buffer.alloc(10, 4))).toBe(true);
    // Later turns, of every size, leave the bytes already handed to the socket as they were.
    const handed = batches.flat().map((b) => [b, Buffer.from(b)] as const);
    for (let t = 0; t < 4; t++) {
      for (let i = 0; i < 200 * t; i++) w.write(frame(100 + i, 5 + t));
      await nextTurn();
    }
    expect(batches[0]![0]!.equals(first)).toBe(true);
    for (const [b, copy] of handed) expect(b.equals(copy)).toBe(true);
  });

  it('writes the slab again from its start only when the socket took the last batch whole', async () => {
    // A socket that took every batch: once the slab has grown to the turn's size (two turns), each
    // turn's frames go where the last turn's were, one buffer per batch.
    const took: Buffer[][] = [];
    const w = new FrameWriter((parts) => took.push(parts) > 0);
    for (let t = 0; t < 4; t++) {
      for (let i = 0; i < 100; i++) w.write(frame(100, t + 1));
      await nextTurn();
    }
    expect(took).toHaveLength(4);
    const [third, fourth] = [took[2]!, took[3]!];
    expect(third).toHaveLength(1);
    expect(fourth).toHaveLength(1);
    expect(fourth[0]!.buffer).toBe(third[0]!.buffer);
    expect(fourth[0]!.byteOffset).toBe(third[0]!.byteOffset);
    expect(fourth[0]!.equals(Buffer.alloc(100 * 100, 4))).toBe(true);
    // A connection with nothing to write for a turn lets its slab go.
    expect(w.slab.length).toBeGreaterThan(0);
    await nextTurn();
    await nextTurn();
    expect(w.slab.length).toBe(0);
    // A socket that kept a batch (returns false): its bytes stay as they were.
    const kept: Buffer[][] = [];
    const k = new FrameWriter((parts) => {
      kept.push(parts);
      return false;
    });
    for (let t = 0; t < 3; t++) {
      for (let i = 0; i < 100; i++) k.write(frame(100, t + 1));
      await nextTurn();
    }
    kept.forEach((parts, t) => expect(Buffer.concat(parts).equals(Buffer.alloc(100 * 100, t + 1))).toBe(true));
  });

  it('reuses a full-size slab the socket kept only once the socket says it has written it', async () => {
    // A socket that never takes a batch whole (its reader is slower): each batch is kept, and the
    // writer must not write into its bytes until the write's callback; after it, the slab comes
    // back for later batches instead of a new one per batch.
    const handed: { parts: Buffer[]; copy: Buffer[]; written: () => void }[] = [];
    const w = new FrameWriter((parts, written) => {
      handed.push({ parts, copy: parts.map((p) => Buffer.from(p)), written });
      return false;
    });
    const turn = async (fill: number): Promise<void> => {
      for (let i = 0; i < 600; i++) w.write(frame(1000, fill));
      await nextTurn();
    };
    const intact = (hs: typeof handed): void => {
      for (const h of hs) h.parts.forEach((p, i) => expect(p.equals(h.copy[i]!)).toBe(true));
    };
    const fullSize = (b: Buffer): boolean => b.buffer.byteLength >= 256 * 1024;
    for (let t = 1; t <= 5; t++) await turn(t); // the first turn grows the slab to full size
    intact(handed);
    const early = new Set(handed.flatMap((h) => h.parts.filter(fullSize).map((p) => p.buffer)));
    expect(early.size).toBeGreaterThan(2);
    // Until the socket says so, no later batch is written into an earlier batch's slab.
    const n = handed.length;
    for (let t = 6; t <= 7; t++) await turn(t);
    intact(handed);
    const n2 = handed.length;
    for (const h of handed.slice(0, n)) h.written();
    for (let t = 8; t <= 10; t++) await turn(t);
    intact(handed.slice(n));
    // Written, those slabs came back: later batches use them.
    expect(handed.slice(n2).some((h) => h.parts.some((p) => early.has(p.buffer)))).toBe(true);
  });

  it('keeps written slabs for reuse while they are taken, and lets them all go after a second in which none was', () => {
    vi.useFakeTimers();
    try {
      const pool = new SparePool();
      const full = (): Buffer => Buffer.allocUnsafeSlow(256 * 1024 + 16 * 1024);
      pool.give(Buffer.allocUnsafeSlow(1000)); // only full-size slabs are kept
      expect(pool.size).toBe(0);
      for (let i = 0; i < 100; i++) pool.give(full());
      expect(pool.size).toBe(64); // bounded
      vi.advanceTimersByTime(900);
      expect(pool.take()).toBeDefined(); // in use: kept past the second
      vi.advanceTimersByTime(200);
      expect(pool.size).toBe(63);
      vi.advanceTimersByTime(1000); // a second with nothing taken
      expect(pool.size).toBe(0);
      expect(pool.take()).toBeUndefined();
    } finally {
      vi.useRealTimers();
    }
  });

  it('adds piggyback frames only to writes that carry frames anyway', async () => {
    const writes: number[] = [];
    const w = new FrameWriter(counting(writes, 1));
    let extra = 0;
    w.piggyback = () => {
      extra++;
      w.write(frame(1));
    };
    w.beforeFlush(() => {}); // a turn with nothing to write
    await nextTurn();
    expect(writes).toEqual([]);
    w.write(frame(5));
    await nextTurn();
    expect(writes).toEqual([6]);
    expect(extra).toBe(1);
  });
});

describe('writeBatch', () => {
  it('writes one buffer as it is, and several in one corked writev, in order, and says whether the socket took them whole', () => {
    const out: Buffer[] = [];
    let corked = 0;
    let maxCorked = 0;
    const conn = {
      writableLength: 0,
      write: (b: Buffer) => out.push(b) > 0,
      cork: () => {
        corked++;
        maxCorked = Math.max(maxCorked, corked);
      },
      uncork: () => corked--,
    };
    const big = Buffer.alloc(20000, 2);
    const parts = [Buffer.from('abcd'), big, Buffer.from('ef')];
    expect(writeBatch(conn, parts)).toBe(true);
    expect(corked).toBe(0);
    expect(maxCorked).toBe(1);
    expect(out).toEqual(parts);
    expect(out[1]).toBe(big); // not copied
    out.length = 0;
    maxCorked = 0;
    writeBatch(conn, [Buffer.from('xy')]);
    expect(out.map((b) => b.toString())).toEqual(['xy']);
    expect(maxCorked).toBe(0);
    // Bytes the socket still holds: the buffers are not free.
    conn.writableLength = 2;
    expect(writeBatch(conn, [Buffer.from('z')])).toBe(false);
  });
});
