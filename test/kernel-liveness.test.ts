import { afterEach, describe, expect, it, vi } from 'vitest';
import { RDS_CONN_DOWN, RDS_CONN_UP } from '../lib/constants.js';
import { Heartbeat, KERNEL_PING_PORT } from '../lib/core/ext/heartbeat.js';
import type { RdsConnPath } from '../lib/core/path.js';
import { RdsSocket, RdsStack } from '../lib/index.js';
import { TEST_TCP_PORT, until } from './helpers.js';
import { type Frame, kernelMap, RawListener } from './raw-peer.js';

// Loopback addresses 127.222.x.y belong to this file.
const P = TEST_TCP_PORT;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const c of cleanups.splice(0).reverse()) await c();
});

const isLivenessPing = (f: Frame): boolean =>
  f.header.dport === 0 && f.header.sport === KERNEL_PING_PORT && f.payload.length === 0;

/**
 * A kernel has no RDS heartbeat: between it and us liveness was TCP's alone. After a partition a
 * kernel's data the network dropped waits for its TCP retransmission timer, which backs off to
 * many seconds, and everything it sends on that connection waits behind it while our side still
 * flows (nemesis seed 9091: the kernel's messages to three nodes read 11 to 13 s after the heal,
 * 20 s after the partition that caused it). The node now pings a kernel that has gone silent and
 * drops a carrier whose ping goes unanswered, so the kernel resends on a new connection.
 */
describe('kernel peers: liveness pings on a silent TCP path', () => {
  it('a kernel whose side of the connection stalls (pings unanswered) loses that carrier, and the node dials again', async () => {
    const listener = await RawListener.listen('127.222.0.2', P);
    cleanups.push(() => listener.close());
    const stack = new RdsStack({
      tcpPort: P,
      heartbeatIntervalMs: 100,
      heartbeatMissedLimit: 3,
      reconnectMaxDelayMs: 50,
    });
    cleanups.push(() => stack.close());
    const sock = new RdsSocket({ stack });
    await sock.bind({ address: '127.222.0.1', port: 4000 });
    cleanups.push(() => sock.close());
    sock.sendmsg(Buffer.from('first'), { address: '127.222.0.2', port: 4000 });
    const c0 = await listener.accept(0, 10_000);
    kernelMap(c0);
    expect((await c0.nextUser(10_000)).payload).toEqual(Buffer.from('first'));
    // Silent now: the node pings from KERNEL_PING_PORT; the kernel answers twice, as any does.
    let seq = 100;
    for (let i = 0; i < 2; i++) {
      await c0.nextMatching(isLivenessPing, 10_000);
      c0.send({ sequence: seq++, sport: 0, dport: KERNEL_PING_PORT });
    }
    await until(() => stack.counters.get('heartbeat_pong') >= 2, 'both pongs taken as answers', 10_000);
    // The pongs were nobody's message: not delivered, not counted as dropped for want of a socket.
    expect(stack.counters.get('recv_drop_no_sock')).toBe(0);
    expect(sock.recvmsg()).toBeNull();
    // Then its side stalls: the next ping goes unanswered (the connection stays open).
    await c0.nextMatching(isLivenessPing, 10_000);
    const c1 = await listener.accept(1, 10_000);
    expect(stack.counters.get('heartbeat_timeout')).toBeGreaterThanOrEqual(1);
    // The new carrier works: a message sent now arrives on it.
    kernelMap(c1);
    sock.sendmsg(Buffer.from('after'), { address: '127.222.0.2', port: 4000 });
    expect((await c1.nextUser(10_000)).payload).toEqual(Buffer.from('after'));
  });
});

/** A path as the heartbeat sees it, with a kernel peer over TCP; `answers`: the kernel has answered a ping before. */
function fakePath(answers: boolean) {
  const counters = new Map<string, number>();
  const path = {
    state: RDS_CONN_UP,
    readPaused: false,
    // A dropped carrier's path is down until it reconnects (the tick then does nothing).
    drop: vi.fn((): void => {
      path.state = RDS_CONN_DOWN;
    }),
    tx: { queueControl: vi.fn(() => ({})) },
    acks: { ackInFlight: false, sendFrame: vi.fn() },
    conn: {
      isLoopback: false,
      transport: { streamCarrier: true, xmitControl: () => {} },
      handshake: { peer: 'kernel', heartbeatMode: false, answersPings: answers, notePingAnswered: () => {} },
      stack: {
        referenced: true,
        options: { heartbeatIntervalMs: 1000, heartbeatMissedLimit: 4 },
        counters: { add: (c: number) => counters.set(String(c), (counters.get(String(c)) ?? 0) + 1) },
      },
    },
  };
  return path;
}

describe('kernel liveness: when a silent kernel is given up on', () => {
  it('a kernel that never answered a ping (net.rds.ping_enable = 0) keeps its carrier however long it is silent; one that did loses it after heartbeatMissedLimit intervals', () => {
    vi.useFakeTimers();
    for (const answers of [false, true]) {
      const path = fakePath(answers);
      const hb = new Heartbeat(path as unknown as RdsConnPath);
      hb.noteRx();
      hb.start();
      // One ping once silent for an interval, and no other while it is unanswered.
      vi.advanceTimersByTime(1000);
      expect(path.tx.queueControl).toHaveBeenCalledTimes(1);
      expect(path.tx.queueControl).toHaveBeenCalledWith(KERNEL_PING_PORT, 0);
      expect(hb.expectsPong).toBe(true);
      vi.advanceTimersByTime(20_000);
      expect(path.tx.queueControl).toHaveBeenCalledTimes(1);
      if (answers) expect(path.drop).toHaveBeenCalledTimes(1);
      else expect(path.drop).not.toHaveBeenCalled();
      hb.stop();
    }
  });

  it('a pong, or anything the kernel sends, keeps the carrier; a rds-socket peer gets no pings', () => {
    vi.useFakeTimers();
    const path = fakePath(true);
    const hb = new Heartbeat(path as unknown as RdsConnPath);
    hb.noteRx();
    hb.start();
    for (let i = 0; i < 10; i++) {
      vi.advanceTimersByTime(1000);
      if (hb.expectsPong) {
        hb.noteRx();
        hb.pongReceived();
      }
    }
    expect(path.drop).not.toHaveBeenCalled();
    expect(path.tx.queueControl.mock.calls.length).toBeGreaterThanOrEqual(5);
    hb.stop();
    // rds-socket peers have their own heartbeat (ack-only frames), never a ping.
    const other = fakePath(true);
    other.conn.handshake.peer = 'rds-socket';
    other.conn.handshake.heartbeatMode = true;
    const hb2 = new Heartbeat(other as unknown as RdsConnPath);
    hb2.noteRx();
    hb2.start();
    vi.advanceTimersByTime(3000);
    expect(other.tx.queueControl).not.toHaveBeenCalled();
    expect(other.acks.sendFrame).toHaveBeenCalled();
    hb2.stop();
  });
});
