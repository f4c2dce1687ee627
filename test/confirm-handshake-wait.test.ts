import { describe, expect, it } from 'vitest';
import { type RdsError, RdsSocket, RdsStack, constants, wire } from '../lib/index.js';
import { RawListener, READ_REPORTING_CAPS as caps, kernelMap } from './raw-peer.js';
import { cleanupsPerTest, payload, TEST_TCP_PORT, until } from './helpers.js';

// Issue #35 (nemesis --seed 11): a host node that had just restarted sent a confirmed message to a
// port nobody had bound. Its peer's answer to the handshake waited, sequenced, behind what the
// peer resent to it, longer than handshakeTimeoutMs; its ack frame and refusal came at once. The
// wait ran out, the peer was taken for a kernel, and the held h_ack confirmed the refused
// message. A peer that sent what no kernel sends is rds-socket: its late answer is waited for.
// Addresses: 127.136.x.y (this file only).

const cleanups = cleanupsPerTest();

async function sender(address: string): Promise<{ A: RdsStack; a: RdsSocket }> {
  const A = new RdsStack({
    tcpPort: TEST_TCP_PORT,
    reconnectMaxDelayMs: 50,
    heartbeatIntervalMs: 0,
    handshakeTimeoutMs: 200,
  });
  cleanups.push(() => A.close());
  const a = new RdsSocket({ stack: A });
  await a.bind({ address, port: 4000 });
  return { A, a };
}

describe('confirmations when the handshake answer comes after handshakeTimeoutMs', () => {
  it('an rds-socket peer whose ack and refusals came first is not taken for a kernel: the refused messages reject, the read one resolves, no h_ack confirms', async () => {
    const peer = await RawListener.listen('127.136.1.2', TEST_TCP_PORT, false);
    cleanups.push(() => peer.close());
    const { A, a } = await sender('127.136.1.1');
    const dest = { address: '127.136.1.2', port: 4000 };
    const outcomes = new Map<number, string>();
    const all = [0, 1, 2, 3].map((i) =>
      a.send(payload(i, 100), dest, { confirm: true, timeout: 20000 }).then(
        () => void outcomes.set(i, 'ok'),
        (e: RdsError) => void outcomes.set(i, e.code),
      ),
    );
    const { c } = await peer.acceptProbed();
    const seqs = await c.userSeqs(4);
    const last = seqs[3]!;
    // The peer's control frames go ahead of its queue: the flow cursor (all four acknowledged as
    // queued), and the refusal of the first.
    c.send({ ack: last });
    const refuse = (s: number): void =>
      c.send({ ack: last, exthdr: wire.packExtensions([wire.refusedExtension(s, constants.RDSSOCK_REFUSED_NO_SOCK)]) });
    refuse(seqs[0]!);
    await a.flush({ timeout: 5000 });
    // The wait for its answer runs out: it is not taken for a kernel, so the h_ack confirms none.
    await until(
      () => A.counters.get('handshake_timeout') + A.counters.get('handshake_wait_rds_socket') === 1,
      'the handshake wait to run out',
    );
    expect(
      [...outcomes].filter(([, v]) => v === 'ok'),
      'confirmed by the h_ack',
    ).toEqual([]);
    expect(A.counters.get('handshake_wait_rds_socket')).toBe(1);
    await until(() => outcomes.size >= 1, 'the refusal taken while the peer was unknown');
    expect([...outcomes]).toEqual([[0, 'ECONNREFUSED']]);
    // Its answer, late, says it reports reads; two more refusals, then its read cursor.
    c.send({
      sequence: 1,
      sport: 0,
      dport: 1,
      ack: last,
      exthdr: wire.packExtensions([wire.npathsExtension(1), wire.genNumExtension(9), wire.rdsCapsExtension(caps)]),
    });
    refuse(seqs[1]!);
    refuse(seqs[2]!);
    c.send({ ack: last, exthdr: wire.packExtensions([wire.readExtension(last, 3)]) });
    await Promise.all(all);
    expect([0, 1, 2, 3].map((i) => outcomes.get(i))).toEqual(['ECONNREFUSED', 'ECONNREFUSED', 'ECONNREFUSED', 'ok']);
  });

  it('a peer that sends nothing before the wait runs out is still taken for a kernel: its acknowledgement confirms', async () => {
    const peer = await RawListener.listen('127.136.2.2', TEST_TCP_PORT, false);
    cleanups.push(() => peer.close());
    const { A, a } = await sender('127.136.2.1');
    const sent = a.send(payload(0, 100), { address: '127.136.2.2', port: 4000 }, { confirm: true, timeout: 20000 });
    const c = await peer.accept(0);
    // A kernel that does not answer probes (ping_enable = 0): its congestion map, and no RDS ack.
    kernelMap(c);
    await c.nextProbe();
    await c.nextUser();
    await until(() => A.counters.get('handshake_timeout') === 1, 'the handshake wait to run out');
    expect(A.counters.get('handshake_wait_rds_socket')).toBe(0);
    // Taken for a kernel: TCP's acknowledgement is the confirmation, as a kernel gives it.
    await sent;
  });
});
