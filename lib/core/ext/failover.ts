import { RDS_CONN_UP } from '../../constants.js';
import type { RdsConnection } from '../connection.js';
import type { RdsOutgoing } from '../message.js';
import type { RdsConnPath } from '../path.js';
import { failoverPaths, multiPath } from './rail.js';
import { standIn } from './withdrawn.js';
import { RDS_CTR } from '../stats.js';

/** One path's part in the relation. */
interface PathFailover {
  /** While the path is down past its grace period, its sockets' messages go to this live path. */
  to: RdsConnPath | null;
  /** The grace period ran out while no other path was up: move as soon as one is. */
  due: boolean;
  /** Messages moved from this path to a live one. */
  moved: number;
  /**
   * Nothing leaves the path until `behind` has had every message up to `seq` acknowledged, so no
   * socket's message overtakes an earlier one still waiting there: after the fan-out from lane 0,
   * and when a failed-over path comes back.
   */
  behind: RdsConnPath | null;
  seq: number;
  timer: NodeJS.Timeout | null;
  /** Moved without the failover conditions (a removed rail): see evacuate. */
  forced: boolean;
}

/**
 * Failover between the paths of one connection (RTRS-style, between rds-socket nodes only): a path
 * down past its grace period hands its messages to a live one, and paths wait behind each other so
 * no socket's message overtakes an earlier one. Kernels never get it (see failoverAllowed).
 */
export class ConnFailover {
  private readonly st = new Map<RdsConnPath, PathFailover>();
  /**
   * The holds of lanes not made yet (RdsConnection.path), by index: what holdLanesBehind set and
   * failOver moved, given to the lane when it is made (laneMade). Null until a fan-out.
   */
  private unmade: ({ behind: RdsConnPath; seq: number } | undefined)[] | null = null;

  constructor(private readonly conn: RdsConnection) {}

  private of(p: RdsConnPath): PathFailover {
    let s = this.st.get(p);
    if (s === undefined) {
      s = { to: null, due: false, moved: 0, behind: null, seq: 0, timer: null, forced: false };
      this.st.set(p, s);
    }
    return s;
  }

  /** Where `p`'s sockets send now: `p`, or the live path it failed over to. */
  redirect(p: RdsConnPath): RdsConnPath {
    return this.st.get(p)?.to ?? p;
  }

  failedOverTo(p: RdsConnPath): RdsConnPath | null {
    return this.st.get(p)?.to ?? null;
  }

  movedBy(p: RdsConnPath): number {
    return this.st.get(p)?.moved ?? 0;
  }

  /** The path `p` is told to wait behind (whether or not it still has to). */
  holdingBehind(p: RdsConnPath): RdsConnPath | null {
    return this.st.get(p)?.behind ?? null;
  }

  /** Start the grace period of a path that is not up and has messages waiting (once). */
  arm(p: RdsConnPath): void {
    const grace = this.conn.stack.options.failoverGraceMs;
    const s = this.of(p);
    if (s.timer !== null || s.due || !Number.isFinite(grace) || !multiPath(this.conn)) return;
    s.timer = setTimeout(() => {
      s.timer = null;
      if (p.state === RDS_CONN_UP) return;
      s.due = true;
      this.failOver(p);
    }, grace);
    if (!this.conn.stack.referenced) s.timer.unref();
  }

  /**
   * The path came up: nothing is due. A grace period already running goes on, and ends without a
   * move if the path is still up when it runs out: a path that comes up for a moment on every
   * redial (a peer that takes each connection and drops it) must still hand its messages on, which
   * ending the period at every brief UP never let happen.
   */
  cameUp(p: RdsConnPath): void {
    const s = this.st.get(p);
    if (s !== undefined) s.due = false;
  }

  /** The stack closes: no grace period runs. */
  clear(p: RdsConnPath): void {
    const s = this.st.get(p);
    if (s === undefined) return;
    if (s.timer !== null) clearTimeout(s.timer);
    s.timer = null;
    s.due = false;
  }

