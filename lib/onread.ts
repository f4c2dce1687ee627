// Reading an accepted stream socket into memory of our own choosing (net's `onread`), which Node
// offers only to sockets it creates or connects: shared by the TCP carriers (tcp-socket.ts) and
// the host node's control sockets (host/server.ts).
import { type OnReadOpts, Socket, type SocketConstructorOpts } from 'node:net';

/**
 * An accepted socket (taken paused, so nothing has been read) hands its handle to a new Socket
 * that reads with `onread`. The handle is net's private `_handle`; where this Node has none, null
 * is returned, the accepted socket is left as it was, and the caller reads 'data'.
 */
export function adoptWithOnread(sock: Socket, onread: OnReadOpts): Socket | null {
  const s = sock as unknown as { _handle?: { readStart?: unknown } | null };
  const handle = s._handle;
  if (handle === null || handle === undefined || typeof handle.readStart !== 'function') return null;
  s._handle = null;
  // With no handle, destroy() only settles the old stream and the server's connection count.
  sock.destroy();
  return new Socket({ handle, onread } as SocketConstructorOpts);
}
