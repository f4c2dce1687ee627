import { RDSSOCK_REFUSED_NO_SOCK } from '../../constants.js';
import { RdsError } from '../../errors.js';
import { Fifo } from '../fifo.js';
import type { RdsOutgoing } from '../message.js';
import { RX_DISCARDED, RX_PENDING, RX_READ, type RxEntry, type RxOutcome, type RxOwner } from './rx-ack.js';
import { RDS_CTR, type RdsStats } from '../stats.js';

/** Refusals remembered beyond the last read cursor, against a peer that invents them. */
const MAX_REFUSALS_AHEAD = 8192;

/**
 * One path's pending confirmations from a peer that reports reads (RDSSOCK_CAP_CONFIRM): messages
 * the peer acknowledged as queued but has not yet reported read, in sequence order, and the
 * refusals it reported. Their budget is back; a confirmation resolves on the peer's read cursor,
 * or rejects on its refusal or restart.
 */
export class ReadConfirmations {
  /** Acknowledged as queued, waiting for the read cursor. */
  readonly awaitingRead = new Fifo<RdsOutgoing>();
  /**
   * Refusals reported beyond the last read cursor (deduplicated: a new carrier repeats them); made
   * at the first refusal (an empty Set costs ~150 bytes, on every path of every peer).
   */
  private refusalsAhead: Set<number> | null = null;
  /** Refusals at or before the last read cursor, as the peer counts them. */
  private refusalsCounted = 0;
  /** The highest read cursor the peer reported. */
  private readReported = 0;

  constructor(
    private readonly counters: RdsStats,
    private readonly faddr: string,
  ) {}

  /** An acknowledged message whose confirmation must still wait for a read report. */
  mustWait(m: RdsOutgoing): boolean {
    return m.confirmPending && !m.done && m.seq > this.readReported;
  }

  /**
   * RDSSOCK_EXTHDR_READ: the peer's applications took every message up to `seq` except those it
   * reported refused; `refused` of them lie at or before `seq`. If we heard of fewer (a report
   * died with a carrier), which confirmations were read is unknown: they reject, and so do those
   * the report covers that are not acknowledged yet (`unacked`: sent and waiting for h_ack, or
   * waiting in the send queue to be resent after a reconnect). Their h_ack, when it comes, must
   * not confirm them: the read report has passed them, so nothing would make them wait.
   */
  readThrough(seq: number, refused: number, unacked: Iterable<RdsOutgoing>[]): void {
    let counted = this.refusalsCounted;
    if (this.refusalsAhead !== null) {
      for (const s of this.refusalsAhead) {
        if (s <= seq) {
          counted++;
          this.refusalsAhead.delete(s);
        }
      }
    }
    const unknown = refused > counted;
    this.refusalsCounted = refused;
    if (seq > this.readReported) this.readReported = seq;
    const unplaced = (m: RdsOutgoing): void => {
      if (!m.confirmPending) return;
      this.counters.add(RDS_CTR.send_confirm_reset);
      m.confirm(
        new RdsError(
          'ECONNRESET',
          `${this.faddr} lost its report of which messages it read (a connection reset); this one may not have been read`,
        ),
      );
    };
    for (;;) {
      const m = this.awaitingRead.peek();
      if (m === undefined || m.seq > seq) break;
      this.awaitingRead.shift();
      if (!unknown) m.confirm();
      else unplaced(m);
    }
    if (unknown) for (const q of unacked) for (const m of q) if (m.seq <= seq && !m.done) unplaced(m);
  }

  /** RDSSOCK_EXTHDR_REFUSED: the peer did not deliver our message `seq` (RDSSOCK_REFUSED_*); `find` looks it up in the path's queues. */
  refused(seq: number, reason: number, find: (seq: number) => RdsOutgoing | undefined): void {
    // A repeat (a new carrier repeats recent refusals), or one a read cursor already counted.
    if (this.refusalsAhead?.has(seq) || seq <= this.readReported) return;
    // Bounded against a peer that invents refusals: one not remembered is caught by the count in
    // the next read report, and what it covers rejects rather than resolves.
    const ahead = (this.refusalsAhead ??= new Set());
    if (ahead.size < MAX_REFUSALS_AHEAD) ahead.add(seq);
    const noSock = reason === RDSSOCK_REFUSED_NO_SOCK;
    this.counters.add(noSock ? RDS_CTR.send_refused_no_sock : RDS_CTR.send_discarded_unread);
    const m = findBySeq(this.awaitingRead, seq) ?? find(seq);
    if (m === undefined || !m.confirmPending) return;
    const where = `${this.faddr}:${m.dport}`;
    m.confirm(
      noSock
        ? new RdsError('ECONNREFUSED', `no socket is bound to ${where}: the peer dropped the message`)
        : new RdsError('ECONNRESET', `the socket bound to ${where} was closed before reading the message`),
    );
  }

  /**
   * The handshake settled on a peer that does not report reads (a kernel, an older rds-socket):
   * its h_ack is the confirmation, so the messages it acknowledged while that was unknown resolve.
   */
  acknowledgedIsEnough(): void {
    for (const m of this.awaitingRead.drain()) if (m.confirmPending) m.confirm();
  }

  /** The peer restarted: confirmations waiting for its old life's read cursor will never resolve. */
  peerRestarted(): void {
    for (const m of this.awaitingRead.drain()) {
      if (!m.confirmPending) continue;
      this.counters.add(RDS_CTR.send_confirm_reset);
      m.confirm(
        new RdsError(
          'ECONNRESET',
          `${this.faddr} restarted before its application read the message (it had acknowledged it as queued)`,
        ),
      );
    }
    this.refusalsAhead = null;
    this.refusalsCounted = 0;
    this.readReported = 0;
  }
}

export function findBySeq(q: Iterable<RdsOutgoing>, seq: number): RdsOutgoing | undefined {
  for (const m of q) if (m.seq === seq) return m;
  return undefined;
}

/**
 * A message handed to a socket of this stack (the loopback transport has no peer to report reads):
 * its receipt, which the receiving socket settles as a peer's read report would. Its confirmation
 * resolves when the receiving application takes the message (recvmsg, recv, the iterator; for an
 * attached socket, when the attached process has: the host node holds the receipt until then),
 * and rejects with ECONNRESET if the socket closes with it unread (or the attached process dies),
 * with ECONNREFUSED if no socket took it. The same rule, and the same errors, as from a peer.
 */
export function localReceipt(msg: RdsOutgoing, counters: RdsStats): RxEntry {
  return {
    seq: msg.seq,
    pos: 0,
    state: RX_PENDING,
    at: 0,
    owner: new LocalReadOwner(msg, counters),
    epoch: 0,
    followers: null,
  };
}

class LocalReadOwner implements RxOwner {
  constructor(
    private readonly msg: RdsOutgoing,
    private readonly counters: RdsStats,
  ) {}

  consumed(e: RxEntry, outcome: RxOutcome = RX_READ): void {
    if (e.state !== RX_PENDING) return;
    e.state = outcome;
    const m = this.msg;
    if (outcome === RX_READ) {
      m.confirm();
      return;
    }
    const where = `${m.daddr}:${m.dport}`;
    if (outcome === RX_DISCARDED) {
      this.counters.add(RDS_CTR.send_discarded_unread);
      m.confirm(new RdsError('ECONNRESET', `the socket bound to ${where} was closed before reading the message`));
    } else {
      this.counters.add(RDS_CTR.send_refused_no_sock);
      m.confirm(new RdsError('ECONNREFUSED', `no socket is bound to ${where}: the message was dropped`));
    }
  }
}
