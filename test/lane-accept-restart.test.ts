import { describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants, wire as w } from '../lib/index.js';
import { LAZY_LANES_CAPS as caps, rawConnectLane } from './raw-peer.js';
import { cleanupsPerTest, TEST_TCP_PORT, until } from './helpers.js';

// Issue #35, the accepting side of test/lane-restart.test.ts. A node on the larger address
// restarted; the dialling peer still ran path 0 to its old life and dialled a lane (lane 4, from a
// source port = 4 mod 8). The new life, which has not read the peer's SPORT_IDX yet, paired the
// connection as kernels up to 6.19 do (first free path): path 0. It delivered what came on it,
// numbered in lane 4's sequence space. The peer never heard its acknowledgements (it drops every
// path when it sees the new generation on a lane it dialled), and resent those messages,
// RETRANSMITTED, on the real lane 4, whose receive sequence space at the new life was fresh: each
// was read twice. The new life must refuse a carrier whose hello says its source port names
// another lane than the path that took it, before taking anything from it.
// A raw peer plays the dialling rds-socket node. Addresses: 127.147.x.y (this file only).

const cleanups = cleanupsPerTest();

/** What an rds-socket initiator says in its hello and probe: it encodes lanes in source ports. */
const handshake = (): Uint8Array =>
  w.packExtensions([w.npathsExtension(1), w.genNumExtension(77), w.sportIdxExtension(), w.rdsCapsExtension(caps)]);
const hello = { sequence: 0, sport: 1, dport: 0, flags: constants.RDS_FLAG_RETRANSMITTED };

describe('a lane dialled to a node that restarted (this node, larger address)', () => {
  it('is not taken for path 0 before the peer is known: what came on it is read once, on the real lane', async () => {
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0 });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: '127.147.1.2', port: 5000 });
    const read: string[] = [];
    const reading = (async () => {
      for (let i = 0; i < 10; i++) {
        const m = await b.recv({ timeout: 10000 });
        read.push(m.data.toString());
        if (m.data.toString() === 'end') return;
      }
    })();
    reading.catch(() => {});

    // The peer's lane 4 reaches the new life first: its hello, then two messages numbered on lane 4.
    const lane = await rawConnectLane('127.147.1.1', '127.147.1.2', TEST_TCP_PORT, 4, false);
    cleanups.push(() => void lane.sock.destroy());
    lane.send({ ...hello, exthdr: handshake() });
    lane.send({ sequence: 7, sport: 4000, dport: 5000 }, Buffer.from('m1'));
    lane.send({ sequence: 8, sport: 4000, dport: 5000 }, Buffer.from('m2'));
    await until(() => lane.closed || read.length >= 2, 'the lane carrier read or refused');
    // The peer drops it (it met the new generation on a lane it dialled) and connects path 0 ...
    lane.sock.destroy();
    const p0 = await rawConnectLane('127.147.1.1', '127.147.1.2', TEST_TCP_PORT, 0, false);
    cleanups.push(() => void p0.sock.destroy());
    p0.send({ sequence: 20, sport: 1, dport: 0, exthdr: handshake() });
    await p0.nextMatching((f) => f.header.sport === 0 && f.header.dport === 1);
    // ... and after the pong its lane 4 again, where it resends what it holds unacknowledged.
    const lane2 = await rawConnectLane('127.147.1.1', '127.147.1.2', TEST_TCP_PORT, 4, false);
    cleanups.push(() => void lane2.sock.destroy());
    const f = constants.RDS_FLAG_RETRANSMITTED;
    lane2.send({ ...hello, exthdr: handshake() });
    lane2.send({ sequence: 7, sport: 4000, dport: 5000, flags: f }, Buffer.from('m1'));
    lane2.send({ sequence: 8, sport: 4000, dport: 5000, flags: f }, Buffer.from('m2'));
    lane2.send({ sequence: 9, sport: 4000, dport: 5000 }, Buffer.from('end'));
    await reading;
    expect(read).toEqual(['m1', 'm2', 'end']);
    expect(B.counters.get('accept_lane_misplaced')).toBe(1);
    expect(lane2.closed).toBe(false);
  });
});
