// Issue 39, stalled payloads: frames in progress share maxPartialFrameBytes; what the node holds
// for them must be within it in memory too (and be given back), every stalled frame must be gone
// frameTimeoutMs after its header however many wait, and a peer that keeps sending its large frame
// must not wait behind strangers' stalled ones.
import type { Socket } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { TcpTransport } from '../lib/index.js';
import { FrameRank, type PartialFrame, PartialFrameBudget } from '../lib/transports/partial-frames.js';
import { FrameReader } from '../lib/wire/frame-reader.js';
import { TEST_TCP_PORT, testNodes, until } from './helpers.js';
import { frameBytes, plainSockets } from './raw-peer.js';

const MiB = 1 << 20;
const { STALL_MS } = PartialFrameBudget;

/** A frame for the budget alone: what happened to it is in `log`. */
function frameOf(log: string[], name: string, bytes: number, rank: FrameRank, held = false): PartialFrame {
  return {
    bytes,
    rank,
    progressAt: Date.now(),
    held: () => held,
    granted: () => log.push(`granted ${name}`),
    evict: () => log.push(`evicted ${name}`),
  };
}

describe('PartialFrameBudget: who gets room at the cap', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('strangers share half the cap, and their waiting frames drop nobody', () => {
    vi.useFakeTimers();
    const log: string[] = [];
    const b = new PartialFrameBudget(4 * MiB);
    const s = [0, 1, 2].map((i) => frameOf(log, `s${i}`, MiB, FrameRank.Stranger));
    expect(b.begin(s[0]!)).toBe(true);
    expect(b.begin(s[1]!)).toBe(true);
    expect(b.begin(s[2]!)).toBe(false); // past half the cap
    expect(b.strangerHeld).toBe(2 * MiB);
    vi.advanceTimersByTime(10 * STALL_MS);
    expect(log).toEqual([]); // stalled for long, but a stranger's wait drops nobody
    // The other half is a known peer's at once.
    expect(b.begin(frameOf(log, 'k', 2 * MiB, FrameRank.Known))).toBe(true);
    expect(b.held).toBe(4 * MiB);
  });

  it("a proven peer's waiting frame drops the oldest stalled frame, never one that makes progress", () => {
    vi.useFakeTimers();
    const log: string[] = [];
    const b = new PartialFrameBudget(3 * MiB);
    const old = frameOf(log, 'old', MiB, FrameRank.Known);
    const moving = frameOf(log, 'moving', MiB, FrameRank.Known);
    expect(b.begin(old)).toBe(true);
    expect(b.begin(moving)).toBe(true);
    vi.advanceTimersByTime(STALL_MS / 2);
    expect(b.begin(frameOf(log, 'young', MiB, FrameRank.Known))).toBe(true);
    // `moving` keeps making progress; the others stop.
    const tick = setInterval(() => (moving.progressAt = Date.now()), STALL_MS / 4);
    const good = frameOf(log, 'good', MiB, FrameRank.Proven);
    expect(b.begin(good)).toBe(false); // nothing stalled yet
    vi.advanceTimersByTime(STALL_MS / 2 - 1);
    expect(log).toEqual([]);
    vi.advanceTimersByTime(1); // `old` has had no byte for STALL_MS
    expect(log).toEqual(['evicted old', 'granted good']);
    // Another waits: `young` goes when it is stalled, `moving` never.
    expect(b.begin(frameOf(log, 'next', MiB, FrameRank.Proven))).toBe(false);
    vi.advanceTimersByTime(10 * STALL_MS);
    clearInterval(tick);
    expect(log).toEqual(['evicted old', 'granted good', 'evicted young', 'granted next']);
    expect(b.held).toBe(3 * MiB);
  });

  it('waiting frames are served by rank; a known one drops only stalled strangers, and none held by the node itself', () => {
    vi.useFakeTimers();
    const log: string[] = [];
    const b = new PartialFrameBudget(2 * MiB);
    const held = frameOf(log, 'held-stranger', MiB, FrameRank.Stranger, true);
    const known = frameOf(log, 'k', MiB, FrameRank.Known);
    expect(b.begin(held)).toBe(true);
    expect(b.begin(known)).toBe(true);
    const stranger = frameOf(log, 'stranger', MiB, FrameRank.Stranger);
    const known2 = frameOf(log, 'known2', MiB, FrameRank.Known);
    expect(b.begin(stranger)).toBe(false);
    expect(b.begin(known2)).toBe(false);
    vi.advanceTimersByTime(10 * STALL_MS);
    // known2 may drop neither a known frame nor a stranger's the receive limits hold.
    expect(log).toEqual([]);
    b.end(known); // complete: its room goes to known2, which arrived later but ranks higher
    expect(log).toEqual(['granted known2']);
    b.end(stranger); // it gave up (its deadline): the line is empty
    expect(b.waiting).toBe(0);
  });
});

