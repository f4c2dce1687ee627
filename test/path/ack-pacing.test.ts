import { afterEach, describe, expect, it } from 'vitest';
import { RDS_FLAG_ACK_REQUIRED, RDSSOCK_CAP_ACK, RDSSOCK_CAP_NO_HELLO } from '../../lib/constants.js';
import { ACK_CUT_TURNS } from '../../lib/core/ext/ack-pacing.js';
import type { RdsStack } from '../../lib/core/stack.js';
import { fakeConn, turn, until } from './fake-transport.js';

let stack: RdsStack | null = null;
afterEach(async () => {
  await stack?.close();
  stack = null;
});

const owner = { messageDone() {} };

async function ackPath(opts = {}) {
  const f = fakeConn({ heartbeatIntervalMs: 0, ...opts });
  stack = f.stack;
  const cp = f.conn.paths[0]!;
  cp.connectIfDown();
  cp.connectComplete();
  f.conn.handshake.settle(RDSSOCK_CAP_ACK | RDSSOCK_CAP_NO_HELLO);
  await turn();
  cp.tx.ackThrough(cp.tx.nextTxSeq - 1); // the probe
  f.t.sent.length = 0;
  f.t.controls.length = 0;
  return { ...f, cp };
}

describe('AckPacer: acknowledgements between rds-socket peers', () => {
  it('asks for an ack every maxUnackedPackets messages and on the last of a burst', async () => {
    const { t, cp } = await ackPath({ maxUnackedPackets: 3 });
    for (let i = 0; i < 7; i++) cp.tx.queue(Buffer.from('x'), 1, 4000, 4001, owner);
    await turn();
    const asked = t.sent.map((s) => (s.flags & RDS_FLAG_ACK_REQUIRED) !== 0);
    expect(asked).toEqual([false, false, true, false, false, true, true]);
  });

  it("puts no ack in h_ack before the peer's generation arrived on this carrier, then its ack", async () => {
    const { t, cp } = await ackPath();
    cp.acks.recordReceived(1, true, false);
    cp.acks.recordReceived(2, true, false);
    cp.tx.queue(Buffer.from('x'), 1, 4000, 4001, owner);
    await turn();
    expect(t.sent[0]!.ack).toBe(0n);
    expect(t.controls).toEqual([]); // no ack-only frame either
    cp.acks.helloReceived();
    cp.tx.queue(Buffer.from('x'), 1, 4000, 4001, owner);
    await turn();
    expect(t.sent[1]!.ack).toBe(2n);
  });

  it("a heartbeat's ACK_REQUIRED gets an ack-only frame back; one frame in flight at a time", async () => {
    const { t, cp } = await ackPath();
    cp.acks.helloReceived();
    cp.acks.recordReceived(1, true, false);
    cp.acks.forceAck();
    cp.acks.forceAck();
    await until(() => t.controls.length > 0, 'an ack-only frame');
    await turn();
    expect(t.controls.length).toBe(1);
    expect(t.controls[0]!.header.readBigUInt64BE(8)).toBe(1n);
    expect(cp.acks.acksSent).toBe(1);
  });

  it('a carrier cut short by its read-turn budget: the ack waits for the end of the burst, at most ACK_CUT_TURNS turns', async () => {
    const { t, cp } = await ackPath();
    cp.acks.helloReceived();
    await turn();
    t.controls.length = 0;
    let seq = 0;
    // One turn of the receive path: messages asking for an ack, the carrier stopped for its budget or not.
    const readTurn = async (cut: boolean) => {
      cp.acks.recordReceived(++seq, true, true);
      if (cut) cp.acks.readCut();
      await turn();
    };
    for (let i = 0; i < ACK_CUT_TURNS - 1; i++) await readTurn(true);
    expect(t.controls.length).toBe(0);
    await readTurn(true); // the ACK_CUT_TURNS-th in a row is answered
    await until(() => t.controls.length === 1, 'the ack after ACK_CUT_TURNS cut turns');
    expect(t.controls[0]!.header.readBigUInt64BE(8)).toBe(BigInt(seq));
    // The burst ends: a cut turn, then nothing more to read: the held ack goes out one turn later.
    await readTurn(true);
    expect(t.controls.length).toBe(1);
    await until(() => t.controls.length === 2, 'the held ack once the burst ended');
    expect(t.controls[1]!.header.readBigUInt64BE(8)).toBe(BigInt(seq));
    // A turn that was not cut is answered at once, as before.
    await readTurn(false);
    await until(() => t.controls.length === 3, 'the ack of a turn not cut');
    // A heartbeat's request is never held.
    cp.acks.forceAck();
    cp.acks.readCut();
    await turn();
    await until(() => t.controls.length === 4, "the heartbeat's answer");
  });

  it('a kernel peer is never tracked for acknowledgement', async () => {
    const f = fakeConn();
    stack = f.stack;
    const cp = f.conn.paths[0]!;
    f.conn.handshake.settle(0);
    expect(cp.acks.recordReceived(1, false, true)).toBeNull();
    expect(cp.acks.rx.pending).toBe(0);
  });
});
