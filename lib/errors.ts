import { constants as osConstants } from 'node:os';

export type RdsErrorCode =
  | 'EINVAL' | 'ENOTCONN' | 'EMSGSIZE' | 'EAGAIN' | 'ENOBUFS' | 'EADDRINUSE' | 'EADDRNOTAVAIL'
  | 'EDESTADDRREQ' | 'ENOPROTOOPT' | 'EOPNOTSUPP' | 'EBADF' | 'ETIMEDOUT' | 'ECANCELED'
  | 'EAFNOSUPPORT' | 'EPROTO' | 'ECONNRESET' | 'ENOSPC' | 'EPERM' | 'ENODEV' | 'EHOSTUNREACH'
  | 'ECONNREFUSED';

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

/** The error a pending wait rejects with when its AbortSignal fires. */
export function abortError(signal: AbortSignal, what: string): RdsError {
  const reason = signal.reason as { name?: string } | undefined;
  if (reason && reason.name === 'TimeoutError') {
    return new RdsError('ETIMEDOUT', `${what} timed out (AbortSignal)`, { cause: reason });
  }
  const err = new RdsError('ECANCELED', `${what} was aborted (AbortSignal)`, { cause: reason });
  // What AbortSignal users test for, as fetch() and node:stream do.
  err.name = 'AbortError';
  return err;
}

/** One signal for an optional AbortSignal and an optional timeout in ms. */
export function combineSignals(signal: AbortSignal | undefined, timeoutMs: number | undefined): AbortSignal | undefined {
  if (timeoutMs === undefined) return signal;
  if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0)) {
    throw new RdsError('EINVAL', `timeout must be a number of milliseconds >= 0, got ${String(timeoutMs)}`);
  }
  const t = AbortSignal.timeout(timeoutMs);
  return signal === undefined ? t : AbortSignal.any([signal, t]);
}
