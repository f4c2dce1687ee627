// 300 connections from 300 addresses, each sending a small frame (so it counts as identified),
// then a header for 1 MiB and all but the last byte, and nothing more. Frames in progress share
// maxPartialFrameBytes (64 MiB by default; 16 MiB here, so that the bound tells a capped victim
// from one holding a MiB per connection); connections past it wait, unread. frameTimeoutMs
// (default 30 s, longer than the attack) would drop them.
import { SINK_PORT, frame, rawConnect, runAttack, sleep } from './lib.mjs';

export const name = 'stalled-payload';
export const description = '300 connections each holding a 1 MiB frame short of its last byte';
/** Idle ~60 MiB, plus the 16 MiB cap, plus a read buffer or two (64-144 KiB) per connection; uncapped, a MiB per connection. */
export const bounds = { peakRssMiB: 180, goodP99Ms: 500 };
const CAP = 16 << 20;

const VICTIM = '127.119.3.1';
const CONNS = 300;
const BATCH = 50;
const BIG = 1 << 20;

export async function run({ seconds }) {
  return runAttack({
    seconds,
    victimAddress: VICTIM,
    goodAddress: '127.118.3.1',
    victimOptions: { maxPartialFrameBytes: CAP },
    async attack({ seconds: s }) {
      const end = Date.now() + s * 1000;
      const almost = Buffer.concat([
        frame({ sequence: 2, sport: 7000, dport: SINK_PORT, len: BIG }),
        Buffer.alloc(BIG - 1, 0x33),
      ]);
      const socks = [];
      let refused = 0;
      // A batch at a time: the victim accepts 64 unidentified connections at once.
      for (let k = 0; k < CONNS && Date.now() < end; k += BATCH) {
        const batch = await Promise.all(
          Array.from({ length: Math.min(BATCH, CONNS - k) }, (_, j) => {
            const n = k + j;
            return rawConnect(`127.110.${3 + (n >> 8)}.${(n & 0xff) + 1}`, VICTIM).catch(() => null);
          }),
        );
        for (const sock of batch) {
          if (sock === null) {
            refused++;
            continue;
          }
          sock.on('data', () => {});
          sock.on('close', () => {});
          sock.write(frame({ sequence: 1, sport: 7000, dport: SINK_PORT }, Buffer.from('hi')));
          sock.write(almost);
          socks.push(sock);
        }
      }
      while (Date.now() < end) await sleep(50);
      const held = socks.filter((x) => !x.destroyed).length;
      for (const sock of socks) sock.destroy();
      return (c) =>
        `maxPartialFrameBytes ${CAP >> 20} MiB; ${socks.length} connections (${refused} refused), ${held} still open at the end; victim waited ${c?.recv_pause_partial_limit ?? '?'} (recv_pause_partial_limit), dropped ${c?.recv_drop_frame_timeout ?? '?'} (recv_drop_frame_timeout)`;
    },
  });
}