  /** `p` came up: back from failover, its sockets return, behind what went ahead on the other path. */
  returned(p: RdsConnPath): void {
    const s = this.st.get(p);
    if (s === undefined || s.to === null) return;
    const t = s.to;
    s.to = null;
    this.holdBehind(p, t, t.tx.nextTxSeq - 1);
  }

  /**
   * The path stayed down past its grace period: hand its messages, in order, to a live path,
   * where they get new sequence numbers and a record of where they were first numbered; the peer
   * drops any it already has. Until this path is back, its sockets send on the live path too.
   */
  failOver(from: RdsConnPath, forced = false): void {
    if (!forced && !this.conn.handshake.failoverAllowed) return;
    const target = this.target(from);
    if (target === null) return; // retried when a path comes up
    const s = this.of(from);
    s.due = false;
    s.forced = false;
    // A target that waits behind `from` holds messages that must not overtake these (a socket that
    // returned to it while its earlier messages were still here): these go ahead of them (found by
    // the nemesis; appended behind them, a socket's moved message arrived after its later one).
    // Asked before the queue is emptied, which would end the hold.
    const ahead = this.currentHold(target) === from;
    const stay: RdsOutgoing[] = [];
    const move: RdsOutgoing[] = [];
    for (const queued of from.tx.sendQueue.drain()) {
      // A cancelled one that went out before a reset moves as its withdrawn record.
      const m = queued.done ? standIn(from, queued) : queued;
      if (m === null) continue;
      if (!m.movable)
        stay.push(m); // pings and probes belong to this path
      else move.push(m);
    }
    from.tx.sendQueue.unshiftAll(stay);
    if (ahead) this.renumberedHolds(target, target.tx.adoptAhead(move));
    else for (const m of move) target.tx.adopt(m);
    const moved = move.length;
    s.moved += moved;
    this.conn.stack.counters.add(RDS_CTR.failover_moved, moved);
    s.to = target;
    // Whatever was waiting on, or redirected to, this path now depends on the target.
    // (The target itself no longer waits for us: our messages now queue in front of its later ones.)
    for (const p of failoverPaths(this.conn)) {
      const ps = this.st.get(p);
      if (ps === undefined) continue;
      if (ps.to === from) ps.to = target;
      if (ps.behind === from) {
        if (p === target) ps.behind = null;
        else this.holdBehind(p, target, target.tx.nextTxSeq - 1);
      }
    }
    // Lanes not made yet (in use, as failoverPaths) that would wait on this path: the same move.
    const unmade = this.unmade;
    const seq = target.tx.nextTxSeq - 1;
    if (unmade !== null && seq > 0)
      for (let i = 0; i < Math.min(unmade.length, Math.max(1, this.conn.npaths)); i++)
        if (unmade[i]?.behind === from) unmade[i] = { behind: target, seq };
    s.behind = null;
    this.conn.stack.pathEvents.failedOver(from, target, moved);
    target.tx.schedulePump();
  }

  /**
   * `target`'s held messages got later numbers (PathSend.adoptAhead): a path waiting behind it up
   * to a number that covered some of them waits up to their new numbers. Left at the old number,
   * its hold ended at once (nothing that low was left unacknowledged), and a socket that came
   * back to it from `target` sent its next message ahead of its earlier one there (found by the
   * nemesis: reorders towards a peer on the rail pair, issue #35).
   */
  private renumberedHolds(target: RdsConnPath, remap: (seq: number) => number): void {
    for (const [p, s] of this.st) if (p !== target && s.behind === target) s.seq = remap(s.seq);
    const unmade = this.unmade;
    if (unmade !== null)
      for (let i = 0; i < unmade.length; i++) {
        const h = unmade[i];
        if (h?.behind === target) unmade[i] = { behind: target, seq: remap(h.seq) };
      }
  }

