// Issue 39 at 1,000 addresses: see stalled-drain-lib.mjs. The bounds are those of 200 addresses.
import { stalledDrain } from './stalled-drain-lib.mjs';

export const name = 'stalled-drain-1000';
export const description = '1,000 addresses, each a small frame then 1 MiB short of its last byte';
/** Idle ~60 MiB, plus the 64 MiB cap, plus the allowance; unbounded, a MiB per address. */
// 1,000 TCP connections and peer records on top of the 200 case's: 225 MiB peak was seen.
export const bounds = { peakRssMiB: 280, goodP99Ms: 500 };

export function run() {
  return stalledDrain({
    addresses: 1000,
    victimAddress: '127.119.5.1',
    goodAddress: '127.118.5.1',
    attackerAddress: (n) => `127.112.${Math.floor(n / 250)}.${(n % 250) + 1}`,
  });
}
