import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { constants, RdsSocket, RdsStack } from '../lib/index.js';
import { cleanupsPerTest, TEST_TCP_PORT, until } from './helpers.js';

// Issue 36's fan-in regression: 8 senders, each in a process of its own, stream 1 KiB messages
// into one receiver. Every message asks for an ack (a sender above half its SO_SNDBUF sets
// ACK_REQUIRED, as the kernel does), and each ack-only frame costs the receiver a write and a
// sender a wake-up, a read and a smaller next batch. Since TCP carriers stop after
// READ_TURN_BYTES per event-loop turn, a receiver that keeps up with less than its senders ends
// most turns with a carrier cut short, and it answered each such turn with an ack: 3.6-4.2
// ack-only frames per 1000 messages in the bench against 1.0-1.5 before the turn budget. A carrier
// stopped for its turn has more to read at once, so its ack waits for the end of the burst (at
// most ACK_CUT_TURNS turns). The figure is a count, not a time; how the turns fall depends on the
// machine, so the bound leaves room, but not for an ack per cut turn: measured here (load 15-22)
// 5.3 and 5.4 per 1000 without the wait, 2.6 and 2.9 with it (the count includes the carriers'
// start and the receiver's warm-up). But a fresh 2-core CI machine measured 5.56 with it, so the
// 4-per-1000 target is judged by bench/fanin-ab.mjs (its `targets` lines), and the mechanism by
// test/path/ack-pacing.test.ts, which drives the turns itself. What stays here is what a loaded
// machine cannot move: every message arrives, the senders did ask for acks (on nearly every
// message), and the receiver does not answer them one by one: at most 20 per 1000, where a
// quiet machine reads about 19 times per 1000 messages and acks 1.5 times. Senders in processes of
// their own: in one process the receiver's turns are rarely cut (the senders cannot run while it
// reads), which is not the fan-in a cluster sees.

const SENDER = fileURLToPath(new URL('./fixtures/fanin-sender.mjs', import.meta.url));
const SENDERS = 8;
const PER_SENDER = 12500;
const SIZE = 1024;

const cleanups = cleanupsPerTest();

function sender(bind: string, to: string): { p: ChildProcess; ev: (name: string) => Promise<void> } {
  const p = spawn(
    process.execPath,
    [
      SENDER,
      '--bind',
      bind,
      '--to',
      to,
      '--count',
      String(PER_SENDER),
      '--size',
      String(SIZE),
      '--tcp-port',
      String(TEST_TCP_PORT),
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  cleanups.push(() => {
    p.kill('SIGKILL');
  });
  const seen: string[] = [];
  let buf = '';
  p.stdout!.setEncoding('utf8');
  p.stdout!.on('data', (d: string) => {
    buf += d;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      seen.push(JSON.parse(buf.slice(0, nl)).ev);
      buf = buf.slice(nl + 1);
    }
  });
  return { p, ev: (name) => until(() => seen.includes(name), `sender ${bind}: ${name}`, 20000) };
}

describe('fan-in: ack-only frames per message at the receiver', () => {
  it('8 sender processes x 12500 messages of 1 KiB: every message arrives, with at most 20 ack-only frames per 1000 (the target of 4 is judged in bench/fanin-ab.mjs)', async () => {
    const stack = new RdsStack({ tcpPort: TEST_TCP_PORT, npaths: 8 });
    cleanups.push(() => stack.close());
    const sink = new RdsSocket({ stack });
    await sink.bind({ address: '127.156.36.2', port: 4000 });
    sink.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 16 << 20);
    let got = 0;
    sink.on('readable', () => {
      while (sink.recvmsg() !== null) got++;
    });
    const senders = Array.from({ length: SENDERS }, (_, i) => sender(`127.156.36.${10 + i}`, '127.156.36.2'));
    for (const s of senders) await s.ev('ready');
    const before = stack.counters.snapshot();
    for (const s of senders) s.p.stdin!.write('go\n');
    const total = SENDERS * PER_SENDER;
    await until(() => got === total, 'every message at the receiver', 120000);
    const after = stack.counters.snapshot();
    const per1000 = (k: keyof typeof after) => (1000 * (after[k] - before[k])) / total;
    // The senders did ask: most messages carry ACK_REQUIRED once half a budget is out.
    expect(per1000('recv_ack_required')).toBeGreaterThan(500);
    expect(per1000('send_ack_frames')).toBeGreaterThan(0);
    expect(per1000('send_ack_frames')).toBeLessThanOrEqual(20);
  }, 150000);
});