  /**
   * The fan-out: lanes 1..n-1 send nothing until lane 0 has had everything up to `seq`
   * acknowledged; those not made yet get the hold when they are (laneMade).
   */
  holdLanesBehind(p0: RdsConnPath, seq: number, n: number): void {
    if (seq <= 0) return; // as holdBehind: nothing to wait for, no hold changes
    const hold = { behind: p0, seq };
    for (let i = 1; i < n; i++) {
      const p = this.conn.pathIf(i);
      if (p !== undefined) this.holdBehind(p, p0, seq);
      else (this.unmade ??= [])[i] = hold;
    }
  }

  /** Lane `p` was just made: it takes the hold it would have had, had it existed. */
  laneMade(p: RdsConnPath): void {
    const h = this.unmade?.[p.index];
    if (h === undefined) return;
    this.unmade![p.index] = undefined;
    this.holdBehind(p, h.behind, h.seq);
  }

  /** `p` sends nothing until `behind` has had everything up to `seq` acknowledged. */
  holdBehind(p: RdsConnPath, behind: RdsConnPath, seq: number): void {
    if (seq <= 0 || behind === p) return;
    const s = this.of(p);
    s.behind = behind;
    s.seq = seq;
  }

  /** The path `p` is waiting for, if it still has to. */
  currentHold(p: RdsConnPath): RdsConnPath | null {
    return this.held(p) ? this.st.get(p)!.behind : null;
  }

  /** Whether `p` must still wait (the pump asks before each batch). */
  held(p: RdsConnPath): boolean {
    const s = this.st.get(p);
    const h = s?.behind;
    if (h === null || h === undefined) return false;
    const oldest = h.tx.oldestInCarrier();
    if (oldest !== undefined && oldest <= s!.seq) return true;
    s!.behind = null;
    return false;
  }

  /** `cp` freed messages: paths holding behind it may be free to go. */
  releaseHolds(cp: RdsConnPath): void {
    if (this.st.size === 0) return;
    for (const p of failoverPaths(this.conn)) {
      if (this.st.get(p)?.behind === cp) p.tx.kick();
    }
  }

  /**
   * The live path a dead one's messages go to: the one it is already holding behind if that is
   * up (moving elsewhere could let them overtake what waits there); else a live path that waits
   * behind it, where they go ahead of what it holds; else the lowest UP path. Sent past a path
   * that waits behind `from`, that path's hold would move to the target, and a target that waits
   * behind that path in turn made two paths wait on each other for ever (the nemesis, seed 6067's
   * replay: nothing sent for 6 s, then a socket's later message read before its earlier ones).
   */
  target(from: RdsConnPath): RdsConnPath | null {
    const hold = this.currentHold(from);
    if (hold !== null) return hold.state === RDS_CONN_UP ? hold : null;
    const paths = failoverPaths(this.conn);
    for (const p of paths) if (p !== from && p.state === RDS_CONN_UP && this.currentHold(p) === from) return p;
    for (const p of paths) {
      if (p !== from && p.state === RDS_CONN_UP) return p;
    }
    return null;
  }

  /** A path came up: paths whose grace period ran out while nothing was up can move now. */
  retry(): void {
    for (const p of failoverPaths(this.conn)) {
      const s = this.st.get(p);
      if (s?.due === true && p.state !== RDS_CONN_UP) this.failOver(p, s.forced);
    }
  }

  /**
   * A rail was removed: its messages move now, whatever the grace period (it is not coming back);
   * if no path is up they move as soon as one is.
   */
  evacuate(p: RdsConnPath): void {
    const s = this.of(p);
    if (s.timer !== null) clearTimeout(s.timer);
    s.timer = null;
    s.due = true;
    s.forced = true;
    this.failOver(p, true);
  }

  setRef(p: RdsConnPath, ref: boolean): void {
    const t = this.st.get(p)?.timer;
    if (t) ref ? t.ref() : t.unref();
  }
}
