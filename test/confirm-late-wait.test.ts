import { describe, expect, it } from 'vitest';
import { type RdsError, RdsSocket, RdsStack } from '../lib/index.js';
import type { Confirmation } from '../lib/core/socket-backend.js';
import { cleanupsPerTest, payload, TEST_TCP_PORT } from './helpers.js';

// A confirmation is registered on its message when the message is queued, not when the caller
// starts waiting: a wait that begins after the message was handed over (and acknowledged as
// queued) must still wait for the read, and an outcome that came before it is the one it gets.
// Before, such a message was completed as plainly acknowledged and a late wait resolved at once:
// "confirmed", unread. Co-located sockets (the loopback transport hands a message over in one
// turn). Addresses: 127.137.x.y (this file only).

const cleanups = cleanupsPerTest();

async function pair(n: number): Promise<{ a: RdsSocket; b: RdsSocket; dest: { address: string; port: number } }> {
  const S = new RdsStack({ tcpPort: TEST_TCP_PORT });
  cleanups.push(() => S.close());
  const a = new RdsSocket({ stack: S });
  await a.bind({ address: `127.137.${n}.1`, port: 4000 });
  const b = new RdsSocket({ stack: S });
  await b.bind({ address: `127.137.${n}.1`, port: 4001 });
  return { a, b, dest: { address: `127.137.${n}.1`, port: 4001 } };
}

/** send({ confirm }) without its wait: the message is queued now, the caller waits later. */
function queueConfirmed(a: RdsSocket, data: Buffer, dest: { address: string; port: number }): Confirmation {
  return a.enqueue(data, dest, undefined, true) as Confirmation;
}

describe('a confirmation waited for after its message was handed over', () => {
  it('waits for the read, not the hand-over: unread, it does not resolve; read, it does', async () => {
    const { a, b, dest } = await pair(1);
    const c = queueConfirmed(a, payload(1, 64), dest);
    await a.flush({ timeout: 5000 }); // handed over and acknowledged as queued; unread
    expect(b.poll() & 1, 'queued at the receiver').toBe(1);
    let settled: string | null = null;
    const w = c.wait().then(
      () => void (settled = 'ok'),
      (e: RdsError) => void (settled = e.code),
    );
    // Read by nobody yet: a wait that resolved here would be a confirmation of an unread message.
    await new Promise<void>((r) => setImmediate(r));
    expect(settled).toBe(null);
    expect(b.recvmsg()!.data.readUInt32BE(0)).toBe(1);
    await w;
    expect(settled).toBe('ok');
  });

  it('a message discarded unread before the wait began: the late wait rejects ECONNRESET', async () => {
    const { a, b, dest } = await pair(2);
    const c = queueConfirmed(a, payload(2, 64), dest);
    await a.flush({ timeout: 5000 });
    await b.close();
    const err = await c.wait().then(
      () => 'ok',
      (e: RdsError) => e.code,
    );
    expect(err).toBe('ECONNRESET');
  });

  it('a message refused (no socket at the port) before the wait began: the late wait rejects ECONNREFUSED', async () => {
    const { a, dest } = await pair(3);
    const c = queueConfirmed(a, payload(3, 64), { ...dest, port: 4999 });
    await a.flush({ timeout: 5000 });
    const err = await c.wait().then(
      () => 'ok',
      (e: RdsError) => e.code,
    );
    expect(err).toBe('ECONNREFUSED');
  });
});
