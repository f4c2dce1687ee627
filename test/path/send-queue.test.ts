import { afterEach, describe, expect, it } from 'vitest';
import { RDS_FLAG_RETRANSMITTED } from '../../lib/constants.js';
import type { SendOwner } from '../../lib/core/message.js';
import type { RdsStack } from '../../lib/core/stack.js';
import { fakeConn, turn } from './fake-transport.js';

let stack: RdsStack | null = null;
afterEach(async () => {
  await stack?.close();
  stack = null;
});

const owner = (): SendOwner & { done: number } => ({
  done: 0,
  messageDone() {
    this.done++;
  },
});

/** A path that is UP with its probe and map already out, on a loopback-free fake connection. */
async function upPath(opts = {}) {
  const f = fakeConn(opts);
  stack = f.stack;
  const cp = f.conn.paths[0]!;
  cp.connectIfDown();
  cp.connectComplete();
  await turn();
  // The probe queued when the path came up is out: acknowledge it, so only the test's messages remain.
  cp.tx.ackThrough(cp.tx.nextTxSeq - 1);
  f.t.sent.length = 0;
  return { ...f, cp };
}

describe('PathSend: the send queue and pump (send.c)', () => {
  it('numbers messages at enqueue and sends them in order, one pump per turn', async () => {
    const { t, cp } = await upPath();
    const o = owner();
    const first = cp.tx.nextTxSeq;
    const sentBefore = cp.tx.sentMessages;
    for (let i = 0; i < 5; i++) cp.tx.queue(Buffer.from('x'), 1, 4000, 4001, o);
    expect(cp.tx.nextTxSeq).toBe(first + 5);
    expect(t.sent).toEqual([]);
    await turn();
    expect(t.sent.map((s) => s.seq)).toEqual([first, first + 1, first + 2, first + 3, first + 4]);
    expect(cp.tx.sentMessages - sentBefore).toBe(5);
    expect(cp.tx.pendingCount()).toEqual({ send: 0, retrans: 5 });
    expect(cp.tx.hasPendingData()).toBe(true);
  });

  it('stops when the transport is full and goes on when it kicks', async () => {
    const { t, cp } = await upPath();
    const o = owner();
    t.accept = false;
    for (let i = 0; i < 3; i++) cp.tx.queue(Buffer.from('x'), 1, 4000, 4001, o);
    await turn();
    expect(t.sent.length).toBe(1);
    cp.tx.queue(Buffer.from('x'), 1, 4000, 4001, o);
    await turn();
    expect(t.sent.length).toBe(1); // still blocked: queueing does not unblock
    t.accept = true;
    cp.tx.kick();
    await turn();
    expect(t.sent.length).toBe(4);
  });

  it('an ack frees messages in order and returns them to their owner', async () => {
    const { cp } = await upPath();
    const o = owner();
    const acked = cp.tx.latency.histogram.reduce((a, b) => a + b, 0);
    const msgs = [0, 1, 2].map(() => cp.tx.queue(Buffer.from('x'), 1, 4000, 4001, o));
    await turn();
    cp.tx.ackThrough(msgs[1]!.seq);
    expect(o.done).toBe(2);
    expect(cp.tx.oldestUnacked()).toBe(msgs[2]!.seq);
    cp.tx.ackThrough(msgs[2]!.seq);
    expect(cp.tx.oldestUnacked()).toBeUndefined();
    expect(cp.tx.hasPendingData()).toBe(false);
    expect(cp.tx.latency.histogram.reduce((a, b) => a + b, 0) - acked).toBe(3);
  });

  it('a new carrier resends what was not acknowledged first, flagged RETRANSMITTED, with its sequence', async () => {
    const { t, cp } = await upPath();
    const o = owner();
    const a = cp.tx.queue(Buffer.from('a'), 1, 4000, 4001, o);
    await turn();
    const b = cp.tx.queue(Buffer.from('b'), 1, 4000, 4001, o);
    cp.connectComplete(); // a replacing carrier: UP -> RESETTING -> UP
    await turn();
    // Then the probe the new carrier queues.
    const resent = t.sent.slice(1);
    expect(resent.map((s) => s.seq)).toEqual([a.seq, b.seq, b.seq + 1]);
    expect(resent[0]!.flags & RDS_FLAG_RETRANSMITTED).toBe(RDS_FLAG_RETRANSMITTED);
    expect(resent[1]!.flags & RDS_FLAG_RETRANSMITTED).toBe(0);
  });

  it('a cancelled message is skipped; control messages stop at maxOwnQueued', async () => {
    const { t, cp } = await upPath({ maxOwnQueued: 2 });
    const o = owner();
    const m = cp.tx.queue(Buffer.from('x'), 1, 4000, 4001, o);
    m.complete(new Error('cancelled'));
    const own = cp.tx.own.queued;
    let queued = 0;
    for (let i = 0; i < 5; i++) if (cp.tx.queueControl(0, 9) !== null) queued++;
    expect(own + queued).toBe(2);
    await turn();
    expect(t.sent.some((s) => s.seq === m.seq)).toBe(false);
  });
});
