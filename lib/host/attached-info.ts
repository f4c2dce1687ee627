import { RDS_MAX_MSG_SIZE, SOL_RDS } from '../constants.js';
import { RdsError } from '../errors.js';
import { RdsInfoSpaceError, type RdsInfoResult } from '../core/info-result.js';
import type { RdsSocket } from '../core/socket.js';
import { num } from './protocol.js';

// RDS_INFO_* for sockets attached to a host node: the records are the node's (its connections,
// sockets and counters), so the node builds them and sends them back in the answer's data.

/** What the node answers an 'info' request with: the result, or the length needed, and the records. */
export interface NodeInfoAnswer {
  meta: { recordSize: number; length: number; needed?: number };
  data: Buffer;
}

/**
 * The node's side: `sock`'s getsockopt with a buffer of the client's length (at most what one
 * answer frame carries: a larger request is EINVAL, so a client cannot make the node allocate
 * more than a message).
 */
export function nodeInfoAnswer(sock: RdsSocket, meta: Record<string, unknown>): NodeInfoAnswer {
  const optname = num(meta.optname, 'optname');
  const length = num(meta.length, 'length');
  if (length > RDS_MAX_MSG_SIZE)
    throw new RdsError(
      'EINVAL',
      `rdsInfo() on an attached socket takes at most ${RDS_MAX_MSG_SIZE} bytes, got ${length}`,
    );
  const buf = Buffer.alloc(length);
  try {
    const r = sock.getsockopt(SOL_RDS, optname, buf);
    return { meta: { recordSize: r.recordSize, length: r.length }, data: buf.subarray(0, r.length) };
  } catch (e) {
    if (e instanceof RdsInfoSpaceError)
      return { meta: { recordSize: 0, length: 0, needed: e.length }, data: Buffer.alloc(0) };
    throw e;
  }
}

/** The client's side: asks the node, copies its records into `buffer`, or throws its ENOSPC. */
export async function attachedRdsInfo(
  ask: (meta: Record<string, unknown>) => Promise<unknown>,
  optname: number,
  buffer: Uint8Array,
): Promise<RdsInfoResult> {
  if (!(buffer instanceof Uint8Array))
    throw new RdsError('EINVAL', `rdsInfo(${optname}) takes a Uint8Array to fill (length 0 probes the size needed)`);
  const a = (await ask({ optname, length: buffer.length })) as { v: NodeInfoAnswer['meta']; data: Buffer };
  if (a.v.needed !== undefined) throw new RdsInfoSpaceError(a.v.needed, buffer.length, `RDS_INFO request ${optname}`);
  buffer.set(a.data.subarray(0, buffer.length), 0);
  return { recordSize: a.v.recordSize, length: a.v.length };
}
