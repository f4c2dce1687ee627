// The blocking calls of an attached socket (send() waiting for budget or an uncongested
// destination, recv() for a message, flush()) wait here for the next change of the socket's
// state; every change wakes all of them and each re-checks its own condition.
import { RdsError } from '../errors.js';

type Waiter = () => void;

/** @internal */
export class AttachedWaiters {
  private readonly waiters = new Set<Waiter>();

  /**
   * `state()` says why waiting is over for good: 'closed', a node-gone error, or null to wait.
   * Resolves on the next wakeAll(); rejects with EBADF once closed, the node's error once it is
   * gone, or the signal's reason (`reasonOf`) once aborted.
   */
  constructor(private readonly state: () => 'closed' | RdsError | null) {}

  wait(signal: AbortSignal | undefined, op: string, reasonOf: (s: AbortSignal, op: string) => unknown): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const over = (): unknown => {
        const st = this.state();
        return st === 'closed' ? new RdsError('EBADF', `${op} interrupted: the socket was closed`) : (st ?? undefined);
      };
      const now = over();
      if (now !== undefined) {
        reject(now);
        return;
      }
      if (signal?.aborted) {
        reject(reasonOf(signal, op));
        return;
      }
      const finish = (err?: unknown): void => {
        this.waiters.delete(w);
        signal?.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve();
      };
      const w: Waiter = () => finish(over());
      const onAbort = (): void => finish(reasonOf(signal!, op));
      this.waiters.add(w);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  wakeAll(): void {
    if (this.waiters.size === 0) return;
    for (const w of [...this.waiters]) w();
  }
}
