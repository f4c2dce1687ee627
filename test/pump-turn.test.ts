import { describe, expect, it } from 'vitest';
import { PumpTurn } from '../lib/core/pump-turn.js';
import { RdsSocket, RdsStack } from '../lib/index.js';
import { cleanupsPerTest, TEST_TCP_PORT } from './helpers.js';

// When a path's pump runs (lib/core/pump-turn.ts). Addresses: 127.147.9.x (this file only).

const cleanups = cleanupsPerTest();
const turnEnd = (): Promise<void> => new Promise((r) => setImmediate(r));

/** A PumpTurn over a fake path: `queue(n)` queues n messages, each schedules the pump. */
function fakePath() {
  let queued = 0;
  let moved = 0;
  const pumps: number[] = [];
  const turn = new PumpTurn(
    () => {
      pumps.push(queued);
      moved += queued;
      queued = 0;
    },
    () => moved,
  );
  return {
    pumps,
    queue(n: number, bytes = 1024): void {
      for (let i = 0; i < n; i++) {
        queued++;
        turn.schedule(bytes);
      }
    },
  };
}

describe('PumpTurn: one pump per turn for a stream, at once for single messages', () => {
  it('pumps a lone message in a microtask, before the turn ends', async () => {
    const p = fakePath();
    p.queue(1);
    await Promise.resolve();
    expect(p.pumps).toEqual([1]);
  });

  it('batches messages queued one per microtask (a loop of awaited sends) into one pump at the turn end', async () => {
    const p = fakePath();
    for (let i = 0; i < 50; i++) {
      p.queue(1);
      await Promise.resolve();
    }
    // The first went at once (the path carried single messages); the rest wait for the turn.
    expect(p.pumps).toEqual([1]);
    await turnEnd();
    expect(p.pumps).toEqual([1, 49]);
    // The path is now a stream: the next turn's first message waits for the turn's end too.
    p.queue(1);
    await Promise.resolve();
    expect(p.pumps).toEqual([1, 49]);
    await turnEnd();
    expect(p.pumps).toEqual([1, 49, 1]);
    // A turn that moved one message makes the next one eager again.
    p.queue(1);
    await Promise.resolve();
    expect(p.pumps).toEqual([1, 49, 1, 1]);
  });

  it('pumps without waiting for the turn once 64 KiB are queued', async () => {
    const p = fakePath();
    p.queue(1);
    await Promise.resolve();
    for (let i = 0; i < 100; i++) {
      p.queue(1, 4096);
      await Promise.resolve();
    }
    // 16 messages of 4 KiB make 64 KiB: pumped in the microtask after the 16th.
    expect(p.pumps.slice(0, 3)).toEqual([1, 16, 16]);
    await turnEnd();
    expect(p.pumps.reduce((a, b) => a + b, 0)).toBe(101);
  });
});

describe('a loop of awaited send()s', () => {
  it('leaves in a few batches, not one pump per message', async () => {
    // Between two sockets of one stack (the loopback transport, which takes every message at
    // once): over TCP within one process the socket's buffer fills and hides the pump's timing.
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0 });
    cleanups.push(() => A.close());
    const tx = new RdsSocket({ stack: A });
    await tx.bind({ address: '127.147.9.1', port: 4000 });
    tx.setsockopt(1, 7, 4 << 20); // SOL_SOCKET, SO_SNDBUF: room for every message
    const rx = new RdsSocket({ stack: A });
    await rx.bind({ address: '127.147.9.1', port: 5000 });
    rx.setsockopt(1, 8, 4 << 20); // SO_RCVBUF
    const to = rx.address();
    // The path is up and carrying single messages before the loop.
    await tx.send(Buffer.from('hello'), to);
    await rx.recv({ timeout: 5000 });
    const before = A.counters.get('send_queue_empty');
    const data = Buffer.alloc(1024, 7);
    for (let i = 0; i < 300; i++) await tx.send(data, to);
    for (let i = 0; i < 300; i++) expect((await rx.recv({ timeout: 5000 })).data.length).toBe(1024);
    // Each pump that empties the send queue counts once. One per message was 300 (the pump ran
    // in the microtask each await let through); now the first, one per 64 KiB, one at the turn end.
    expect(A.counters.get('send_queue_empty') - before).toBeLessThan(20);
  });
});
