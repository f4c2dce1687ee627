// A sender that ignores the congestion map and pours 64 KiB messages at a port nobody reads.
// Past recvHardLimitFactor x SO_RCVBUF the victim stops reading that connection: TCP holds the
// sender back and the victim's memory stays flat.
import { SINK_PORT, frame, pour, rawConnect, runAttack } from './lib.mjs';

export const name = 'congestion-ignoring';
export const description = 'raw 64 KiB frames to an unread port, ignoring congestion maps';
/** Idle ~60 MiB plus 64 x SO_RCVBUF (6.5 MiB) queued; unbounded, over 1 GiB after 2 s. */
export const bounds = { peakRssMiB: 120, goodP99Ms: 500 };

const VICTIM = '127.119.2.1';
const SIZE = 64 * 1024;

export async function run({ seconds }) {
  return runAttack({
    seconds,
    victimAddress: VICTIM,
    goodAddress: '127.118.2.1',
    async attack({ seconds: s }) {
      const senders = await Promise.all([1, 2].map((h) => rawConnect(`127.110.2.${h}`, VICTIM)));
      const body = Buffer.alloc(SIZE, 0x5a);
      const end = Date.now() + s * 1000;
      const go = () => Date.now() < end;
      let accepted = 0;
      await Promise.all(
        senders.map((sock) => {
          sock.on('data', () => {}); // takes the maps, and ignores them
          return pour(sock, go, (i) => frame({ sequence: i + 1, sport: 7000, dport: SINK_PORT }, body));
        }),
      );
      for (const sock of senders) {
        accepted += sock.bytesWritten - sock.writableLength;
        sock.destroy();
      }
      return (c) =>
        `${(accepted / 2 ** 20).toFixed(0)} MiB taken by TCP; victim queued ${((c?.recv_bytes_added_to_sock ?? 0) / 2 ** 20).toFixed(1)} MiB, paused reading ${c?.recv_pause_queue_limit ?? '?'} times (recv_pause_queue_limit)`;
    },
  });
}
