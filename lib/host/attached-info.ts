import { RdsError } from '../errors.js';

/**
 * getsockopt(SOL_RDS, RDS_INFO_*) on a socket attached to a host node: the records are the node's,
 * in another process, and getsockopt answers synchronously, so the call cannot wait for them.
 * The node answers `rds-info` (its control endpoint) and `sock.rdsInfo()` instead.
 */
export function attachedInfoRefusal(optname: number, _buffer: unknown): RdsError {
  return new RdsError(
    'EOPNOTSUPP',
    `getsockopt(SOL_RDS, ${optname}) cannot answer synchronously on a socket attached to a host node (its records are the node's): use await sock.rdsInfo(${optname}, buffer)`,
  );
}
