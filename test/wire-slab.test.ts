import { describe, expect, it } from 'vitest';
import { WireSlab } from '../lib/core/wire-slab.js';
import { RdsOutgoing } from '../lib/core/message.js';
import type { RdsConnPath } from '../lib/core/path.js';

// Frame memory for queued messages: small frames share slabs, large ones are reused, and a
// large frame goes back only when its message is done and no transport still reads it.
function message(wire: Buffer): RdsOutgoing {
  return new RdsOutgoing(wire, wire.length - 48, 1, 4000, 4000, '127.0.0.2', null as unknown as RdsConnPath, {
    messageDone() {},
  });
}

describe('WireSlab', () => {
  it('carves small frames from one slab and never pools them', () => {
    const ws = new WireSlab();
    const x = ws.alloc(1000);
    const y = ws.alloc(1000);
    expect(y.buffer).toBe(x.buffer);
    expect(y.byteOffset).toBe(x.byteOffset + 1000);
    expect(ws.recyclable(1000)).toBe(false);
    expect(ws.recyclable(64 * 1024 + 48)).toBe(true);
  });

  it('hands a recycled large frame out again for any size in its page class, then allocates anew', () => {
    const ws = new WireSlab();
    const f = ws.alloc(65536 + 48);
    expect(f.length).toBe(65536 + 48);
    ws.recycle(f);
    expect(ws.pooled).toBe(65536 + 4096);
    const g = ws.alloc(65536 + 100);
    expect(g.buffer).toBe(f.buffer);
    expect(g.length).toBe(65536 + 100);
    expect(ws.pooled).toBe(0);
    expect(ws.alloc(65536 + 48).buffer).not.toBe(f.buffer);
    // Another page class is not served from this one.
    ws.recycle(g);
    expect(ws.alloc(32768).buffer).not.toBe(f.buffer);
  });

  it('takes back only memory its own large alloc() handed out, all of it even from a view inside it', () => {
    const ws = new WireSlab();
    const big = ws.alloc(70000);
    expect(ws.owns(big)).toBe(true);
    // The host node's SEND: the RDS frame is a view after the control frame's own header.
    const inner = big.subarray(21, 70000);
    expect(ws.owns(inner)).toBe(true);
    ws.recycle(inner);
    expect(ws.pooled).toBe(73728);
    expect(ws.alloc(70000).buffer).toBe(big.buffer);
    // A small frame's shared slab, or memory from elsewhere, is never pooled.
    const small = ws.alloc(1000);
    expect(ws.owns(small)).toBe(false);
    ws.recycle(small);
    const foreign = Buffer.allocUnsafeSlow(73728);
    expect(ws.owns(foreign)).toBe(false);
    ws.recycle(foreign);
    expect(ws.pooled).toBe(0);
  });

  it('widenPool raises what the pool keeps, never lowers it (a host node keeps 16 MiB)', () => {
    const ws = new WireSlab(128 * 1024, 16 * 1024, 2 * 20480);
    ws.widenPool(4 * 20480);
    ws.widenPool(20480);
    const frames = Array.from({ length: 6 }, () => ws.alloc(20000));
    for (const f of frames) ws.recycle(f);
    expect(ws.pooled).toBe(4 * 20480);
  });

  it('keeps at most poolBytes for reuse', () => {
    const ws = new WireSlab(128 * 1024, 16 * 1024, 3 * 20480);
    const frames = Array.from({ length: 5 }, () => ws.alloc(20000));
    for (const f of frames) ws.recycle(f);
    expect(ws.pooled).toBe(3 * 20480);
  });
});

describe("a message's large frame", () => {
  it('returns to the pool when acknowledged, or once the last write reading it finishes', () => {
    const ws = new WireSlab();
    const m = message(ws.alloc(70000));
    m.recycleInto(ws);
    m.complete();
    expect(ws.pooled).toBeGreaterThan(0);

    const ws2 = new WireSlab();
    const held = message(ws2.alloc(70000));
    held.recycleInto(ws2);
    held.xmitHold();
    held.complete(new Error('cancelled'));
    expect(ws2.pooled).toBe(0);
    held.xmitDone();
    expect(ws2.pooled).toBeGreaterThan(0);
    held.complete();
    expect(ws2.pooled).toBe(73728);
  });

  it('is never reused once a receiver holds views of it (loopback)', () => {
    const ws = new WireSlab();
    const m = message(ws.alloc(70000));
    m.recycleInto(ws);
    m.wireTaken();
    m.complete();
    expect(ws.pooled).toBe(0);
  });
});
