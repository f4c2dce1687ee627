// The calls an attached socket makes without waiting for the host node's answer (open, and the
// setsockopt() behind a constructor option or a setsockopt() call), and what becomes of a refusal.
import { SO_RCVBUF, SO_SNDBUF, SOL_SOCKET } from '../constants.js';
import { RdsError } from '../errors.js';
import type { NodeLink } from './client.js';

/**
 * setsockopt() and open answer at once (the socket keeps its own copy of the options, checked with
 * RdsSocket's errors), and the node hears of them without being waited for. The node's answer
 * comes later; a refusal is never dropped: the option goes back to its value before the call, and
 * the refusal is kept and thrown by the socket's next call (poll() reports POLLERR meanwhile),
 * as the kernel reports an error that arrives between calls with the next one. A refused open
 * ends the socket (`dead`): every later call throws that refusal. The node going away is not a
 * refusal: the link tells every socket of it (nodeGone).
 * @internal
 */
export class UnansweredCalls {
  #refusal: RdsError | null = null;
  /** The latest setsockopt() of each option still unanswered: only its refusal restores the value. */
  readonly #latest = new Map<string, number>();
  #seq = 0;

  constructor(
    private readonly link: NodeLink,
    private readonly sid: number,
    /** Sets the socket's own copy of an option back (no forwarding). */
    private readonly restore: (level: number, name: number, value: number) => void,
    /** The node refused to open the socket. */
    private readonly dead: (e: RdsError) => void,
  ) {}

  /** Asks the node to open the socket. */
  open(): void {
    this.link.request('open', this.sid).catch((e: unknown) => {
      if (e !== this.link.downError) this.dead(refusal(e, 'opening the socket'));
    });
  }

  /**
   * Tells the node of setsockopt(level, name, value); `before` is the option's value as
   * getsockopt() read it before the call (undefined: an action, nothing to restore).
   */
  setsockopt(level: number, name: number, value: unknown, before: number | undefined): void {
    const key = `${level}:${name}`;
    const seq = ++this.#seq;
    this.#latest.set(key, seq);
    this.link.request('setsockopt', this.sid, { level, name, value }).then(
      () => {
        if (this.#latest.get(key) === seq) this.#latest.delete(key);
      },
      (e: unknown) => {
        if (e === this.link.downError) return;
        if (this.#latest.get(key) === seq) {
          this.#latest.delete(key);
          // getsockopt reports SO_SNDBUF and SO_RCVBUF doubled, as Linux does; they are set halved.
          const doubled = level === SOL_SOCKET && (name === SO_SNDBUF || name === SO_RCVBUF);
          if (before !== undefined) this.restore(level, name, doubled ? before / 2 : before);
        }
        this.#refusal ??= refusal(e, `setsockopt(level ${level}, option ${name})`);
      },
    );
  }

  /** Tells the node of ioctl(request, arg) (SIOCRDSSETTOS); a refusal is kept as setsockopt()'s. */
  ioctl(request: number, arg: number): void {
    this.link.request('ioctl', this.sid, { request, arg }).catch((e: unknown) => {
      if (e !== this.link.downError) this.#refusal ??= refusal(e, `ioctl(0x${request.toString(16)}, ${arg})`);
    });
  }

  /** A refusal is waiting to be thrown (poll() reports POLLERR). */
  get pending(): boolean {
    return this.#refusal !== null;
  }

  /** The refusal that arrived since the last call, given once (the socket throws it), or null. */
  takeRefusal(): RdsError | null {
    const e = this.#refusal;
    this.#refusal = null;
    return e;
  }
}

/** The node's refusal of a call made earlier, with its code, saying which call it was. */
function refusal(e: unknown, call: string): RdsError {
  const code = e instanceof RdsError ? e.code : 'EPROTO';
  const why = e instanceof Error ? e.message : String(e);
  return new RdsError(code, `the host node refused ${call}, made earlier on this socket: ${why}`, { cause: e });
}
