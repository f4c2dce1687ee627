import { describe, expect, it } from 'vitest';
import { constants, type RdsError, RdsSocket, RdsStack, wire } from '../lib/index.js';
import { type Frame, RawListener, READ_REPORTING_CAPS as caps } from './raw-peer.js';
import { cleanupsPerTest, payload, TEST_TCP_PORT, until } from './helpers.js';

// Issue #35 (nemesis --seed 6067, 1200 s): an embedded node restarted; its peer, a host node,
// reconnected path 0 with messages to resend, and those went ahead of its probe, sequenced. The
// direction towards the restarted node stalled after the first segments (a one-way partition,
// then the host node paused), so the restarted node's handshake wait ran out on the resent
// messages alone and it took the host node for a kernel: TCP's acknowledgement of bytes the paused
// node's kernel took confirmed 2 messages (and released 21) that the node never read. Path 0's new
// carrier to a peer known to be rds-socket now starts with the unsequenced hello, ahead of
// anything queued. Addresses: 127.137.x.y (this file only).

const cleanups = cleanupsPerTest();

const isMap = (f: Frame): boolean => f.header.flags === 1;
const isHello = (f: Frame): boolean =>
  f.header.sequence === 0 && f.header.sport === 1 && f.header.dport === 0 && f.payload.length === 0;

async function node(address: string): Promise<{ A: RdsStack; a: RdsSocket }> {
  const A = new RdsStack({
    tcpPort: TEST_TCP_PORT,
    reconnectMaxDelayMs: 50,
    heartbeatIntervalMs: 0,
    handshakeTimeoutMs: 5000,
  });
  cleanups.push(() => A.close());
  const a = new RdsSocket({ stack: A });
  await a.bind({ address, port: 4000 });
  return { A, a };
}

describe('path 0 reconnecting to a peer known to be rds-socket', () => {
  it('starts with the hello, ahead of the messages it resends and of its probe', async () => {
    const peer = await RawListener.listen('127.137.1.2', TEST_TCP_PORT, false);
    cleanups.push(() => peer.close());
    const { A, a } = await node('127.137.1.1');
    const dest = { address: '127.137.1.2', port: 4000 };
    const outcome = a.send(payload(0, 100), dest, { confirm: true, timeout: 20000 }).then(
      () => 'ok',
      (e: RdsError) => e.code,
    );
    // Life 1 of the peer answers the probe as rds-socket (it reports reads), takes the message
    // and acknowledges nothing, then goes away.
    const { c } = await peer.acceptProbed(0);
    c.send({
      sequence: 1,
      sport: 0,
      dport: 1,
      exthdr: wire.packExtensions([wire.npathsExtension(1), wire.genNumExtension(9), wire.rdsCapsExtension(caps)]),
    });
    const first = await c.nextUser();
    await until(() => A.counters.get('handshake_received') >= 1, 'the answer to the probe');
    c.sock.destroy();

    // Its next life: what the node writes on the new carrier, in order.
    const c2 = await peer.accept(1);
    const order: string[] = [];
    for (;;) {
      const f = await c2.next();
      if (isMap(f)) continue;
      if (isHello(f)) {
        order.push('hello');
        const hs = wire.decodeHandshake(wire.parseExtensions(Buffer.from(f.header.exthdr)));
        expect(hs.rdsCaps, 'the hello says what the node is').toBeGreaterThan(0);
        expect(hs.genNum, 'and its generation').toBe(A.genNum);
        continue;
      }
      const resent = (f.header.flags & constants.RDS_FLAG_RETRANSMITTED) !== 0;
      if (f.header.sport === 1 && f.header.dport === 0) {
        // Life 1's probe, never acknowledged, is resent in its place; the new one ends the look.
        order.push(resent ? 'old probe' : 'probe');
        if (!resent) break;
        continue;
      }
      order.push(resent && f.header.sequence === first.header.sequence ? 'message' : `seq ${f.header.sequence}`);
    }
    expect(order).toEqual(['hello', 'old probe', 'message', 'probe']);
    await A.close();
    expect(await outcome).not.toBe('ok');
  });
});
