import type { Socket } from 'node:net';
import tls from 'node:tls';

/**
 * How long a carrier whose write failed on the peer's reset may stay open for what its kernel
 * still queues for us to be read. The read side ends (EOF) in the first poll that reads it, unless
 * the receive limits hold reading; this bounds what a reset peer can make us keep.
 */
export const DRAIN_AFTER_RESET_MS = 1000;

/** A write refused because the peer reset the connection (ECONNRESET once, EPIPE after). */
function resetOnWrite(err: unknown): boolean {
  const e = err as NodeJS.ErrnoException | undefined;
  return e?.syscall === 'write' && (e.code === 'ECONNRESET' || e.code === 'EPIPE');
}

/**
 * Bytes our TCP acknowledged are delivered as far as a kernel sender is concerned (spec §2.4): it
 * has released those messages. A reset from the peer does not discard them (they stay in our
 * socket's receive queue, readable until EOF); closing the descriptor does. Node destroys a socket
 * whose write fails, before libuv reads what is queued: a node whose event loop was held (the
 * application's own code, a slow machine) while the kernel sent, and then reset the connection,
 * lost every message it had not read yet as soon as it wrote again (issue #40).
 *
 * So for `sock`, a carrier: a destroy caused by such a write error waits until the read side has
 * ended (what was queued has gone through the carrier's reader), or DRAIN_AFTER_RESET_MS. Writes
 * meanwhile stay in the socket (it is errored; their messages are resent on the next carrier).
 * Any other destroy (ours, a read error) is done at once. Not for TLS: its layer owns the stream.
 */
export function readQueuedBeforeResetDestroy(sock: Socket): void {
  if (sock instanceof tls.TLSSocket) return;
  const destroy = sock.destroy;
  let draining = false;
  sock.destroy = function (this: Socket, err?: Error): Socket {
    if (!resetOnWrite(err) || this.destroyed) return destroy.call(this, err);
    if (draining) return this; // a later failing write: the first one already waits
    if (this.readableEnded) return destroy.call(this, err);
    draining = true;
    const finish = (): void => {
      clearTimeout(timer);
      if (!this.destroyed) destroy.call(this, err);
    };
    // A failed write marks the readable side errored too, and an errored stream never emits
    // 'end'; the error is kept (and reported on the destroy), the read side goes on to its end.
    (this as unknown as { _readableState: { errored: Error | null } })._readableState.errored = null;
    this.once('end', finish);
    // A timer set now runs before the next poll: the immediate after it lets that poll read.
    const timer = setTimeout(() => setImmediate(finish), DRAIN_AFTER_RESET_MS);
    timer.unref();
    return this;
  };
}
