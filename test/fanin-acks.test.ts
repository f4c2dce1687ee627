import { afterEach, describe, expect, it } from 'vitest';
import { constants, RdsSocket, RdsStack } from '../lib/index.js';
import { TEST_TCP_PORT, until } from './helpers.js';

// Issue 36's fan-in regression: 8 senders streaming 1 KiB messages into one receiver. Every
// message asks for an ack (a sender above half its SO_SNDBUF sets ACK_REQUIRED, as the kernel
// does), and each ack-only frame costs the receiver a write and a sender a wake-up, a read and a
// smaller next batch. When TCP carriers began to stop after READ_TURN_BYTES per event-loop turn,
// the receiver answered every cut-short turn with an ack: 3.6 ack-only frames per 1000 messages in
// the multi-process bench against 1.0 before. A carrier stopped for its turn has more to read at
// once, so its ack waits for the end of the burst (at most ACK_CUT_TURNS turns). The figure here
// is a count, not a time: it depends on how the turns fall, so the bound has room, but not for
// an ack per cut turn.

const SENDERS = 8;
const PER_SENDER = 3000;
const SIZE = 1024;

const stacks: RdsStack[] = [];
afterEach(async () => {
  await Promise.all(stacks.splice(0).map((s) => s.close()));
});

async function socketOn(address: string): Promise<RdsSocket> {
  const stack = new RdsStack({ tcpPort: TEST_TCP_PORT, npaths: 8 });
  stacks.push(stack);
  const s = new RdsSocket({ stack });
  await s.bind({ address, port: 4000 });
  s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 4 << 20);
  s.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 16 << 20);
  return s;
}

describe('fan-in: ack-only frames per message at the receiver', () => {
  it('8 senders x 3000 messages of 1 KiB: the receiver sends at most 2.5 ack-only frames per 1000 messages', async () => {
    const sink = await socketOn('127.156.36.2');
    const sinkStack = stacks[0]!;
    const senders = await Promise.all(Array.from({ length: SENDERS }, (_, i) => socketOn(`127.156.36.${10 + i}`)));
    // Connect every sender and let its handshake settle before counting.
    for (const s of senders) s.sendmsg(Buffer.from('hello'), sink.address());
    let got = 0;
    sink.on('readable', () => {
      while (sink.recvmsg() !== null) got++;
    });
    await until(() => got === SENDERS, 'the first message of every sender', 10000);
    const before = sinkStack.counters.snapshot();
    const payload = Buffer.alloc(SIZE, 0x5a);
    const pump = (s: RdsSocket, left: { n: number }): void => {
      while (left.n > 0) {
        try {
          s.sendmsg(payload, sink.address());
          left.n--;
        } catch (e) {
          if ((e as { code?: string }).code !== 'EAGAIN') throw e;
          s.once('writable', () => pump(s, left));
          return;
        }
      }
    };
    for (const s of senders) pump(s, { n: PER_SENDER });
    const total = SENDERS + SENDERS * PER_SENDER;
    await until(() => got === total, 'every message at the receiver', 60000);
    const after = sinkStack.counters.snapshot();
    const per1000 = (k: string) => (1000 * ((after[k] ?? 0) - (before[k] ?? 0))) / (SENDERS * PER_SENDER);
    // The senders did ask: nearly every message carries ACK_REQUIRED once half a budget is out.
    expect(per1000('recv_ack_required')).toBeGreaterThan(100);
    expect(per1000('send_ack_frames')).toBeGreaterThan(0);
    expect(per1000('send_ack_frames')).toBeLessThanOrEqual(2.5);
  }, 90000);
});
