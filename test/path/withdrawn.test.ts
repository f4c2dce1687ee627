import { afterEach, describe, expect, it } from 'vitest';
import {
  RDS_FLAG_RETRANSMITTED,
  RDSSOCK_CAP_ACK,
  RDSSOCK_CAP_CONFIRM,
  RDSSOCK_CAP_NO_HELLO,
  RDSSOCK_CAP_PATHS_SHIFT,
  RDSSOCK_CAP_WITHDRAWN,
  RDSSOCK_EXTHDR_MOVED,
  RDSSOCK_EXTHDR_WITHDRAWN,
} from '../../lib/constants.js';
import { MAX_WITHDRAWN } from '../../lib/core/ext/withdrawn.js';
import type { RdsOutgoing, SendOwner } from '../../lib/core/message.js';
import type { RdsStack } from '../../lib/core/stack.js';
import { decodeHeader, encodeHeader, OFF_EXTHDR, readU64, writeU64 } from '../../lib/wire/header.js';
import { fakeConn, turn } from './fake-transport.js';

// PathSend.reset and withdrawn records (lib/core/ext/withdrawn.ts): a message cancelled while in
// a carrier that dies leaves a header-only record in its place, for peers that take them.

let stack: RdsStack | null = null;
afterEach(async () => {
  await stack?.close();
  stack = null;
});

const owner: SendOwner = { messageDone() {} };

async function upPath(caps: number) {
  const f = fakeConn({ heartbeatIntervalMs: 0 });
  stack = f.stack;
  const cp = f.conn.paths[0]!;
  cp.connectIfDown();
  cp.connectComplete();
  f.conn.handshake.settle(caps);
  await turn();
  cp.tx.ackThrough(cp.tx.nextTxSeq - 1); // the probe
  f.t.sent.length = 0;
  return { ...f, cp };
}

const RDS_SOCKET = RDSSOCK_CAP_ACK | RDSSOCK_CAP_CONFIRM | RDSSOCK_CAP_NO_HELLO | RDSSOCK_CAP_WITHDRAWN;

/** Queues `n` one-byte messages from port 4000 to 4001 and lets the pump send them. */
async function sent(cp: Awaited<ReturnType<typeof upPath>>['cp'], n: number): Promise<RdsOutgoing[]> {
  const msgs = Array.from({ length: n }, () => cp.tx.queue(Buffer.from('x'), 1, 4000, 4001, owner));
  await turn();
  return msgs;
}

