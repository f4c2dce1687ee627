import {
  RDS_HEADER_SIZE,
  RDSSOCK_CAP_WITHDRAWN,
  RDSSOCK_EXTHDR_MOVED,
  RDSSOCK_EXTHDR_WITHDRAWN,
} from '../../constants.js';
import { encodeDataHeader, OFF_EXTHDR, writeU64 } from '../../wire/header.js';
import type { RdsConnection } from '../connection.js';
import type { RdsConnPath } from '../path.js';
import { RdsOutgoing, type SendOwner } from '../message.js';
import { RDS_CTR, type RdsStats } from '../stats.js';

// A message cancelled (a send() timeout, RDS_CANCEL_SENT_TO, its socket closed) after it went out
// is still in its carrier. If that carrier dies, its bytes may yet come out of it at the peer:
// a peer that was stopped (SIGSTOP) takes the carrier from its listen backlog when it wakes and
// reads it to the end, after whatever other paths brought meanwhile. The sender used to forget
// such a message at the reset, so nothing kept the socket's later messages behind it, and the
// peer read it after them (the nemesis, seed 6067's replays: a reorder on the rail pair, #35).
// So it leaves a withdrawn record in its place (at a reset, or where it is found cancelled in the
// send queue after one: standIn): a header with no payload, numbered as it was, that is resent or
// moved as any unacknowledged message is. The peer counts its
// numbers as arrived (a late copy is then a duplicate) and delivers nothing. Its socket's later
// messages stay behind it, as they stay behind any message still unacknowledged on a path.

/** Where the withdrawn marker sits in the header: just past the MOVED record (type, index, be64). */
export const WITHDRAWN_AT = OFF_EXTHDR + 10;

/** Withdrawn records one path keeps unacknowledged at most: the bound a peer that never acknowledges meets. */
export const MAX_WITHDRAWN = 4096;

/** Whether a frame is a withdrawn record (MOVED record, then the marker). */
export function isWithdrawn(header: Uint8Array): boolean {
  return header[OFF_EXTHDR] === RDSSOCK_EXTHDR_MOVED && header[WITHDRAWN_AT] === RDSSOCK_EXTHDR_WITHDRAWN;
}

/** Whether `conn`'s peer takes withdrawn records: an rds-socket peer that said so, with acks on. */
export function takesWithdrawn(conn: RdsConnection): boolean {
  const hs = conn.handshake;
  return hs.ackMode && (hs.caps & RDSSOCK_CAP_WITHDRAWN) !== 0;
}

/**
 * What stands in the place of `m`, a message found done in one of `cp`'s queues (acknowledged ones
 * never are: acks take them off): if it was cancelled after it went out, a copy may still come out
 * of a carrier that died, so a peer that takes them gets its withdrawn record. Null: nothing (a
 * kernel, never transmitted, or the record bound reached).
 */
export function standIn(cp: RdsConnPath, m: RdsOutgoing): RdsOutgoing | null {
  return takesWithdrawn(cp.conn) ? cp.tx.withdrawn.recordOf(m, cp.conn.stack.counters) : null;
}

/**
 * The sender of one path's withdrawn records: no socket pays for them (their messages' bytes
 * went back at the cancel), so this counts those not yet acknowledged, up to MAX_WITHDRAWN.
 */
export class WithdrawnAccount implements SendOwner {
  readonly placeHolder = true;
  private count = 0;

  /** Made and not yet acknowledged. */
  get outstanding(): number {
    return this.count;
  }

  /**
   * The withdrawn record that takes the place of `m`, a message cancelled after it went out (it
   * was transmitted at least once, on this path or one it moved from), or null: `m` was never
   * transmitted, or this account is full (then it is forgotten, as before withdrawn records).
   * Made from the message's fields, never its frame: a cancelled message's frame may already be
   * reused. Whatever extensions it had (RDMA) stay behind: the record only holds its place.
   */
  recordOf(m: RdsOutgoing, counters: RdsStats): RdsOutgoing | null {
    if (!m.cancelled || !m.fromSocket || m.sentAt === 0 || this.count >= MAX_WITHDRAWN) return null;
    this.count++;
    counters.add(RDS_CTR.send_withdrawn);
    const w = Buffer.allocUnsafe(RDS_HEADER_SIZE);
    encodeDataHeader(w, 0, m.seq, 0, m.sport, m.dport);
    w[OFF_EXTHDR] = RDSSOCK_EXTHDR_MOVED;
    w[OFF_EXTHDR + 1] = m.originPath;
    writeU64(w, OFF_EXTHDR + 2, m.originSeq);
    w[WITHDRAWN_AT] = RDSSOCK_EXTHDR_WITHDRAWN;
    const rec = new RdsOutgoing(w, 0, m.seq, m.sport, m.dport, m.daddr, m.path, this);
    rec.markRetransmitted();
    // It stands where a transmitted message stood (PathSend.adoptAhead keeps such ones in front).
    rec.sent(m.sentAt);
    return rec;
  }

  messageDone(_msg: RdsOutgoing): void {
    this.count--;
  }
}
