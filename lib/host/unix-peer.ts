// What the kernel knows about the two ends of a control socket, through the native addon
// (src-native/unix_sock.cc): the credentials of the process at the other end, and the socket's
// send buffer. Without the addon (another platform) both are unavailable and callers say so.
import type { Socket } from 'node:net';
import { native } from '../native.js';

/** Credentials of a Unix socket's peer as the kernel recorded them at connect(). */
export interface PeerCredentials {
  pid: number;
  uid: number;
  gid: number;
}

/** The send buffer each end of a control socket asks for (capped by net.core.wmem_max). */
export const CONTROL_SNDBUF = 1 << 20;

function fdOf(sock: Socket): number {
  const fd = (sock as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : -1;
}

/** SO_PEERCRED of a connected Unix socket, or null when the addon is not there. */
export function peerCredentials(sock: Socket): PeerCredentials | null {
  const n = native();
  const fd = fdOf(sock);
  if (n === null || typeof n.peerCred !== 'function' || fd < 0) return null;
  try {
    return n.peerCred(fd);
  } catch {
    return null;
  }
}

/**
 * Raises a control socket's send buffer from the default (about 200 KiB): a Unix stream writer
 * may queue only that much, and wakes only once the reader has taken three quarters of it, so
 * with the default a stream of large messages costs a wakeup on both sides every few messages.
 * Best effort: without the addon the default stays.
 */
export function widenSendBuffer(sock: Socket): void {
  const n = native();
  const fd = fdOf(sock);
  if (n === null || typeof n.setSendBuffer !== 'function' || fd < 0) return;
  try {
    n.setSendBuffer(fd, CONTROL_SNDBUF);
  } catch {
    /* the default stays */
  }
}
