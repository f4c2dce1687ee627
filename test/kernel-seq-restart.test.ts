import { describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants, wire as w } from '../lib/index.js';
import { type RawConn, kernelMap, rawConnectLane } from './raw-peer.js';
import { cleanupsPerTest, TEST_TCP_PORT } from './helpers.js';

// Issue #35 (the nemesis, seed 2029, 300 s): a kernel reloaded `rds_tcp` behind a partition and
// one of its sockets' first messages to our node never arrived. Unloading rds_tcp keeps the rds
// module, whose GEN_NUM is chosen once per load: the kernel's new connection numbers every path
// from 1 again with the same generation, so we see no restart and keep each path's next_rx_seq.
// A fresh frame below it is taken (spec §2.5), but one the kernel sends again, RETRANSMITTED,
// because its first transmission went on a carrier we never read, was dropped as old: lost.
// A fresh frame (no RETRANSMITTED) from a kernel on path 0 numbered below what path 0 took is the
// sign: a kernel never numbers a first transmission below an earlier one. Path 0's own resend was
// read before the fix too (the fresh probe had moved its number back); the lane's was dropped.
// A raw peer plays the 7.x kernel. Addresses: 127.149.x.y (this file only).

const cleanups = cleanupsPerTest();
const KERNEL = '127.149.1.1';
const NODE = '127.149.1.2';
const GEN = 0x5eed;
const RETRANSMITTED = constants.RDS_FLAG_RETRANSMITTED;

/** The kernel's probe ping (sport 1 -> dport 0) with a 7.x kernel's extensions. */
const probe = (c: RawConn, seq: number): void =>
  c.send({
    sequence: seq,
    sport: 1,
    dport: 0,
    exthdr: w.packExtensions([w.npathsExtension(8), w.genNumExtension(GEN), w.sportIdxExtension()]),
  });

const data = (c: RawConn, seq: number, text: string, flags = 0): void =>
  c.send({ sequence: seq, sport: 7000, dport: 5000, flags }, Buffer.from(text));

async function dial(lane: number): Promise<RawConn> {
  const c = await rawConnectLane(KERNEL, NODE, TEST_TCP_PORT, lane);
  cleanups.push(() => void c.sock.destroy());
  kernelMap(c);
  return c;
}

/** The next `n` messages read (whatever came within 5 s each: a missing one shows in the comparison). */
async function read(b: RdsSocket, n: number): Promise<string[]> {
  const out: string[] = [];
  while (out.length < n) {
    try {
      out.push((await b.recv({ timeout: 5000 })).data.toString());
    } catch {
      break;
    }
  }
  return out;
}

describe('a kernel whose rds_tcp was reloaded (same GEN_NUM, numbering from 1 again)', () => {
  it('its resends below what the old connection reached are read, on path 0 and on a lane', async () => {
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0 });
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: NODE, port: 5000 });

    // The old connection: path 0 reaches sequence 21, lane 3 sequence 6.
    const p0 = await dial(0);
    probe(p0, 1);
    for (let s = 2; s <= 21; s++) data(p0, s, `old ${s}`);
    expect(await read(b, 20)).toEqual(Array.from({ length: 20 }, (_, i) => `old ${i + 2}`));
    const l3 = await dial(3);
    for (let s = 1; s <= 5; s++) data(l3, s, `old lane ${s}`);
    expect(await read(b, 5)).toEqual(Array.from({ length: 5 }, (_, i) => `old lane ${i + 1}`));
    const before = B.counters.get('recv_drop_old_seq');

    // rds_tcp reloaded: the old carriers reset, a new connection numbered from 1, the same generation.
    p0.sock.resetAndDestroy();
    l3.sock.resetAndDestroy();
    const q0 = await dial(0);
    probe(q0, 1);
    // Seq 2 went first on a carrier we never read: this is its resend.
    data(q0, 2, 'first', RETRANSMITTED);
    data(q0, 3, 'second');
    expect(await read(b, 2)).toEqual(['first', 'second']);
    const q3 = await dial(3);
    data(q3, 1, 'lane first', RETRANSMITTED);
    data(q3, 2, 'lane second');
    expect(await read(b, 2)).toEqual(['lane first', 'lane second']);
    expect(B.counters.get('recv_drop_old_seq')).toBe(before);
    expect(B.counters.get('peer_restarted')).toBeGreaterThan(0);

    // A real resend of the new connection is still dropped: seq 3 again, RETRANSMITTED.
    data(q0, 3, 'second', RETRANSMITTED);
    data(q0, 4, 'third');
    expect(await read(b, 1)).toEqual(['third']);
    expect(B.counters.get('recv_drop_old_seq')).toBe(before + 1);
  });
});
