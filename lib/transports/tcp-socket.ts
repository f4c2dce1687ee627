// The TCP sockets under RDS/TCP's carriers, as node:net gives them: the local port range connects
// bind in, a socket's fd, slab reads into a frame reader (also for accepted sockets), the reset
// that ends a refused connection, and a socket's addresses as RDS addresses.
import { readFileSync } from 'node:fs';
import type { OnReadOpts, Socket } from 'node:net';
import * as tls from 'node:tls';
import { canonicalAddress } from '../core/address.js';
import type { FrameReader } from '../wire/frame-reader.js';
import { adoptWithOnread } from '../onread.js';

/** net.ipv4.ip_local_port_range, with the low end rounded up to a multiple of 8. */
let portRange: [number, number] | null = null;
export function localPortRange(): [number, number] {
  if (portRange === null) {
    let lo = 32768;
    let hi = 60999;
    try {
      const [a, b] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
      if (a! > 0 && b! >= a!) [lo, hi] = [a!, b!];
    } catch {
      /* not Linux: use the default range */
    }
    portRange = [Math.ceil(lo / 8) * 8, hi];
  }
  return portRange;
}

export function socketFd(sock: Socket): number {
  const fd = (sock as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : -1;
}

/** net's onread options that read into `reader`'s slabs and hand each read's length to `received`. */
export function slabOnread(reader: FrameReader, received: (n: number) => void): OnReadOpts {
  return {
    buffer: () => reader.readBuffer(),
    callback: (n: number): boolean => {
      received(n);
      return true;
    },
  };
}

type ReadHandle = { reading: boolean; readStop(): number; readStart(): number };

/**
 * Stops (`on` false) or restarts a slab-reading socket's reads for a turn budget (read-turn.ts),
 * at its handle: what Socket.pause() and resume() do for a socket with `onread`, without the
 * stream's pause and resume around it (a nextTick and a flow per resume; measured ~4% of a fan-in
 * receiver's CPU, cut several times per 1000 messages). The handle's `reading` flag stays net's
 * own view, so the socket's pause() and resume() (the receive limits) still see the truth. A socket
 * without such a handle, or one reading 'data' (`slab` false), goes through pause() and resume().
 */
export function turnReads(sock: Socket, slab: boolean, on: boolean): void {
  const h = (sock as unknown as { _handle?: ReadHandle | null })._handle;
  if (!slab || h === null || h === undefined || typeof h.readStop !== 'function') {
    on ? sock.resume() : sock.pause();
    return;
  }
  if (h.reading === on || sock.destroyed) return;
  h.reading = on;
  const err = on ? h.readStart() : h.readStop();
  if (err < 0)
    sock.destroy(Object.assign(new Error(`${on ? 'readStart' : 'readStop'} failed (${err})`), { errno: err }));
}

/**
 * Node offers slab reads (`onread`) only to sockets it connects, never to ones a server accepts.
 * An accepted socket (taken paused, so nothing has been read) hands its handle to a new Socket
 * that reads into `reader`'s slabs, as initiated carriers do (see adoptWithOnread).
 */
export function withSlabReads(sock: Socket, reader: FrameReader, received: (n: number) => void): Socket | null {
  return adoptWithOnread(sock, slabOnread(reader, received));
}

/**
 * Ends a connection we refuse or give up on, with a reset where possible (no TIME_WAIT, the peer
 * learns at once). Never throws: it runs inside event handlers, where a throw kills the process.
 * A TLS socket has no TCP handle of its own (resetAndDestroy throws ERR_INVALID_HANDLE_TYPE on
 * it) and is only destroyed: resetting the TCP socket under a live TLS layer crashes Node 20
 * (segmentation fault). Connections refused before their handshake are plain and are reset.
 */
export function refuse(sock: Socket): void {
  try {
    if (sock instanceof tls.TLSSocket || sock.destroyed) sock.destroy();
    else sock.resetAndDestroy();
  } catch {
    sock.destroy();
  }
}

/**
 * A connection's two addresses in canonical form. Node's net reports a link-local one with its
 * zone by interface name (`fe80::2%eth0`, for accepted and dialled connections alike), which is
 * the form the sockets bind and send with, so both name the same connection.
 */
export function peerOf(sock: Socket): { local: string | null; remote: string | null } {
  const strip = (a: string | undefined): string | null => {
    if (a === undefined) return null;
    return canonicalAddress(a.startsWith('::ffff:') && a.includes('.') ? a.slice(7) : a);
  };
  return { local: strip(sock.localAddress), remote: strip(sock.remoteAddress) };
}
