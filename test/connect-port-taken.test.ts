import { type Server, type Socket, createServer, connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack } from '../lib/index.js';
import { localPortRange } from '../lib/transports/tcp-socket.js';
import { TEST_TCP_PORT, until } from './helpers.js';

// Found while pinning why 7.x's kernel-restart test failed after kernel-new-life (issue #35): the
// smaller address dials from a source port that names the path (port % 8 == index, spec §3.6),
// from a rotating group that starts at the first one in every life. A previous life's connection
// from that port to the same peer, still in FIN-WAIT or TIME-WAIT, makes connect() fail with
// EADDRNOTAVAIL (the 4-tuple is taken), and the dial was abandoned as failed. A kernel on the
// larger address pokes once and then waits for us, so nothing dialled again: its ping was never
// answered. A taken 4-tuple is now treated like a taken port: the next group at once.

let cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

describe('a dial whose source port and peer are still held by an older connection', () => {
  it('answers a single poke from the larger address by dialling from the next port group', async () => {
    const a1 = '127.29.15.1';
    const b1 = '127.29.15.2';
    // The "kernel" on the larger address: a listener that records who connects.
    const accepted: Socket[] = [];
    const listener: Server = createServer((s) => {
      accepted.push(s);
      s.on('error', () => {});
    });
    await new Promise<void>((r) => listener.listen(TEST_TCP_PORT, b1, r));
    cleanups.push(() => {
      for (const s of accepted) s.destroy();
      return new Promise<void>((r) => listener.close(() => r()));
    });
    // An older connection from the first port a new stack picks for path 0, still open.
    const [lo] = localPortRange();
    const old = connect({ host: b1, port: TEST_TCP_PORT, localAddress: a1, localPort: lo });
    old.on('error', () => {});
    await new Promise<void>((r) => old.once('connect', r));
    cleanups.push(() => void old.destroy());
    await until(() => accepted.length === 1, 'the old connection accepted');

    const A = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanups.push(() => A.close());
    const sa = new RdsSocket({ stack: A });
    await sa.bind({ address: a1, port: 4000 });

    // One poke from the larger address (as a kernel sends, once), then nothing.
    const poke = connect({ host: a1, port: TEST_TCP_PORT, localAddress: b1 });
    poke.on('error', () => {});
    cleanups.push(() => void poke.destroy());

    await until(() => accepted.length >= 2, 'a dial from the smaller address after the poke', 5000);
    const dial = accepted[1]!;
    expect(dial.remoteAddress).toBe(a1);
    expect(dial.remotePort! % 8).toBe(0); // path 0
    expect(dial.remotePort).not.toBe(lo);
    expect(await A.report().then((r) => r.counters.conn_poke_received)).toBeGreaterThan(0);
  });
});
