import { RdsError } from '../errors.js';

// What getsockopt(SOL_RDS, RDS_INFO_*) gives back (info-sockopt.ts), on its own so the public
// declarations reach it without the stack's internal views.

/** What getsockopt(SOL_RDS, RDS_INFO_*, buffer) returns: the kernel's return value and *optlen. */
export interface RdsInfoResult {
  /** The size of one record (getsockopt's positive return value in C). */
  recordSize: number;
  /** The bytes written to the buffer (`*optlen` on return): a multiple of recordSize. */
  length: number;
}

/** The ENOSPC of a buffer too small: `length` is the size needed (`*optlen` in C). */
export class RdsInfoSpaceError extends RdsError {
  constructor(
    readonly length: number,
    given: number,
    what: string,
  ) {
    super(
      'ENOSPC',
      `${what} needs a buffer of ${length} bytes, got ${given}; retry with error.length bytes (the records may grow meanwhile)`,
    );
  }
}
