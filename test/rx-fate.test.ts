import { describe, expect, it } from 'vitest';
import { RX_DISCARDED, RX_READ, RxAckTracker, type RxOwner } from '../lib/core/ext/rx-ack.js';

// A failover duplicate of a message asks the message's original path what became of it (fateOf)
// and shares that fate: "read" makes the sender's confirmation resolve. A receiving socket closed
// with a large unread backlog discards hundreds of messages at once; a duplicate of one of them
// must not be taken for read (the soak saw confirmed-but-never-delivered messages this way).
const owner: RxOwner = { consumed: () => {} };

describe('RxAckTracker.fateOf', () => {
  it('a message discarded unread among a backlog of 512 is not reported read to its failover duplicate', () => {
    const t = new RxAckTracker(100);
    const entries = [];
    for (let seq = 1; seq <= 600; seq++) entries.push(t.record(seq, 0, false, 0, owner));
    // The application read the first 88, then closed the socket with 512 unread.
    for (const e of entries.slice(0, 88)) t.settle(e, RX_READ);
    for (const e of entries.slice(88)) t.settle(e, RX_DISCARDED);
    t.advance(0); // every fate is known: the log moves past them all
    expect(t.readSeq).toBe(600);
    expect(t.fateOf(1)).toBe(RX_READ);
    expect(t.fateOf(88)).toBe(RX_READ);
    for (const seq of [89, 100, 300, 536, 537, 600]) expect(t.fateOf(seq), `seq ${seq}`).toBe(RX_DISCARDED);
  });

  it('once refusals beyond its memory are forgotten, an unknown fate in that range is "discarded", never "read"', () => {
    const t = new RxAckTracker(100);
    const n = 9000; // more refusals than it keeps (8192)
    for (let seq = 1; seq <= n; seq++) t.settle(t.record(seq, 0, false, 0, owner), RX_DISCARDED);
    const readOne = t.record(n + 1, 0, false, 0, owner);
    t.settle(readOne, RX_READ);
    t.advance(0);
    expect(t.fateOf(1)).toBe(RX_DISCARDED); // forgotten: unknown, so not claimed read
    expect(t.fateOf(n)).toBe(RX_DISCARDED); // remembered
    expect(t.fateOf(n + 1)).toBe(RX_READ); // after everything forgotten, nothing refused: read
  });
});
