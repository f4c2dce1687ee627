import { describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants, wire } from '../lib/index.js';
import { READ_REPORTING_CAPS as caps, rawConnect } from './raw-peer.js';
import { cleanupsPerTest, payload, TEST_TCP_PORT, until } from './helpers.js';

// The receiver's side (issue #35): a node that takes an rds-socket sender for a kernel (the
// sender's handshake came after handshakeTimeoutMs) stops tracking what it receives from it.
// It used to drop what it had tracked with it (RxAckTracker.reset): a refusal not yet reported,
// and the fate of messages still unread. Once the handshake came, its read cursor passed over
// them with a refused count of 0: the sender confirmed a refused message and an unread one.
// A raw peer plays the rds-socket sender. Addresses: 127.138.x.y (this file only).

const cleanups = cleanupsPerTest();

describe('a sender taken for a kernel, then known to report reads', () => {
  it('the read report never covers a refused or an unread message as read', async () => {
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT, heartbeatIntervalMs: 0, handshakeTimeoutMs: 200 });
    cleanups.push(() => B.close());
    const read = new RdsSocket({ stack: B });
    await read.bind({ address: '127.138.1.2', port: 4000 });
    const unread = new RdsSocket({ stack: B });
    await unread.bind({ address: '127.138.1.2', port: 4001 });
    const c = await rawConnect('127.138.1.1', '127.138.1.2', TEST_TCP_PORT, false);
    cleanups.push(() => void c.sock.destroy());
    // Its first messages come before its handshake: #1 to a port nobody bound, #2 to a socket
    // that does not read.
    c.send({ sequence: 1, sport: 4000, dport: 4999 }, payload(1, 8));
    c.send({ sequence: 2, sport: 4000, dport: 4001 }, payload(2, 8));
    await until(() => B.counters.get('recv_drop_no_sock') === 1 && (unread.poll() & 1) === 1, 'both taken');
    await until(() => B.counters.get('handshake_timeout') === 1, 'the sender taken for a kernel');
    // Then its probe (it reports reads), and #4, which is read.
    c.send({
      sequence: 3,
      sport: 1,
      dport: 0,
      exthdr: wire.packExtensions([wire.npathsExtension(1), wire.genNumExtension(5), wire.rdsCapsExtension(caps)]),
    });
    c.send({ sequence: 4, sport: 4000, dport: 4000, flags: constants.RDS_FLAG_ACK_REQUIRED }, payload(4, 8));
    expect((await read.recv({ timeout: 5000 })).data.readUInt32BE(0)).toBe(4);
    // What the sender hears: refusals, then a read cursor with its count of refusals at or before it.
    const refused = new Set<number>();
    let report: { seq: number; refused: number } | undefined;
    while (report === undefined || report.seq < 4) {
      const f = await c.nextMatching((x) => x.header.sequence === 0 && x.header.sport === 0 && x.header.dport === 0);
      if (f.header.flags === 1) continue;
      const r = wire.decodeReadReport(wire.parseExtensions(Buffer.from(f.header.exthdr)));
      if (r.refused !== undefined) refused.add(Number(r.refused.seq));
      if (r.read !== undefined) report = { seq: Number(r.read.seq), refused: r.read.refused };
    }
    // The sender's rule (send-confirm.ts): a report whose count exceeds the refusals it heard of
    // cannot be placed, and what it covers rejects; otherwise every message it covers and did not
    // hear refused is confirmed. #1 was refused and #2 never read: neither may be confirmed.
    const placed = report.refused <= [...refused].filter((s) => s <= report!.seq).length;
    const confirmed = placed ? [1, 2, 4].filter((s) => s <= report!.seq && !refused.has(s)) : [];
    expect(
      confirmed.filter((s) => s !== 4),
      'confirmed, though refused or unread',
    ).toEqual([]);
  });
});