describe('withdrawn records: a cancelled message in a dead carrier keeps its place', () => {
  it('the reset puts a header-only record, RETRANSMITTED, with its number and origin, where the message was', async () => {
    const { cp, stack: s } = await upPath(RDS_SOCKET);
    const [a, b, c] = await sent(cp, 3);
    b!.complete(new Error('timed out'));
    cp.drop('test');
    const q = [...cp.tx.sendQueue];
    expect(q.map((m) => m.seq)).toEqual([a!.seq, b!.seq, c!.seq]);
    expect(q[0]).toBe(a);
    expect(q[2]).toBe(c);
    const rec = q[1]!;
    expect(rec).not.toBe(b);
    const h = decodeHeader(rec.wire);
    expect(rec.wire.length).toBe(48);
    expect([h.sequence, h.len, h.sport, h.dport]).toEqual([b!.seq, 0, 4000, 4001]);
    expect(h.flags & RDS_FLAG_RETRANSMITTED).toBe(RDS_FLAG_RETRANSMITTED);
    expect(rec.wire[OFF_EXTHDR]).toBe(RDSSOCK_EXTHDR_MOVED);
    expect(rec.wire[OFF_EXTHDR + 1]).toBe(0);
    expect(readU64(rec.wire, OFF_EXTHDR + 2)).toBe(b!.seq);
    expect(rec.wire[OFF_EXTHDR + 10]).toBe(RDSSOCK_EXTHDR_WITHDRAWN);
    expect(s.counters.get('send_withdrawn')).toBe(1);
    // It holds the place for ordering (what waits behind the path waits for it) ...
    a!.complete();
    c!.complete();
    expect(cp.tx.oldestInCarrier()).toBe(b!.seq);
    // ... but is not data the peer must be reached for.
    expect(cp.tx.hasPendingData()).toBe(false);
    // An acknowledgement frees it like any message.
    cp.connectComplete();
    await turn();
    cp.tx.ackThrough(cp.tx.nextTxSeq - 1);
    expect(cp.tx.withdrawn.outstanding).toBe(0);
    expect(cp.tx.oldestInCarrier()).toBeUndefined();
  });

  it('cancelled after the reset, while waiting to be resent: its record goes out in its place', async () => {
    const { cp, t, stack: s } = await upPath(RDS_SOCKET);
    const [a, b, c] = await sent(cp, 3);
    cp.drop('test');
    // b waits in the send queue to be resent (its first copy is in the dead carrier) when it is cancelled.
    b!.complete(new Error('timed out'));
    a!.complete();
    c!.complete();
    expect(cp.tx.oldestInCarrier()).toBe(b!.seq);
    expect(cp.tx.hasPendingData()).toBe(false);
    t.sent.length = 0;
    cp.connectIfDown();
    cp.connectComplete();
    await turn();
    const out = t.sent.filter((f) => f.seq === b!.seq);
    expect(out.length).toBe(1);
    expect(out[0]!.flags & RDS_FLAG_RETRANSMITTED).toBe(RDS_FLAG_RETRANSMITTED);
    const rec = [...cp.tx.retrans].find((m) => m.seq === b!.seq)!;
    expect(rec).not.toBe(b);
    expect(rec.len).toBe(0);
    expect(rec.wire[OFF_EXTHDR + 10]).toBe(RDSSOCK_EXTHDR_WITHDRAWN);
    expect(s.counters.get('send_withdrawn')).toBe(1);
  });

  it('a message cancelled before it ever went out leaves nothing', async () => {
    const { cp, t, stack: s } = await upPath(RDS_SOCKET);
    t.accept = false;
    const [a, b] = await sent(cp, 2); // the transport took a only
    b!.complete(new Error('timed out'));
    cp.drop('test');
    expect([...cp.tx.sendQueue]).toEqual([a, b]);
    cp.connectIfDown();
    cp.connectComplete();
    t.accept = true;
    t.sent.length = 0;
    await turn();
    expect(t.sent.map((f) => f.seq)).not.toContain(b!.seq);
    expect(s.counters.get('send_withdrawn')).toBe(0);
  });

  it('a moved message keeps the origin its MOVED record named', async () => {
    const { cp } = await upPath(RDS_SOCKET);
    const m = cp.tx.queue(Buffer.from('x'), 1, 4000, 4001, owner);
    const origin = m.seq;
    // As a failover from another path would leave it: numbered anew here, first numbered there.
    const lane = cp.conn.path(1)!;
    m.path = lane;
    m.moveTo(cp, cp.tx.takeSeq());
    cp.tx.sendQueue.shift();
    cp.tx.sendQueue.push(m);
    await turn();
    m.complete(new Error('timed out'));
    cp.drop('test');
    const rec = [...cp.tx.sendQueue][0]!;
    expect(rec.seq).toBe(m.seq);
    expect(rec.wire[OFF_EXTHDR + 1]).toBe(1);
    expect(readU64(rec.wire, OFF_EXTHDR + 2)).toBe(origin);
    // The record moves on in turn (its path dies too): it still names the message's origin.
    rec.moveTo(lane, lane.tx.takeSeq());
    expect([rec.originPath, rec.originSeq]).toEqual([1, origin]);
    expect(rec.wire[OFF_EXTHDR + 1]).toBe(1);
    expect(readU64(rec.wire, OFF_EXTHDR + 2)).toBe(origin);
  });

  it('a kernel (no RDSSOCK_CAP_WITHDRAWN) never gets one: the cancelled message is forgotten, as the kernel does', async () => {
    const { cp, stack: s } = await upPath(RDSSOCK_CAP_ACK | RDSSOCK_CAP_CONFIRM | RDSSOCK_CAP_NO_HELLO);
    const [a, b, c] = await sent(cp, 3);
    b!.complete(new Error('timed out'));
    cp.drop('test');
    expect([...cp.tx.sendQueue]).toEqual([a, c]);
    expect(s.counters.get('send_withdrawn')).toBe(0);
  });

  it('a path keeps at most MAX_WITHDRAWN unacknowledged: past it, cancelled messages are forgotten', async () => {
    const { cp, stack: s } = await upPath(RDS_SOCKET);
    const msgs = await sent(cp, MAX_WITHDRAWN + 5);
    for (const m of msgs) m.complete(new Error('timed out'));
    cp.drop('test');
    expect(cp.tx.sendQueue.length).toBe(MAX_WITHDRAWN);
    expect(cp.tx.withdrawn.outstanding).toBe(MAX_WITHDRAWN);
    expect(s.counters.get('send_withdrawn')).toBe(MAX_WITHDRAWN);
    // Resent and still unacknowledged at the next reset: the same records, no new ones.
    cp.connectComplete();
    await turn();
    cp.drop('again');
    expect(cp.tx.withdrawn.outstanding).toBe(MAX_WITHDRAWN);
    expect(s.counters.get('send_withdrawn')).toBe(MAX_WITHDRAWN);
  });
});

