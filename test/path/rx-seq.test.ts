import { describe, expect, it } from 'vitest';
import { RxSequence } from '../../lib/core/rx-seq.js';

describe("RxSequence: a path's receive sequence space", () => {
  it('accepts in order, counts what it accepts, and drops a retransmission below what it has as old', () => {
    const r = new RxSequence();
    expect(r.accept(1, false, 10)).toBe('new');
    expect(r.accept(2, false, 5)).toBe('new');
    expect(r.next).toBe(3);
    expect(r.nativeNextSeq).toBe(3);
    expect(r.accept(2, true, 5)).toBe('old');
    expect(r.accept(1, true, 10)).toBe('old');
    expect([r.acceptedMessages, r.acceptedBytes]).toEqual([2, 15]);
    // A retransmission of something not yet seen is new.
    expect(r.accept(3, true, 1)).toBe('new');
  });

  it('takes a lower sequence without RETRANSMITTED (a restarted peer starts again at 1)', () => {
    const r = new RxSequence();
    r.accept(1, false, 0);
    r.accept(2, false, 0);
    expect(r.accept(1, false, 0)).toBe('new');
    expect(r.next).toBe(2);
  });

  it("a moved message raises its origin's floor; a late native copy, or a second moved copy, is a dup", () => {
    const origin = new RxSequence();
    const here = new RxSequence();
    origin.accept(1, false, 0);
    // Messages 2..3 of the origin path arrive moved over `here` (as its 1 and 2).
    expect(here.accept(1, false, 0, true, origin, 2)).toBe('new');
    expect(here.accept(2, false, 0, true, origin, 3)).toBe('new');
    expect(origin.movedFloor).toBe(4);
    expect(here.nativeNextSeq).toBe(0); // moved messages are not native here
    // The origin's old carrier still delivers its 2 and 3: copies; its 4 is new.
    expect(origin.accept(2, false, 0)).toBe('dup');
    expect(origin.accept(3, false, 0)).toBe('dup');
    expect(origin.next).toBe(4);
    expect(origin.accept(4, false, 0)).toBe('new');
    // The same original message moved again (say after another failover): a copy.
    expect(here.accept(3, false, 0, true, origin, 3)).toBe('dup');
    expect(here.next).toBe(4);
    // Below what the origin accepted natively: a copy too.
    expect(here.accept(4, false, 0, true, origin, 1)).toBe('dup');
  });

  it('a message moved away before it went out, coming back after later messages of its origin went natively, is delivered, not taken for a copy', () => {
    // Seen in the soak: lane 0 numbered a message 645, failover moved it to another lane before
    // it went out, lane 0 came back and sent 646..724 natively, then the moved message returned
    // (origin 0, 645). Taken for a copy of something lane 0 had (645 < 725), it was dropped and
    // reported read: confirmed, never delivered.
    const lane0 = new RxSequence();
    const other = new RxSequence();
    for (let s = 1; s <= 644; s++) lane0.accept(s, false, 0);
    for (let s = 646; s <= 724; s++) expect(lane0.accept(s, false, 0)).toBe('new');
    expect(lane0.accept(903, false, 0, true, lane0, 645)).toBe('new');
    // Now it did arrive: the same original again is a copy, over any lane.
    expect(other.accept(1, false, 0, true, lane0, 645)).toBe('dup');
    // And something lane 0 really had is still a copy.
    expect(other.accept(2, false, 0, true, lane0, 700)).toBe('dup');
  });

  it('holes are bounded: a peer whose numbers jump on every frame leaves at most MAX_HOLE_RANGES ranges, the older count as arrived', () => {
    const r = new RxSequence();
    // 300 jumps of a million each: 300 holes, only the newest 256 remembered.
    for (let k = 1; k <= 301; k++) r.accept(k * 1_000_000, false, 0);
    const here = new RxSequence();
    // A number in a remembered hole: a moved message with it is new, and then it arrived.
    expect(here.accept(1, false, 0, true, r, 300_999_999)).toBe('new');
    expect(here.accept(2, false, 0, true, r, 300_999_999)).toBe('dup');
    // Splitting a hole keeps its two sides holes.
    expect(here.accept(3, false, 0, true, r, 300_999_998)).toBe('new');
    expect(here.accept(4, false, 0, true, r, 300_000_001)).toBe('new');
    // In the oldest holes, forgotten: taken as arrived (a copy), as before holes were tracked.
    expect(here.accept(5, false, 0, true, r, 1_500_000)).toBe('dup');
    // What really arrived is a copy.
    expect(here.accept(6, false, 0, true, r, 300_000_000)).toBe('dup');
  });

  it('a moved message from a path that does not exist is delivered', () => {
    const r = new RxSequence();
    expect(r.accept(1, false, 3, true, undefined, 7)).toBe('new');
    expect(r.acceptedMessages).toBe(1);
  });

  it("reset forgets the numbering (peer restarted); restore brings a forgotten connection's back", () => {
    const r = new RxSequence();
    r.restore(10, 20, 9);
    expect([r.next, r.movedFloor, r.nativeNextSeq]).toEqual([10, 20, 9]);
    expect(r.accept(15, false, 0)).toBe('dup'); // below the floor
    r.reset();
    expect([r.next, r.movedFloor, r.nativeNextSeq]).toEqual([0, 0, 0]);
    expect(r.accept(15, false, 0)).toBe('new');
  });
});
