import { constants as osConstants } from 'node:os';

export type RdsErrorCode =
  | 'EINVAL' | 'ENOTCONN' | 'EMSGSIZE' | 'EAGAIN' | 'ENOBUFS' | 'EADDRINUSE' | 'EADDRNOTAVAIL'
  | 'EDESTADDRREQ' | 'ENOPROTOOPT' | 'EOPNOTSUPP' | 'EBADF' | 'ETIMEDOUT' | 'ECANCELED'
  | 'EAFNOSUPPORT' | 'EPROTO' | 'ECONNRESET' | 'ENOSPC' | 'EPERM' | 'ENODEV' | 'EHOSTUNREACH';

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

/** The error a pending wait rejects with when its AbortSignal fires. */
export function abortError(signal: AbortSignal, what: string): RdsError {
  const reason = signal.reason as { name?: string } | undefined;
  if (reason && reason.name === 'TimeoutError') {
    return new RdsError('ETIMEDOUT', `${what} timed out (AbortSignal)`, { cause: reason });
  }
  return new RdsError('ECANCELED', `${what} was aborted (AbortSignal)`, { cause: reason });
}