describe('withdrawn records: the receiver', () => {
  /** A frame from port 4000 to 4001 numbered `seq`; `moved`: its MOVED record; `withdrawn`: the marker after it. */
  function frame(seq: number, data: string, moved?: [number, number], withdrawn = false): [Buffer, Buffer] {
    const h = Buffer.alloc(48);
    encodeHeader(h, 0, { sequence: seq, len: data.length, sport: 4000, dport: 4001 });
    if (moved !== undefined) {
      h[OFF_EXTHDR] = RDSSOCK_EXTHDR_MOVED;
      h[OFF_EXTHDR + 1] = moved[0];
      writeU64(h, OFF_EXTHDR + 2, moved[1]);
      if (withdrawn) h[OFF_EXTHDR + 10] = RDSSOCK_EXTHDR_WITHDRAWN;
    }
    return [h, Buffer.from(data)];
  }

  /** An rds-socket peer's connection, path 0 up; nothing is bound at port 4001, so what would be delivered counts recv_drop_no_sock. */
  function peer(npaths: number) {
    const f = fakeConn({ heartbeatIntervalMs: 0, npaths });
    stack = f.stack;
    const p0 = f.conn.path(0)!;
    p0.connectIfDown();
    p0.connectComplete();
    f.conn.handshake.settle(RDS_SOCKET | (npaths << RDSSOCK_CAP_PATHS_SHIFT));
    const count = (n: 'recv_withdrawn' | 'recv_drop_moved_dup' | 'recv_drop_no_sock') => f.stack.counters.get(n);
    return { ...f, p0, count };
  }

  it('counts the original number as arrived, delivers nothing, and drops the late copy as a duplicate', () => {
    const { stack: s, conn, p0, count } = peer(2);
    const p1 = conn.path(1)!;
    // Lane 1's number 5 was withdrawn; its record came over path 0 (a failover moved it there).
    s.recvIncoming(p0, ...frame(10, '', [1, 5], true));
    expect([count('recv_withdrawn'), count('recv_drop_no_sock')]).toEqual([1, 0]);
    // The late copy in lane 1's dead carrier, then a moved copy of it: both duplicates.
    s.recvIncoming(p1, ...frame(5, 'late'));
    s.recvIncoming(p0, ...frame(11, 'late', [1, 5]));
    expect([count('recv_drop_moved_dup'), count('recv_drop_no_sock')]).toEqual([2, 0]);
    // What lane 1 numbered after it goes on to delivery.
    s.recvIncoming(p1, ...frame(6, 'next'));
    expect(count('recv_drop_no_sock')).toBe(1);
  });

  it('a record whose message already arrived is itself the duplicate', () => {
    const { stack: s, p0, count } = peer(1);
    s.recvIncoming(p0, ...frame(7, 'first'));
    s.recvIncoming(p0, ...frame(9, '', [0, 7], true));
    expect([count('recv_drop_no_sock'), count('recv_withdrawn'), count('recv_drop_moved_dup')]).toEqual([1, 0, 1]);
  });
});
