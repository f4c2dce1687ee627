import { afterEach, describe, expect, it } from 'vitest';
import {
  RDS_FLAG_PROBE_PORT,
  RDS_FLAG_RETRANSMITTED,
  RDS_HEADER_SIZE,
  RDSSOCK_CAP_ACK,
  RDSSOCK_CAP_CONFIRM,
  RDSSOCK_CAP_FAILOVER,
  RDSSOCK_CAP_HEARTBEAT,
  RDSSOCK_CAP_LAZY_LANES,
  RDSSOCK_CAP_NO_HELLO,
  RDSSOCK_CAP_WITHDRAWN,
  RDSSOCK_CAP_PATHS_SHIFT,
} from '../lib/constants.js';
import { RdsStack } from '../lib/core/stack.js';
import type { RdsConnection } from '../lib/core/connection.js';
import type { RdsTransport } from '../lib/core/transport.js';
import {
  decodeHandshake,
  genNumExtension,
  npathsExtension,
  packExtensions,
  parseExtensions,
  rdsCapsExtension,
  sportIdxExtension,
  type RdsExtension,
} from '../lib/wire/extensions.js';
import { encodeHeader, OFF_EXTHDR } from '../lib/wire/header.js';
import { until } from './helpers.js';

// The negotiator of a connection (lib/core/handshake.ts), fed the frames a peer sends through the
// stack's receive entry point, over a transport that carries nothing: what it concludes about the
// peer (kind, capability word, SPORT_IDX, generation) and the path count it settles.
// Addresses 127.130.x.y; nothing goes on the network.

/** A multipath-capable transport that never connects or sends: the frames come from the test. */
function fakeTransport(): RdsTransport & { capsChanged: number } {
  return {
    name: 'fake',
    transType: 77,
    mpathCapable: true,
    userSelectable: false,
    capsChanged: 0,
    attach() {},
    async laddrCheck() {},
    initiates: () => false,
    connPathConnect() {},
    connPathShutdown() {},
    xmit: () => false,
    xmitCong: () => false,
    setRef() {},
    async close() {},
    capabilitiesChanged() {
      this.capsChanged++;
    },
  };
}

/** An unsequenced hello (seq 0, sport 1 -> dport 0, RETRANSMITTED), a probe (sport 1 -> dport 0), or a pong (sport 0 -> dport 1). */
function frame(kind: 'hello' | 'probe' | 'pong', seq: number, exts: RdsExtension[]): Buffer {
  const h = Buffer.alloc(RDS_HEADER_SIZE);
  const ports = kind === 'pong' ? { sport: 0, dport: RDS_FLAG_PROBE_PORT } : { sport: RDS_FLAG_PROBE_PORT, dport: 0 };
  encodeHeader(h, 0, {
    sequence: kind === 'hello' ? 0 : seq,
    ...ports,
    flags: kind === 'hello' ? RDS_FLAG_RETRANSMITTED : 0,
    exthdr: packExtensions(exts),
  });
  return h;
}

const RDS_SOCKET_CAPS =
  RDSSOCK_CAP_ACK |
  RDSSOCK_CAP_CONFIRM |
  RDSSOCK_CAP_HEARTBEAT |
  RDSSOCK_CAP_NO_HELLO |
  RDSSOCK_CAP_FAILOVER |
  RDSSOCK_CAP_WITHDRAWN;

const stacks: RdsStack[] = [];
afterEach(async () => {
  await Promise.all(stacks.splice(0).map((s) => s.close()));
});

function setup(opts: ConstructorParameters<typeof RdsStack>[0] = {}, laddr = '127.130.0.2', faddr = '127.130.0.1') {
  const t = fakeTransport();
  const stack = new RdsStack({ ...opts, transports: [t] });
  stacks.push(stack);
  const conn: RdsConnection = stack.connFor(laddr, faddr, t);
  const recv = (h: Buffer) => stack.recvIncoming(conn.paths[0]!, h, Buffer.alloc(0));
  return { t, stack, conn, recv };
}

