import { afterEach, describe, expect, it } from 'vitest';
import {
  RDS_CONN_UP,
  RDSSOCK_CAP_ACK,
  RDSSOCK_CAP_FAILOVER,
  RDSSOCK_CAP_NO_HELLO,
  RDSSOCK_CAP_PATHS_SHIFT,
  RDSSOCK_EXTHDR_MOVED,
} from '../../lib/constants.js';
import type { RdsStack } from '../../lib/core/stack.js';
import { fakeConn, turn, until } from './fake-transport.js';

let stack: RdsStack | null = null;
afterEach(async () => {
  await stack?.close();
  stack = null;
});

const owner = { messageDone() {} };

/** Two lanes up between rds-socket peers that fail over, nothing in flight. */
async function twoLanes(caps = RDSSOCK_CAP_ACK | RDSSOCK_CAP_FAILOVER | RDSSOCK_CAP_NO_HELLO) {
  const f = fakeConn({ npaths: 2, failoverGraceMs: 10, heartbeatIntervalMs: 0 });
  stack = f.stack;
  const [p0, p1] = f.conn.paths as [(typeof f.conn.paths)[0], (typeof f.conn.paths)[0]];
  p0!.connectIfDown();
  p0!.connectComplete();
  f.conn.handshake.settle(caps | (2 << RDSSOCK_CAP_PATHS_SHIFT));
  p0!.pongReceived(); // opens lane 1
  expect(f.t.connects).toEqual([0, 1]);
  p1!.connectComplete();
  await turn();
  p0!.tx.ackThrough(p0!.tx.nextTxSeq - 1);
  p1!.tx.ackThrough(p1!.tx.nextTxSeq - 1);
  f.t.sent.length = 0;
  return { ...f, p0: p0!, p1: p1! };
}

describe('ConnFailover: failover between the paths of a connection', () => {
  it('a lane down past its grace period hands its messages to a live lane, numbered there, with a record of their origin', async () => {
    const { t, conn, p0, p1, stack: s } = await twoLanes();
    p1.drop('test'); // reconnect attempts never complete on the fake transport
    const msgs = [0, 1, 2].map(() => p1.tx.queue(Buffer.from('m'), 1, 4000, 4001, owner));
    const origSeqs = msgs.map((m) => m.seq);
    await until(() => p1.conn.failover.failedOverTo(p1) === p0, 'failover');
    expect(conn.failover.redirect(p1)).toBe(p0);
    expect(p1.conn.failover.movedBy(p1)).toBe(3);
    expect(s.counters.get('failover_moved')).toBe(3);
    expect(msgs.every((m) => m.path === p0)).toBe(true);
    await turn();
    const moved = msgs.map((m) => [m.wire[32], m.wire[33], m.wire.readBigUInt64BE(34)]);
    expect(moved).toEqual(origSeqs.map((q) => [RDSSOCK_EXTHDR_MOVED, 1, BigInt(q)]));
    expect(t.sent.filter((x) => x.path === 0).map((x) => x.seq)).toEqual(msgs.map((m) => m.seq));
  });

  it('a lane back from failover waits behind what went ahead on the other lane', async () => {
    const { t, p0, p1 } = await twoLanes();
    p1.drop('test');
    const moved = p1.tx.queue(Buffer.from('m'), 1, 4000, 4001, owner);
    await until(() => p1.conn.failover.failedOverTo(p1) === p0, 'failover');
    await turn();
    p1.connectComplete();
    expect(p1.state).toBe(RDS_CONN_UP);
    expect(p1.conn.failover.failedOverTo(p1)).toBeNull();
    expect(p1.conn.failover.holdingBehind(p1)).toBe(p0);
    const later = p1.tx.queue(Buffer.from('n'), 1, 4000, 4001, owner);
    await turn();
    expect(t.sent.some((x) => x.path === 1 && x.seq === later.seq)).toBe(false);
    p0.tx.ackThrough(moved.seq);
    await turn();
    expect(t.sent.some((x) => x.path === 1 && x.seq === later.seq)).toBe(true);
  });

  it('never between peers without the capability: messages wait for their own lane', async () => {
    const { p1, conn } = await twoLanes(RDSSOCK_CAP_ACK | RDSSOCK_CAP_NO_HELLO);
    p1.drop('test');
    p1.tx.queue(Buffer.from('m'), 1, 4000, 4001, owner);
    await new Promise((r) => setTimeout(r, 40));
    expect(p1.conn.failover.failedOverTo(p1)).toBeNull();
    expect(conn.failover.redirect(p1)).toBe(p1);
    expect(p1.tx.sendQueue.length).toBe(1);
  });

  // Lanes > 0 are made when first used (RdsConnection.path): one made after the fan-out must wait
  // exactly as it would have had it existed then.
  async function fannedOut() {
    const f = fakeConn({ npaths: 8, failoverGraceMs: 10, heartbeatIntervalMs: 0 });
    stack = f.stack;
    const p0 = f.conn.path(0)!;
    p0.connectIfDown();
    p0.connectComplete();
    // Queued before the path count is known: it goes on lane 0, unacknowledged.
    const early = p0.tx.queue(Buffer.from('m'), 1, 4000, 4001, owner);
    f.conn.handshake.settle(
      RDSSOCK_CAP_ACK | RDSSOCK_CAP_FAILOVER | RDSSOCK_CAP_NO_HELLO | (8 << RDSSOCK_CAP_PATHS_SHIFT),
    );
    expect(f.conn.npaths).toBe(8);
    expect(f.conn.pathIf(3)).toBeUndefined();
    return { ...f, p0, early };
  }

  it('a lane made after the fan-out waits behind lane 0 for what was queued before it', async () => {
    const { t, conn, p0, early } = await fannedOut();
    const p3 = conn.path(3)!;
    expect(conn.failover.holdingBehind(p3)).toBe(p0);
    p3.connectIfDown();
    p3.connectComplete();
    const later = p3.tx.queue(Buffer.from('n'), 1, 4002, 4001, owner);
    await turn();
    expect(t.sent.some((x) => x.path === 3 && x.seq === later.seq)).toBe(false);
    p0.tx.ackThrough(early.seq);
    await turn();
    expect(t.sent.some((x) => x.path === 3 && x.seq === later.seq)).toBe(true);
  });

  it('lane 0 failing over moves the hold of a lane not made yet to the live lane, as for one made', async () => {
    const { conn, p0, early } = await fannedOut();
    const p1 = conn.path(1)!;
    p1.connectIfDown();
    p1.connectComplete();
    p0.drop('test');
    await until(() => p0.conn.failover.failedOverTo(p0) === p1, 'failover');
    expect(early.path).toBe(p1);
    // The lane made now waits behind lane 1, where lane 0's messages went, not behind lane 0.
    const p5 = conn.path(5)!;
    expect(conn.failover.holdingBehind(p5)).toBe(p1);
    expect(conn.failover.currentHold(p5)).toBe(p1);
  });
});
