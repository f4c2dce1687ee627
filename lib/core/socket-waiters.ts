// The blocking calls of a socket (send() waiting for room or an uncongested destination, recv()
// for a message, flush()) wait here for the next change of the socket's state; every change
// wakes all of them and each re-checks its own condition, so waking all is always correct.
import { abortError, type RdsError } from '../errors.js';

type Waiter = () => void;

/** @internal */
export class SocketWaiters {
  private readonly waiters = new Set<Waiter>();

  /**
   * `over()` says why waiting is over for good: EBADF once the socket is closed, a backend's
   * standing error (a host node gone), or null to wait.
   */
  constructor(private readonly over: (op: string) => RdsError | null) {}

  /**
   * Resolves on the next wakeAll(); rejects with over()'s error, or the signal's reason
   * (`reasonOf`) once aborted. `watch` registers another wake-up source (a congestion map
   * clearing) for the duration of the wait and returns its undo.
   */
  wait(
    signal: AbortSignal | undefined,
    op: string,
    reasonOf: (s: AbortSignal, op: string) => unknown,
    watch?: (wake: () => void) => () => void,
  ): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const now = this.over(op);
      if (now !== null) {
        reject(now);
        return;
      }
      // An 'abort' listener added to a signal that already fired is never called.
      if (signal?.aborted) {
        reject(reasonOf(signal, op));
        return;
      }
      let settled = false;
      let unwatch: (() => void) | null = null;
      const finish = (err?: unknown): void => {
        if (settled) return;
        settled = true;
        this.waiters.delete(w);
        unwatch?.();
        signal?.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve();
      };
      const w: Waiter = () => finish(this.over(op) ?? undefined);
      const onAbort = (): void => finish(reasonOf(signal!, op));
      this.waiters.add(w);
      if (watch !== undefined) unwatch = watch(w);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  get size(): number {
    return this.waiters.size;
  }

  wakeAll(): void {
    if (this.waiters.size === 0) return;
    for (const w of [...this.waiters]) w();
  }
}

/** Settles as `done` does, or rejects with the signal's reason for `op` once it aborts first. @internal */
export function untilDoneOrAborted(done: Promise<unknown>, signal: AbortSignal, op: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal.aborted) {
      reject(abortError(signal, op));
      return;
    }
    const onAbort = (): void => reject(abortError(signal, op));
    signal.addEventListener('abort', onAbort, { once: true });
    done.then(
      () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      },
      (e: Error) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
