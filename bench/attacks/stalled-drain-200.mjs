// Issue 39 at 200 addresses: see stalled-drain-lib.mjs.
import { stalledDrain } from './stalled-drain-lib.mjs';

export const name = 'stalled-drain-200';
export const description = '200 addresses, each a small frame then 1 MiB short of its last byte';
/** Idle ~60 MiB, plus the 64 MiB cap, plus the allowance; unbounded, a MiB per address. */
export const bounds = { peakRssMiB: 220, goodP99Ms: 500 };

export function run() {
  return stalledDrain({
    addresses: 200,
    victimAddress: '127.119.4.1',
    goodAddress: '127.118.4.1',
    attackerAddress: (n) => `127.111.${Math.floor(n / 250)}.${(n % 250) + 1}`,
  });
}