describe('handshake negotiator', () => {
  it('a new connection knows nothing of its peer', () => {
    const { conn } = setup();
    expect(conn.handshake.peer).toBe('unknown');
    expect(conn.handshake.caps).toBe(0);
    expect(conn.handshake.peerGenNum).toBe(0);
    expect(conn.npaths).toBe(0);
    // Received messages are tracked until the peer is known (it may be an rds-socket node that acks).
    expect(conn.handshake.tracksReceipts).toBe(true);
    expect(conn.handshake.releaseOnTransportAck).toBe(false);
  });

  it("a kernel's probe (NPATHS 8, GEN_NUM, no capabilities): kernel, one path, answered with a pong", () => {
    const { t, stack, conn, recv } = setup();
    recv(frame('probe', 1, [npathsExtension(8), genNumExtension(0x1234)]));
    expect(conn.handshake.peer).toBe('kernel');
    expect(conn.handshake.caps).toBe(0);
    expect(conn.handshake.peerGenNum).toBe(0x1234);
    expect(conn.handshake.sportIdx).toBe(false);
    expect(conn.npaths).toBe(1);
    expect(conn.handshake.ackMode).toBe(false);
    expect(conn.handshake.heartbeatMode).toBe(false);
    expect(conn.handshake.tracksReceipts).toBe(false);
    expect(conn.handshake.releaseOnTransportAck).toBe(true);
    expect(conn.handshake.wantsLegacyHello).toBe(false);
    expect(t.capsChanged).toBe(1);
    expect(stack.counters.get('handshake_received')).toBe(1);
    expect(stack.counters.get('send_pong')).toBe(1);
  });

  it("an rds-socket node's pong: its capability word, SPORT_IDX and the path count both run", () => {
    const { conn, recv } = setup();
    const caps = RDS_SOCKET_CAPS | (4 << RDSSOCK_CAP_PATHS_SHIFT);
    recv(frame('pong', 1, [npathsExtension(1), genNumExtension(7), sportIdxExtension(), rdsCapsExtension(caps)]));
    expect(conn.handshake.peer).toBe('rds-socket');
    expect(conn.handshake.caps).toBe(caps);
    expect(conn.handshake.sportIdx).toBe(true);
    expect(conn.npaths).toBe(4); // min(our 8, its 4)
    expect(conn.handshake.ackMode).toBe(true);
    expect(conn.handshake.confirmsReads).toBe(true);
    expect(conn.handshake.heartbeatMode).toBe(true);
    expect(conn.handshake.failoverAllowed).toBe(true);
    expect(conn.handshake.wantsLegacyHello).toBe(false);
    expect(conn.handshake.releaseOnTransportAck).toBe(false);
  });

  it('an older rds-socket node (no RDSSOCK_CAP_NO_HELLO) in a hello still wants our hello; one without acks gets none', () => {
    const { conn, recv } = setup({ npaths: 2 });
    recv(
      frame('hello', 0, [genNumExtension(9), rdsCapsExtension(RDSSOCK_CAP_HEARTBEAT | (8 << RDSSOCK_CAP_PATHS_SHIFT))]),
    );
    expect(conn.handshake.peer).toBe('rds-socket');
    expect(conn.handshake.wantsLegacyHello).toBe(true);
    expect(conn.handshake.ackMode).toBe(false);
    expect(conn.handshake.failoverAllowed).toBe(false);
    expect(conn.npaths).toBe(2); // min(our 2, its 8)
  });

  it('a new GEN_NUM after a known one is a restart, counted once per change', () => {
    const { stack, conn, recv } = setup();
    recv(frame('probe', 1, [genNumExtension(100), rdsCapsExtension(RDS_SOCKET_CAPS)]));
    recv(frame('probe', 2, [genNumExtension(100), rdsCapsExtension(RDS_SOCKET_CAPS)]));
    expect(stack.counters.get('peer_restarted')).toBe(0);
    recv(frame('probe', 1, [genNumExtension(200), rdsCapsExtension(RDS_SOCKET_CAPS)]));
    expect(stack.counters.get('peer_restarted')).toBe(1);
    expect(conn.handshake.peerGenNum).toBe(200);
    // Its sequence numbering started over: the next frame numbered 2 is new, not old.
    expect(conn.paths[0]!.rxSeq.next).toBe(2);
  });

  it('a peer that never answers is settled as a kernel after handshakeTimeoutMs', async () => {
    const { stack, conn } = setup({ handshakeTimeoutMs: 20 });
    conn.handshake.pathUp(conn.paths[0]!);
    expect(stack.counters.get('handshake_sent')).toBe(1);
    await until(() => conn.handshake.peer !== 'unknown', 'the handshake timeout', 5000);
    expect(conn.handshake.peer).toBe('kernel');
    expect(stack.counters.get('handshake_timeout')).toBe(1);
    expect(conn.npaths).toBe(1);
  });

  it('what we say: NPATHS (none to a peer not known yet) and GEN_NUM first, SPORT_IDX only when we connect, our capabilities last', () => {
    const initiator = setup({ npaths: 4 }, '127.130.1.1', '127.130.1.2');
    // Not known yet: no NPATHS, so a kernel keeps the count it has (see kernel-npaths-restart).
    expect(decodeHandshake(initiator.conn.handshake.extensions()).npaths).toBeUndefined();
    // Known (here a kernel that does not pair by port): NPATHS 1.
    initiator.conn.handshake.settle(0);
    const exts = initiator.conn.handshake.extensions();
    const hs = decodeHandshake(exts);
    expect(hs.npaths).toBe(1);
    expect(hs.genNum).toBe(initiator.stack.genNum);
    expect(hs.sportIdx).toBe(true);
    // More than one path: lanes open on demand (RDSSOCK_CAP_LAZY_LANES).
    expect(hs.rdsCaps).toBe(RDS_SOCKET_CAPS | RDSSOCK_CAP_LAZY_LANES | (4 << RDSSOCK_CAP_PATHS_SHIFT));
    expect(exts.at(-1)!.type).toBe(rdsCapsExtension(0).type);
    const acceptor = setup({ rdsAcks: false }, '127.130.1.4', '127.130.1.3');
    const hs2 = decodeHandshake(acceptor.conn.handshake.extensions());
    expect(hs2.sportIdx).toBeUndefined();
    // Without acks: no ACK, CONFIRM or FAILOVER (failover needs to know what the peer has).
    expect(hs2.rdsCaps).toBe(
      RDSSOCK_CAP_HEARTBEAT | RDSSOCK_CAP_NO_HELLO | RDSSOCK_CAP_LAZY_LANES | (8 << RDSSOCK_CAP_PATHS_SHIFT),
    );
    // One path: no lanes to open on demand.
    const single = setup({ npaths: 1 }, '127.130.1.5', '127.130.1.6');
    expect(single.conn.handshake.localCaps() & RDSSOCK_CAP_LAZY_LANES).toBe(0);
    // The hello carries the same extensions, unsequenced.
    const hello = acceptor.conn.handshake.helloFrame();
    expect(hello.readBigUInt64BE(0)).toBe(0n);
    expect(decodeHandshake(parseExtensions(hello.subarray(OFF_EXTHDR)))).toEqual(hs2);
  });
});
