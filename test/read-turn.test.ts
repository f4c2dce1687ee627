import { describe, expect, it } from 'vitest';
import { READ_TURN_BYTES, READ_TURN_FRAMES, ReadTurn } from '../lib/transports/read-turn.js';

// One carrier's reads per turn of the event loop are bounded (issue #23, head-of-line): past the
// budget the carrier stops reading until the next turn, so other carriers' reads and the pings
// they carry are not queued behind megabytes of one stream. No network: the turn is setImmediate.

const nextTurn = () => new Promise<void>((r) => setImmediate(r));

function carrier(held = () => false) {
  const log: string[] = [];
  const turn = new ReadTurn(
    () => log.push('stop'),
    () => log.push('start'),
    held,
  );
  return { log, turn };
}

describe('ReadTurn: bytes read from one carrier per event-loop turn', () => {
  it('stops the carrier once a turn has read the budget, and starts it again in the next turn', async () => {
    const { log, turn } = carrier();
    const read = 64 * 1024;
    let n = 0;
    // libuv's reads of one wake-up: up to 32 of 64 KiB, each reported before the next.
    for (let i = 0; i < 32 && !turn.paused; i++) {
      turn.read(read);
      n += read;
    }
    expect(n).toBe(READ_TURN_BYTES);
    expect(log).toEqual(['stop']);
    await nextTurn();
    expect(log).toEqual(['stop', 'start']);
    expect(turn.paused).toBe(false);
    // A fresh budget: the next turn again takes the budget before it stops.
    for (let i = 0; i < READ_TURN_BYTES / read - 1; i++) turn.read(read);
    expect(log).toEqual(['stop', 'start']);
    turn.read(read);
    expect(log).toEqual(['stop', 'start', 'stop']);
  });

  it('a carrier under the budget is never stopped; small reads in many turns add nothing up', async () => {
    const { log, turn } = carrier();
    for (let t = 0; t < 20; t++) {
      for (let i = 0; i < 10; i++) turn.read(1024);
      await nextTurn();
    }
    expect(log).toEqual([]);
  });

  it('a read of many small frames stops the carrier too: a turn takes at most about READ_TURN_FRAMES frames', async () => {
    const { log, turn } = carrier();
    // 64 KiB reads of empty pings (48 bytes each): the frames, not the bytes, reach the budget.
    const perRead = Math.floor((64 * 1024) / 48);
    let reads = 0;
    while (!turn.paused && reads < 32) {
      turn.read(perRead * 48);
      turn.framesRead(perRead);
      reads++;
    }
    expect(reads).toBe(Math.ceil(READ_TURN_FRAMES / perRead));
    expect(log).toEqual(['stop']);
    await nextTurn();
    expect(log).toEqual(['stop', 'start']);
    // Fewer frames than that in a turn never stop it.
    turn.read(1024);
    turn.framesRead(READ_TURN_FRAMES - 1);
    expect(log).toEqual(['stop', 'start']);
  });

  it('a carrier the receive limits hold is not started by the next turn (the limits resume it)', async () => {
    let held = false;
    const { log, turn } = carrier(() => held);
    turn.read(READ_TURN_BYTES);
    expect(log).toEqual(['stop']);
    held = true;
    await nextTurn();
    expect(log).toEqual(['stop']);
    expect(turn.paused).toBe(false);
  });
});

describe('a TCP carrier reads at most about READ_TURN_BYTES per turn', () => {
  it('a stream of 64 KiB messages is accepted at most READ_TURN_BYTES (+ one read, one frame) per turn', async () => {
    const { RdsStack, RdsSocket, constants } = await import('../lib/index.js');
    const { TEST_TCP_PORT, until } = await import('./helpers.js');
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT, npaths: 1 });
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, npaths: 1 });
    const ticker = { stop: false };
    try {
      const mk = async (st: InstanceType<typeof RdsStack>, addr: string) => {
        const s = new RdsSocket({ stack: st });
        await s.bind({ address: addr, port: 4000 });
        s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 16 << 20);
        s.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 64 << 20);
        return s;
      };
      const a = await mk(A, '127.155.200.1');
      const b = await mk(B, '127.155.200.2');
      a.sendmsg(Buffer.from('warm-up'), b.address());
      await b.recv({ timeout: 5000 });
      const path = () => B.connections().find((c) => c.transport === 'tcp')!.paths[0]!;
      // Each check phase (setImmediate) sees what the poll phase before it read and handed up.
      let last = path().recvBytes;
      let most = 0;
      const tick = (): void => {
        const now = path().recvBytes;
        most = Math.max(most, now - last);
        last = now;
        if (!ticker.stop) setImmediate(tick);
      };
      setImmediate(tick);
      const msg = Buffer.alloc(64 * 1024, 7);
      const count = 200; // 12.5 MiB: more than loopback TCP buffers between two turns
      for (let i = 0; i < count; i++) a.sendmsg(msg, b.address());
      let got = 0;
      b.on('readable', () => {
        while (b.recvmsg() !== null) got++;
      });
      await until(() => got === count, 'the stream received', 20000);
      expect(most).toBeGreaterThan(0);
      expect(most).toBeLessThanOrEqual(READ_TURN_BYTES + 2 * 64 * 1024);
    } finally {
      ticker.stop = true;
      await A.close();
      await B.close();
    }
  });

  // The turn stops and restarts a slab carrier at its handle (tcp-socket.ts turnReads), the receive
  // limits through the socket's pause() and resume(): both must agree on whether it reads.
  it('a carrier cut by its turn and held by the receive limits, in turn after turn, delivers every message in order', async () => {
    const { RdsStack, RdsSocket, constants } = await import('../lib/index.js');
    const { TEST_TCP_PORT, until } = await import('./helpers.js');
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT, npaths: 1 });
    // Factor 1: the hard limit is SO_RCVBUF itself, reached with what the sender had in flight.
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, npaths: 1, recvHardLimitFactor: 1, recvHardLimitMinBytes: 0 });
    try {
      const a = new RdsSocket({ stack: A });
      await a.bind({ address: '127.155.201.1', port: 4000 });
      a.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 16 << 20);
      const b = new RdsSocket({ stack: B });
      await b.bind({ address: '127.155.201.2', port: 4000 });
      // Sixteen 64 KiB messages fill it: the limits hold the carrier while the reader is behind, and
      // the turn cuts it whenever a read brings the budget.
      b.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 1024 * 1024);
      const count = 200;
      for (let i = 0; i < count; i++) {
        const m = Buffer.alloc(64 * 1024, i & 0xff);
        m.writeUInt32BE(i, 0);
        a.sendmsg(m, b.address());
      }
      const got: number[] = [];
      // A slow reader: one message per turn, so holds and turn cuts interleave.
      const readOne = (): void => {
        const m = b.recvmsg();
        if (m !== null) got.push(m.data.readUInt32BE(0));
        if (got.length < count) setImmediate(readOne);
      };
      setImmediate(readOne);
      await until(() => got.length === count, 'every message read', 30000);
      expect(got).toEqual(Array.from({ length: count }, (_, i) => i));
      expect(B.counters.get('recv_pause_queue_limit')).toBeGreaterThan(0);
    } finally {
      await A.close();
      await B.close();
    }
  });
});
