import { describe, expect, it } from 'vitest';
import { RDS_CONN_DOWN, RDS_CONN_UP } from '../lib/constants.js';
import type { RdsConnection } from '../lib/core/connection.js';
import { ConnFailover } from '../lib/core/ext/failover.js';
import { Fifo } from '../lib/core/fifo.js';
import type { RdsConnPath } from '../lib/core/path.js';

// Failover holds must never wait on each other (issue #35, the replay of nemesis seed 6067, host
// node 2 to embedded node 6, d2.log): lane 3 failed over to lane 4 and came back behind it; path 0
// failed over to lane 3 and came back behind lane 3; then lane 4 failed over to path 0, the lowest
// path up, and lane 3's hold on lane 4 became a hold on path 0, which held behind lane 3. Neither
// sent again (the node sent that peer nothing for 6 s), and after the peer restarted a socket's
// later message was read before its earlier ones. The relation is driven here through the paths'
// send queues as the failover sees them (sequence numbers, what is still unacknowledged), which
// is all it reads of a path.

interface Msg {
  seq: number;
  done: boolean;
  movable: boolean;
  tag: string;
}

/** The part of a path's send side that ConnFailover uses. */
class Tx {
  readonly sendQueue = new Fifo<Msg>();
  nextTxSeq = 1;
  queue(tag: string): void {
    this.sendQueue.push({ seq: this.nextTxSeq++, done: false, movable: true, tag });
  }
  adopt(m: Msg): void {
    m.seq = this.nextTxSeq++;
    this.sendQueue.push(m);
  }
  /** As PathSend.adoptAhead with nothing sent on this path yet: `msgs` first, the rest renumbered after. */
  adoptAhead(msgs: Msg[]): (seq: number) => number {
    const held = this.sendQueue.drain();
    const first = held[0]?.seq ?? this.nextTxSeq;
    this.nextTxSeq = first;
    for (const m of msgs) this.adopt(m);
    const shift = msgs.length;
    for (const m of held) this.adopt(m);
    return (seq) => (seq >= first ? seq + shift : seq);
  }
  oldestInCarrier(): number | undefined {
    for (const m of this.sendQueue) if (!m.done) return m.seq;
    return undefined;
  }
  schedulePump(): void {}
  kick(): void {}
  tags(): string[] {
    return [...this.sendQueue].map((m) => m.tag);
  }
}

interface FakePath {
  index: number;
  state: number;
  tx: Tx;
}

function connWith(n: number): { fo: ConnFailover; p: FakePath[] } {
  const p: FakePath[] = Array.from({ length: n }, (_, index) => ({ index, state: RDS_CONN_UP, tx: new Tx() }));
  const conn = {
    npaths: n,
    pathSlots: n,
    pathIf: (i: number) => p[i],
    handshake: { failoverAllowed: true },
    stack: {
      options: { failoverGraceMs: 100 },
      counters: { add: () => {} },
      pathEvents: { failedOver: () => {} },
      referenced: false,
    },
  };
  return { fo: new ConnFailover(conn as unknown as RdsConnection), p };
}

const asPath = (x: FakePath) => x as unknown as RdsConnPath;

describe('failover holds that would wait on each other', () => {
  it('a dead path that a live one waits behind moves there, ahead of what it holds: no cycle', () => {
    const { fo, p } = connWith(4);
    const [p0, l1, l2] = [asPath(p[0]!), asPath(p[1]!), asPath(p[2]!)];
    // Path 0 down (empty); lane 1 down with s1's #1: it fails over to lane 2, the only path up.
    p[0]!.state = RDS_CONN_DOWN;
    p[1]!.state = RDS_CONN_DOWN;
    p[3]!.state = RDS_CONN_DOWN;
    p[1]!.tx.queue('s1#1');
    fo.failOver(l1);
    expect(fo.failedOverTo(l1)).toBe(l2);
    // Lane 1 back: behind lane 2, where s1's #1 waits.
    p[1]!.state = RDS_CONN_UP;
    fo.returned(l1);
    expect(fo.currentHold(l1)).toBe(l2);
    // Path 0 goes down with s0's #1, which fails over to lane 1 (the lowest path up); path 0 back,
    // behind lane 1, and s0's #2 waits on it.
    p[0]!.tx.queue('s0#1');
    fo.failOver(p0);
    expect(fo.failedOverTo(p0)).toBe(l1);
    p[0]!.state = RDS_CONN_UP;
    fo.returned(p0);
    p[0]!.tx.queue('s0#2');
    expect(fo.currentHold(p0)).toBe(l1);
    // Lane 2 dies with s1's #1 and s2's #1.
    p[2]!.tx.queue('s2#1');
    p[2]!.state = RDS_CONN_DOWN;
    fo.failOver(l2);
    // Lane 1 waits behind lane 2 and is up: lane 2's messages go there, ahead of s0's #1.
    expect(fo.failedOverTo(l2)).toBe(l1);
    expect(p[1]!.tx.tags()).toEqual(['s1#1', 's2#1', 's0#1']);
    expect(fo.currentHold(l1), 'lane 1 waits for nothing').toBe(null);
    // Path 0 still waits behind lane 1, up to s0's #1 (renumbered): no path waits on one that waits on it.
    expect(fo.currentHold(p0)).toBe(l1);
    p[1]!.tx.sendQueue.peek()!.done = true;
    p[1]!.tx.sendQueue.shift();
    p[1]!.tx.sendQueue.shift();
    expect(fo.held(p0), 's0 #2 waits for s0 #1').toBe(true);
    p[1]!.tx.sendQueue.shift();
    expect(fo.held(p0), 'then goes').toBe(false);
  });

  it('with no live path waiting behind it, a dead path goes to the lowest path up, as before', () => {
    const { fo, p } = connWith(4);
    p[2]!.state = RDS_CONN_DOWN;
    p[2]!.tx.queue('x');
    fo.failOver(asPath(p[2]!));
    expect(fo.failedOverTo(asPath(p[2]!))).toBe(asPath(p[0]!));
    expect(p[0]!.tx.tags()).toEqual(['x']);
  });
});
