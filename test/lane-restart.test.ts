import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants, wire as w } from '../lib/index.js';
import { LAZY_LANES_CAPS as caps, RawListener, type RawConn } from './raw-peer.js';
import { cleanupsPerTest, TEST_TCP_PORT, until } from './helpers.js';

// The nemesis duplicate after a host node on the larger address restarted (docs/nemesis.md): the
// dialling side still ran path 0 to the old life (its carrier not yet known dead) and dialled a
// lane; the new life, which has not read our SPORT_IDX yet, took that lane for its path 0 and sent
// its first messages on it. Later it resent them, RETRANSMITTED, on the real path 0, whose receive
// sequence space never saw them: each was read twice.

const cleanups = cleanupsPerTest();

const handshake = (gen: number): Uint8Array =>
  w.packExtensions([w.npathsExtension(8), w.genNumExtension(gen), w.rdsCapsExtension(caps)]);

/** The larger side's poke for path `index`: a connection from a source port with port % 8 == index. */
async function poke(from: string, to: string, index: number, attempt = 0): Promise<void> {
  const localPort = 40000 + 8 * (attempt * 13 + 1) + index;
  await new Promise<void>((res, rej) => {
    const s = connect({ host: to, port: TEST_TCP_PORT, localAddress: from, localPort });
    s.once('connect', () => {
      s.destroy();
      res();
    });
    s.once('error', (e: NodeJS.ErrnoException) => {
      s.destroy();
      if (e.code === 'EADDRINUSE' && attempt < 20) poke(from, to, index, attempt + 1).then(res, rej);
      else if (e.code === 'ECONNRESET') res();
      else rej(e);
    });
  });
}

describe('a lane dialled to a peer that restarted (larger address)', () => {
  it('messages the new life sent on it are read once, though it took the lane for its path 0', async () => {
    const base = '127.31.0';
    const B = await RawListener.listen(`${base}.2`, TEST_TCP_PORT, false);
    cleanups.push(() => B.close());
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanups.push(() => A.close());
    const a = new RdsSocket({ stack: A });
    await a.bind({ address: `${base}.1`, port: 4000 });
    const read: string[] = [];
    const reading = (async () => {
      for (let i = 0; i < 20; i++) {
        const m = await a.recv({ timeout: 10000 });
        read.push(m.data.toString());
        if (m.data.toString() === 'end') return;
      }
    })();
    reading.catch(() => {});

    // The old life: path 0 up, handshake answered (8 paths, lanes on demand, generation 100).
    a.sendmsg(Buffer.from('hi'), { address: `${base}.2`, port: 5000 });
    const c0 = await B.accept(0);
    const probe = await c0.mapThenProbe();
    c0.send({ sequence: 1, sport: 0, dport: 1, ack: probe.header.sequence, exthdr: handshake(100) });
    const conn = () => A.connections().find((c) => c.transport === 'tcp')!;
    await until(() => conn().npaths === 8, 'path count from the pong');

    // The peer restarts; path 0's carrier to the old life is not known dead yet. The new life pokes
    // for lane 3 (it has messages for it): A dials lane 3 while path 0 still looks up.
    await poke(`${base}.2`, `${base}.1`, 3);
    const c1: RawConn = await B.accept(1);
    expect(c1.sock.remotePort! % 8).toBe(3);
    // The new life has not read A's SPORT_IDX: it takes this connection for its path 0 and starts
    // it as a fresh acceptor does, its probe (generation 200) first, then its queued messages.
    c1.send({ sequence: 1, sport: 1, dport: 0, exthdr: handshake(200) });
    c1.send({ sequence: 2, sport: 5000, dport: 4000 }, Buffer.from('m1'));
    c1.send({ sequence: 3, sport: 5000, dport: 4000 }, Buffer.from('m2'));
    await until(() => c1.closed || read.length >= 2, 'lane 3 carrier read or refused');

    // The old path 0 dies; the new life's path 0 is connected properly (a poke for path 0), and
    // its carrier (c1) is replaced: it resends what it holds unacknowledged, RETRANSMITTED.
    c0.sock.destroy();
    c1.sock.destroy();
    await poke(`${base}.2`, `${base}.1`, 0);
    const c2 = await B.accept(2);
    expect(c2.sock.remotePort! % 8).toBe(0);
    const f = constants.RDS_FLAG_RETRANSMITTED;
    c2.send({ sequence: 1, sport: 1, dport: 0, flags: f, exthdr: handshake(200) });
    c2.send({ sequence: 2, sport: 5000, dport: 4000, flags: f }, Buffer.from('m1'));
    c2.send({ sequence: 3, sport: 5000, dport: 4000, flags: f }, Buffer.from('m2'));
    c2.send({ sequence: 4, sport: 5000, dport: 4000 }, Buffer.from('end'));
    await reading;
    expect(read).toEqual(['m1', 'm2', 'end']);
    expect(A.counters.get('peer_restarted')).toBe(1);
    expect(A.counters.get('lane_restart_dropped')).toBe(1);
  });
});
