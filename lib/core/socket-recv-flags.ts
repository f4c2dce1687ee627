// recvmsg(2)'s flags and buffer (recv.c rds_recvmsg): which flags a call may carry, and what a
// message taken or peeked becomes for the caller (copied into its buffer, cut to it, msg_flags
// and the return value), and the receive-path trace it carries. RdsSocket.recvmsg/recv call these.
import {
  MSG_CMSG_COMPAT,
  MSG_DONTWAIT,
  MSG_ERRQUEUE,
  MSG_OOB,
  MSG_PEEK,
  MSG_TRUNC,
  MSG_WAITALL,
} from '../constants.js';
import { RdsError } from '../errors.js';
import { rxTraceOf } from './rx-trace.js';
import type { RecvmsgOptions } from './socket-types.js';
import type { RdsMessage } from './types.js';

/** The recvmsg flags taken; MSG_WAITALL and MSG_CMSG_COMPAT are accepted and change nothing. */
const ACCEPTED = MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT | MSG_WAITALL | MSG_CMSG_COMPAT;

/** Checks a recvmsg()/recv() call's options and returns its flags (EINVAL, EOPNOTSUPP). @internal */
export function recvFlags(opts: RecvmsgOptions, call: string): number {
  const flags = opts.flags ?? 0;
  if (typeof flags !== 'number' || !Number.isInteger(flags) || flags < 0 || flags > 0xffffffff)
    throw new RdsError('EINVAL', `${call}: flags must be a combination of MSG_* constants, got ${String(flags)}`);
  const buffer = opts.buffer;
  if (buffer !== undefined && !(buffer instanceof Uint8Array))
    throw new RdsError('EINVAL', `${call}: buffer must be a Uint8Array (or Buffer) to copy the message into`);
  if (flags & MSG_OOB)
    throw new RdsError('EOPNOTSUPP', `${call}: MSG_OOB: RDS has no out-of-band data (the kernel returns 0 at once)`);
  if (flags & MSG_ERRQUEUE)
    throw new RdsError(
      'EOPNOTSUPP',
      `${call}: MSG_ERRQUEUE: RDS queues no errors there; zero-copy completions come with recvmsg() as zcopyCompletions`,
    );
  const other = flags & ~ACCEPTED;
  if (other !== 0)
    throw new RdsError(
      'EOPNOTSUPP',
      `${call}: flag 0x${(other >>> 0).toString(16)} is not a recvmsg flag RDS takes (MSG_PEEK, MSG_TRUNC, MSG_DONTWAIT, MSG_WAITALL)`,
    );
  return flags;
}

/**
 * What the caller gets of message `m` (taken, or a copy when peeked): RDS_CMSG_RXPATH_LATENCY if
 * the socket traces (`points`); with a buffer, the bytes copied into it and `data` a view of them,
 * the rest dropped with MSG_TRUNC in `flags`; with options, `length` is what rds_recvmsg returns
 * (the full length of a truncated message when MSG_TRUNC was asked).
 * @internal
 */
export function received(
  m: RdsMessage,
  points: readonly number[],
  opts: RecvmsgOptions | undefined,
  flags: number,
): RdsMessage {
  // Data messages only (rds_cmsg_recv), stamp 3 taken now.
  if (points.length > 0 && m.address !== '') m.rxTrace = rxTraceOf(points, m.rxStamps);
  if (opts === undefined) return m;
  const full = m.data.length;
  let n = full;
  let out = 0;
  const buffer = opts.buffer;
  if (buffer !== undefined) {
    n = Math.min(full, buffer.length);
    m.data.copy(buffer, 0, 0, n);
    m.data = Buffer.from(buffer.buffer, buffer.byteOffset, n);
    if (n < full) out |= MSG_TRUNC;
  }
  m.flags = out;
  m.length = out & MSG_TRUNC && flags & MSG_TRUNC ? full : n;
  return m;
}
