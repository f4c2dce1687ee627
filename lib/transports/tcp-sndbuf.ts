// The kernel send buffer each TCP carrier gets (the tcpSndbuf option). Its default, 'auto', caps
// it for peers on this host only: there a write() runs the receiving socket's TCP input in the
// same call, so a large buffer lets one write of a big message hold the one JavaScript thread that
// serves every path of the node (docs/performance.md, head-of-line). Across a network the write is
// a copy, and capping the buffer would cap throughput at buffer / round trip, so the kernel keeps
// tuning it there, as it does for its own RDS/TCP sockets.
import { networkInterfaces } from 'node:os';

/** What 'auto' gives a connection to a peer on this host. */
export const SAME_HOST_SNDBUF = 128 * 1024;

let ownAddresses: Set<string> | null = null;
let ownAt = 0;
/** This host's IPv4 addresses, read at most once a minute (interfaces rarely change). */
function isOwnAddress(addr: string): boolean {
  const now = Date.now();
  if (ownAddresses === null || now - ownAt > 60_000) {
    ownAddresses = new Set();
    for (const list of Object.values(networkInterfaces())) {
      for (const a of list ?? []) if (a.family === 'IPv4') ownAddresses.add(a.address);
    }
    ownAt = now;
  }
  return ownAddresses.has(addr);
}

/** The send buffer for a carrier to `remote` (bytes; 0: leave it to the kernel's autotuning). */
export function carrierSndbuf(option: number | 'auto', remote: string | undefined): number {
  if (option !== 'auto') return option;
  if (remote === undefined) return 0;
  const v4 = remote.startsWith('::ffff:') ? remote.slice(7) : remote;
  return v4.startsWith('127.') || isOwnAddress(v4) ? SAME_HOST_SNDBUF : 0;
}
