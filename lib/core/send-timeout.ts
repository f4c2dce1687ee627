import { RdsError } from '../errors.js';
import type { RdsOutgoing, RdsSendList } from './message.js';

/** The longest delay a Node.js timer takes. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * SO_SNDTIMEO: a socket's messages that stay unacknowledged this long are given up. Deadlines are
 * per message (queue time + timeout) but checked with one timer per socket: the socket's send
 * list is in queue order, so its first message always has the earliest deadline, and the timer
 * only ever waits for that one.
 */
export class SendTimeout {
  /** The timeout in ms; 0 = never (the default, as in the kernel). */
  ms = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly pending: RdsSendList,
    /** Messages were removed (for the send_cancelled counter). */
    private readonly cancelled: (n: number) => void,
  ) {}

  /** Sets the timeout; messages already queued count from now if they had no deadline. */
  set(ms: number): void {
    if (!Number.isInteger(ms) || ms < 0 || ms > MAX_TIMER_MS) {
      throw new RdsError('EINVAL', `SO_SNDTIMEO takes whole milliseconds from 0 (never) to ${MAX_TIMER_MS}, got ${ms}`);
    }
    this.stop();
    this.ms = ms;
    if (ms === 0) return;
    const now = performance.now();
    for (let m = this.pending.first; m !== null; m = m.sockNext) m.startDeadline(now);
    this.arm();
  }

  /** A message joined the socket's send list (called only while ms > 0). */
  queued(m: RdsOutgoing): void {
    m.startDeadline(performance.now());
    if (this.timer === null) this.arm();
  }

  stop(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private arm(): void {
    const first = this.pending.first;
    if (first === null || this.ms === 0) return;
    const delay = Math.max(0, Math.ceil(first.queuedAt + this.ms - performance.now()));
    this.timer = setTimeout(() => this.expire(), delay);
    // An open socket already holds the process (its stack's transports are referenced).
    this.timer.unref();
  }

  /**
   * Messages past their deadline are given up together with every other message to the same
   * destination (address and port), exactly as RDS_CANCEL_SENT_TO removes them: never
   * (re)transmitted, their budget returned, pending confirmations rejected. Removing only the
   * expired ones would let later messages to that port be delivered after a hole, which RDS never
   * does otherwise.
   */
  private expire(): void {
    this.timer = null;
    const now = performance.now();
    const dests = new Set<string>();
    for (let m = this.pending.first; m !== null && m.queuedAt + this.ms <= now; m = m.sockNext) {
      dests.add(destKey(m));
    }
    if (dests.size > 0) {
      const errs = new Map<string, RdsError>();
      let n = 0;
      for (const m of this.pending.toArray()) {
        const k = destKey(m);
        if (!dests.has(k)) continue;
        let err = errs.get(k);
        if (err === undefined) {
          err = new RdsError(
            'ETIMEDOUT',
            `no acknowledgement from ${k} within SO_SNDTIMEO (${this.ms} ms); its messages were removed as by RDS_CANCEL_SENT_TO`,
          );
          errs.set(k, err);
        }
        m.complete(err);
        n++;
      }
      this.cancelled(n);
    }
    this.arm();
  }
}

function destKey(m: RdsOutgoing): string {
  return m.daddr.includes(':') ? `[${m.daddr}]:${m.dport}` : `${m.daddr}:${m.dport}`;
}
