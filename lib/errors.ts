import { constants as osConstants } from 'node:os';

/** The Linux errno names an RdsError's `code` can have (troubleshooting: docs/troubleshooting.md). */
export type RdsErrorCode =
  | 'EINVAL'
  | 'ENOTCONN'
  | 'EMSGSIZE'
  | 'EAGAIN'
  | 'ENOBUFS'
  | 'EADDRINUSE'
  | 'EADDRNOTAVAIL'
  | 'EDESTADDRREQ'
  | 'ENOPROTOOPT'
  | 'EOPNOTSUPP'
  | 'EBADF'
  | 'ETIMEDOUT'
  | 'ECANCELED'
  | 'EAFNOSUPPORT'
  | 'EPROTO'
  | 'ECONNRESET'
  | 'ENOSPC'
  | 'EPERM'
  | 'ENODEV'
  | 'EHOSTUNREACH'
  | 'ECONNREFUSED'
  | 'ENETDOWN'
  | 'EEXIST'
  | 'ENOENT'
  | 'ENOTTY'
  | 'EFAULT';

const errnos = osConstants.errno as Record<string, number>;

/**
 * Every failure the API reports. `code` and `errno` are the Linux names and numbers a C program
 * on AF_RDS would see, so code can branch on them the same way; the message says what to change.
 */
export class RdsError extends Error {
  readonly code: RdsErrorCode;
  readonly errno: number;
  readonly syscall: string | undefined;

  constructor(code: RdsErrorCode, message: string, options?: { syscall?: string; cause?: unknown }) {
    super(`${code}: ${message}`, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'RdsError';
    this.code = code;
    this.errno = errnos[code] ?? 0;
    this.syscall = options?.syscall;
  }
}

/**
 * EAGAIN and ENOBUFS are flow control, thrown at message rates by non-blocking senders: they skip
 * the stack trace, which would cost more than sending the message.
 */
export function flowControlError(code: 'EAGAIN' | 'ENOBUFS', message: string): RdsError {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return new RdsError(code, message);
  } finally {
    Error.stackTraceLimit = limit;
  }
}

/** Timeouts made by combineSignals: which signal is ours and its length, for the error message. */
const ownTimeouts = new WeakMap<AbortSignal, { timer: AbortSignal; ms: number }>();

/** The ETIMEDOUT of a call's own `timeout` option, or null if `signal` fired for another reason. */
function ownTimeout(signal: AbortSignal, what: string): RdsError | null {
  const own = ownTimeouts.get(signal);
  if (own === undefined || !own.timer.aborted || signal.reason !== own.timer.reason) return null;
  return new RdsError('ETIMEDOUT', `${what} timed out after ${own.ms} ms`, { cause: signal.reason });
}

/** The error a pending wait rejects with when its AbortSignal fires. */
export function abortError(signal: AbortSignal, what: string): RdsError {
  const own = ownTimeout(signal, what);
  if (own !== null) return own;
  const reason = signal.reason as { name?: string } | undefined;
  if (reason && reason.name === 'TimeoutError') {
    return new RdsError('ETIMEDOUT', `${what} timed out (AbortSignal)`, { cause: reason });
  }
  const err = new RdsError('ECANCELED', `${what} was aborted (AbortSignal)`, { cause: reason });
  // What AbortSignal users test for, as fetch() and node:stream do.
  err.name = 'AbortError';
  return err;
}

/**
 * What recv() and messages() throw when their wait is aborted: the caller's signal's own reason,
 * as their declarations promise. Timeouts stay ETIMEDOUT: the call's `timeout` option, and an
 * AbortSignal.timeout() whose TimeoutError reason has always been reported as ETIMEDOUT.
 */
export function abortReason(signal: AbortSignal, what: string): unknown {
  const own = ownTimeout(signal, what);
  if (own !== null) return own;
  const reason = signal.reason as { name?: string } | undefined;
  if (reason === undefined || reason === null || reason.name === 'TimeoutError') return abortError(signal, what);
  return reason;
}

/** The longest delay a Node.js timer takes (larger ones fire after 1 ms, with a warning). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** One signal for an optional AbortSignal and an optional timeout in ms. */
export function combineSignals(
  signal: AbortSignal | undefined,
  timeoutMs: number | undefined,
): AbortSignal | undefined {
  if (timeoutMs === undefined) return signal;
  if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0) || timeoutMs > MAX_TIMER_MS) {
    throw new RdsError(
      'EINVAL',
      `timeout must be a number of milliseconds from 0 to ${MAX_TIMER_MS}, got ${String(timeoutMs)}`,
    );
  }
  // Timers take whole milliseconds: round a fraction up so the wait is never shorter than asked.
  const ms = Math.ceil(timeoutMs);
  const t = AbortSignal.timeout(ms);
  const combined = signal === undefined ? t : AbortSignal.any([signal, t]);
  ownTimeouts.set(combined, { timer: t, ms });
  return combined;
}