describe('FrameReader: what a waiting connection keeps', () => {
  it('keeps only what it has read of its frame, in memory of its own, and completes it once it may read again', () => {
    const got: Buffer[] = [];
    const r = new FrameReader((_h, p) => got.push(Buffer.from(p)));
    const body = Buffer.alloc(MiB);
    for (let i = 0; i < body.length; i += 4) body.writeUInt32BE(i, i);
    const bytes = frame({ sequence: 1, sport: 7000, dport: 4000 }, body);
    let off = 0;
    const read = (max: number): number => {
      const into = r.readBuffer();
      const n = Math.min(into.length, max, bytes.length - off);
      bytes.copy(into, 0, off, off + n);
      off += n;
      r.filled(n);
      return n;
    };
    // The header and a little of the payload, then a read into the frame's own slab.
    read(Number.POSITIVE_INFINITY);
    read(30 * 1024);
    expect(r.slabBytes).toBeGreaterThanOrEqual(MiB);
    // The node stops reading (no room, or the application's limits): the large slab goes.
    r.holdGrowth = true;
    const room = r.readBuffer().length;
    expect(r.slabBytes).toBeLessThanOrEqual(off + 4096);
    expect(room).toBeGreaterThan(0);
    // Reading again: the frame gets its memory and completes intact.
    r.holdGrowth = false;
    while (off < bytes.length) read(64 * 1024);
    expect(got).toHaveLength(1);
    expect(got[0]!.equals(body)).toBe(true);
  });
});

// ---- on a node ----

const { node, closeAll } = testNodes();
const plain = plainSockets(TEST_TCP_PORT);
afterEach(async () => {
  plain.destroyAll();
  await closeAll();
});

const raw = (from: string, to: string): Promise<Socket> => plain.connect(from, to, { discardReads: true });
const frame = frameBytes;

/** The attacker: a small frame (identified), then a header for 1 MiB and all of it but the last byte. */
function stall(s: Socket, almost: Buffer): void {
  s.write(frame({ sequence: 1, sport: 7000, dport: 4099 }, Buffer.from('hi')));
  s.write(almost);
}

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
function arrayBuffers(): number {
  gc();
  gc();
  return process.memoryUsage().arrayBuffers;
}

describe('stalled payloads on a node', () => {
  const almost = Buffer.concat([frame({ sequence: 2, sport: 7000, dport: 4099, len: MiB }), Buffer.alloc(MiB - 1, 7)]);

  it('every stalled frame is dropped frameTimeoutMs after its header, waiting or not, and its memory is given back', async () => {
    const victimAddr = '127.111.1.200';
    const frameTimeoutMs = 1500;
    const v = await node(victimAddr, { maxPartialFrameBytes: 2 * MiB, frameTimeoutMs });
    const tcp = v.stack.transports.get('tcp') as TcpTransport;
    const before = arrayBuffers();
    const attackers = 6;
    const dropped: number[] = [];
    const t0 = Date.now();
    for (let k = 0; k < attackers; k++) {
      const s = await raw(`127.111.1.${10 + k}`, victimAddr);
      s.once('close', () => dropped.push(Date.now()));
      stall(s, almost);
    }
    const connecting = Date.now() - t0;
    // Frames past the cap (strangers: half of it) wait.
    await until(() => v.stack.counters.get('recv_pause_partial_limit') >= attackers - 2, 'the others wait');
    expect(tcp.partialFrameBytes).toBeLessThanOrEqual(2 * MiB);
    await until(() => dropped.length === attackers, 'every stalled frame dropped', 4 * frameTimeoutMs);
    // Each frameTimeoutMs after its header (so as far apart as the headers were), not one turn of
    // frameTimeoutMs after another (before: 3 s apart, two turns).
    expect(Math.max(...dropped) - Math.min(...dropped)).toBeLessThan(connecting + frameTimeoutMs / 2);
    expect(v.stack.counters.get('recv_drop_frame_timeout')).toBe(attackers);
    expect(tcp.partialFrameBytes).toBe(0);
    // Nothing of the frames is left: not their slabs, not what a closed connection's reader kept.
    expect(arrayBuffers() - before).toBeLessThan(MiB / 2);
  });

  it("a peer's large frame that keeps coming is served at once while strangers' stalled frames fill their share", async () => {
    const victimAddr = '127.111.2.200';
    const frameTimeoutMs = 4000;
    const v = await node(victimAddr, { maxPartialFrameBytes: 2 * MiB, frameTimeoutMs });
    // The good peer has sent a large frame through before: proven.
    const good = await raw('127.111.2.1', victimAddr);
    const body = Buffer.alloc(512 * 1024, 5);
    good.write(frame({ sequence: 1, sport: 7000, dport: 4000 }, body));
    expect((await v.sock.recv({ timeout: 5000 })).data.length).toBe(body.length);
    for (let k = 0; k < 4; k++) stall(await raw(`127.111.2.${10 + k}`, victimAddr), almost);
    await until(() => v.stack.counters.get('recv_pause_partial_limit') === 3, 'the strangers past their share wait');
    // Its next large frame is charged at once (the strangers hold only their half), and
    // delivered before any stalled frame's time is up.
    good.write(frame({ sequence: 2, sport: 7000, dport: 4000 }, Buffer.alloc(MiB, 6)));
    const m = await v.sock.recv({ timeout: frameTimeoutMs });
    expect(m.data.length).toBe(MiB);
    expect(v.stack.counters.get('recv_pause_partial_limit')).toBe(3);
    expect(v.stack.counters.get('recv_drop_frame_timeout')).toBe(0);
  });
});
