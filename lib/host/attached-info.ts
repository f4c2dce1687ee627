import { RDS_MAX_MSG_SIZE, SOL_RDS } from '../constants.js';
import { RdsError } from '../errors.js';
import { RdsInfoSpaceError, type RdsInfoResult } from '../core/info-result.js';
import type { RdsStack } from '../core/stack.js';
import type { StackReport } from '../core/types.js';
import type { RdsSocket } from '../core/socket.js';
import { num } from './protocol.js';

// RDS_INFO_* for sockets attached to a host node, and an attached stack's report(): the records
// are the node's (its connections, sockets and counters), so the node builds them and sends them
// back in the answer's data. The 'info' request on socket 0 asks for the stack's report.

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

/**
 * The node's side of an attached stack's report(): the served stack's counters, connections and
 * peers as JSON in the answer's data, which carries at most one message (RDS_MAX_MSG_SIZE): a
 * node with more to tell answers EMSGSIZE rather than build a frame the client would refuse.
 */
export function nodeReportAnswer(stack: RdsStack): NodeInfoAnswer {
  const data = Buffer.from(JSON.stringify(stack.reportNow()));
  if (data.length > RDS_MAX_MSG_SIZE)
    throw new RdsError(
      'EMSGSIZE',
      `the node's report is ${data.length} bytes, more than one answer carries (${RDS_MAX_MSG_SIZE}): read it with rds-info --json`,
    );
  return { meta: { recordSize: 0, length: data.length }, data };
}

/** The client's side of report(): asks the node (the 'info' request on socket 0) and reads its JSON. */
export async function attachedReport(ask: (meta: Record<string, unknown>) => Promise<unknown>): Promise<StackReport> {
  const a = (await ask({ report: true })) as { v: NodeInfoAnswer['meta']; data: Buffer };
  return JSON.parse(a.data.toString('utf8')) as StackReport;
}
