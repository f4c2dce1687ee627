// The kernel send buffer each TCP carrier gets (the tcpSndbuf option). Its default, 'auto', caps
// it for peers on this host only, and only once the carrier writes a large message: there a
// write() runs the receiving socket's TCP input in the same call, so a large buffer lets one write
// of a big message hold the one JavaScript thread that serves every path of the node
// (docs/performance.md, head-of-line). Small messages go out in runs of about the socket's
// high-water mark (16 KiB) whatever the buffer, and capping it for them cost a fan-in of 1 KiB
// messages a quarter of its throughput (a sender's writes taken in part and finished on the next
// writable event, five times the context switches: docs/fan-in-regression.md). Across a network
// the write is a copy, and capping the buffer would cap throughput at buffer / round trip, so the
// kernel keeps tuning it there, as it does for its own RDS/TCP sockets.
import type { Socket } from 'node:net';
import { networkInterfaces } from 'node:os';
import { native } from '../native.js';
import { socketFd } from './tcp-socket.js';

/** What 'auto' gives a connection to a peer on this host, from its first large message on. */
export const SAME_HOST_SNDBUF = 128 * 1024;
/** A message at least this large is a large write of its own (4 x the socket's high-water mark). */
export const LARGE_WRITE = 64 * 1024;

/** Carriers whose buffer 'auto' caps at their first large message, and to what. */
const capAtLarge = new WeakMap<Socket, number>();

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

/**
 * The send buffer for a carrier to `remote`: `now` bytes at once (0: leave it to the kernel's
 * autotuning), or `atLarge` bytes from its first large message on ('auto', a peer on this host).
 */
export function carrierSndbuf(option: number | 'auto', remote: string | undefined): { now: number; atLarge: number } {
  if (option !== 'auto') return { now: option, atLarge: 0 };
  if (remote === undefined) return { now: 0, atLarge: 0 };
  const v4 = remote.startsWith('::ffff:') ? remote.slice(7) : remote;
  return { now: 0, atLarge: v4.startsWith('127.') || isOwnAddress(v4) ? SAME_HOST_SNDBUF : 0 };
}

/** Applies the tcpSndbuf option to a new carrier (its descriptor open). */
export function applySndbuf(sock: Socket, option: number | 'auto'): void {
  const { now, atLarge } = carrierSndbuf(option, sock.remoteAddress);
  if (now > 0) setSndbuf(sock, now);
  else if (atLarge > 0) capAtLarge.set(sock, atLarge);
}

/** The carrier is about to write a message of `len` payload bytes. */
export function writing(sock: Socket, len: number): void {
  if (len < LARGE_WRITE) return;
  const bytes = capAtLarge.get(sock);
  if (bytes === undefined) return;
  capAtLarge.delete(sock);
  setSndbuf(sock, bytes);
}

function setSndbuf(sock: Socket, bytes: number): void {
  const fd = socketFd(sock);
  const n = native();
  if (fd < 0 || n === null || typeof n.setSendBuffer !== 'function') return;
  try {
    // The kernel doubles what setsockopt asks for (its bookkeeping overhead); the option names the
    // doubled size, as net.rds.tcp.rds_tcp_sndbuf does.
    n.setSendBuffer(fd, bytes >>> 1);
  } catch {
    /* keep autotuning */
  }
}
