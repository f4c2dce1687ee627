import type { Socket } from 'node:net';
import tls from 'node:tls';

/**
 * How long a carrier being let go may stay open for what its kernel still queues for us to be
 * read: one whose write failed on the peer's reset, or one a newer connection replaces. The read
 * side ends (EOF) in the first poll that reads it, unless the receive limits hold reading; this
 * bounds what a reset peer can make us keep.
 */
export const DRAIN_AFTER_RESET_MS = 1000;

/** How the receive limits' hold counts against the drain's time (see afterReadEnds). */
export interface DrainHold {
  /** Milliseconds the receive limits have held the carrier's reading, in all (TcpPath.heldMs). */
  heldMs(now: number): number;
  /** The drain's whole time, held or not, is at most this. */
  capMs: number;
}

/**
 * Runs `done` once `sock`'s read side has ended (EOF: everything its kernel queued went through
 * the carrier's reader) or the socket closed (a read error ends it the same way, after what came
 * before it was read), or once it has had DRAIN_AFTER_RESET_MS to read. With `hold`, time during
 * which the receive limits held reading does not count (they, not the peer, keep the bytes
 * unread), up to `hold.capMs` in all. The close listener runs before any other: `done` may take
 * the socket out of its path before the path hears of the close.
 */
export function afterReadEnds(sock: Socket, done: () => void, hold?: DrainHold): void {
  let fired = false;
  let timer: NodeJS.Timeout | null = null;
  const finish = (): void => {
    if (fired) return;
    fired = true;
    if (timer !== null) clearTimeout(timer);
    sock.off('end', finish);
    sock.off('close', finish);
    done();
  };
  if (sock.readableEnded || sock.destroyed) {
    finish();
    return;
  }
  sock.once('end', finish);
  sock.prependOnceListener('close', finish);
  const start = Date.now();
  const heldAtStart = hold?.heldMs(start) ?? 0;
  const arm = (ms: number): void => {
    timer = setTimeout(() => {
      const now = Date.now();
      const unheld = now - start - ((hold?.heldMs(now) ?? 0) - heldAtStart);
      const left = Math.min(DRAIN_AFTER_RESET_MS - unheld, (hold?.capMs ?? DRAIN_AFTER_RESET_MS) - (now - start));
      if (left > 0) {
        arm(left);
        return;
      }
      // A timer set now runs before the next poll: the immediate after it lets that poll read.
      setImmediate(finish);
    }, ms);
    timer.unref();
  };
  arm(DRAIN_AFTER_RESET_MS);
}

/** Sockets whose destroy readQueuedBeforeResetDestroy already guards. */
const guarded = new WeakSet<Socket>();

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
 * With `hold`, time the receive limits held the carrier's reading does not count (afterReadEnds).
 */
export function readQueuedBeforeResetDestroy(sock: Socket, hold?: DrainHold): void {
  // Once per socket (a carrier moved to another lane is attached again: TcpListener.carrierToLane).
  if (sock instanceof tls.TLSSocket || guarded.has(sock)) return;
  guarded.add(sock);
  const destroy = sock.destroy;
  let draining = false;
  sock.destroy = function (this: Socket, err?: Error): Socket {
    if (!resetOnWrite(err) || this.destroyed) return destroy.call(this, err);
    if (draining) return this; // a later failing write: the first one already waits
    if (this.readableEnded) return destroy.call(this, err);
    draining = true;
    // A failed write marks the readable side errored too, and an errored stream never emits
    // 'end'; the error is kept (and reported on the destroy), the read side goes on to its end.
    (this as unknown as { _readableState: { errored: Error | null } })._readableState.errored = null;
    afterReadEnds(
      this,
      () => {
        if (!this.destroyed) destroy.call(this, err);
      },
      hold,
    );
    return this;
  };
}
