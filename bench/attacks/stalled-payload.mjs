// 200 connections from 200 addresses, each sending a small frame (so it counts as identified),
// then a header for 1 MiB and all but the last byte, and nothing more. Frames in progress share
// maxPartialFrameBytes (default 64 MiB); connections past it wait, unread; frameTimeoutMs
// (default 30 s, longer than the attack) would drop them.
import { SINK_PORT, frame, rawConnect, runAttack, sleep } from './lib.mjs';

export const name = 'stalled-payload';
export const description = '200 connections each holding a 1 MiB frame short of its last byte';
/** Idle ~60 MiB, plus the 64 MiB cap, plus one read buffer for each waiting connection. */
export const bounds = { peakRssMiB: 250, goodP99Ms: 500 };

const VICTIM = '127.119.3.1';
const CONNS = 200;
const BIG = 1 << 20;

export async function run({ seconds }) {
  return runAttack({
    seconds,
    victimAddress: VICTIM,
    goodAddress: '127.118.3.1',
    async attack({ victim, seconds: s }) {
      const end = Date.now() + s * 1000;
      const almost = Buffer.concat([frame({ sequence: 2, sport: 7000, dport: SINK_PORT, len: BIG }), Buffer.alloc(BIG - 1, 0x33)]);
      const socks = [];
      let refused = 0;
      // A few at a time: the victim accepts 64 unidentified connections at once.
      for (let k = 0; k < CONNS && Date.now() < end; k += 20) {
        const batch = await Promise.all(Array.from({ length: Math.min(20, CONNS - k) }, (_, j) => {
          const n = k + j;
          return rawConnect(`127.110.${3 + (n >> 8)}.${(n & 0xff) + 1}`, VICTIM).catch(() => null);
        }));
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
      if (process.env.ATTACK_DEBUG) console.error(await victim.memory(), victim.peakRssMiB());
      const held = socks.filter((x) => !x.destroyed).length;
      for (const sock of socks) sock.destroy();
      return (c) => `${socks.length} connections (${refused} refused), ${held} still open at the end; victim waited ${c?.recv_pause_partial_limit ?? '?'} (recv_pause_partial_limit), dropped ${c?.recv_drop_frame_timeout ?? '?'} (recv_drop_frame_timeout)`;
    },
  });
}
