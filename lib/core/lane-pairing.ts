import { RDS_CONN_UP } from '../constants.js';
import type { HandshakeExtensions } from '../wire/extensions.js';
import type { RdsConnection } from './connection.js';
import type { RdsConnPath } from './path.js';
import { RDS_CTR } from './stats.js';

/**
 * Pairing a peer's lanes with ours when one side restarted (Handshake's two checks on a carrier
 * whose frame shows the peer's SPORT_IDX or a new generation): which lane a carrier really is,
 * and what happens to one that a path took by mistake.
 */

/**
 * A restart seen first on a lane > 0 that we dialled: we dialled it while path 0 still ran to the
 * old life (lanes wait for path 0's pong, which would have told us the new generation first). The
 * new life pairs accepted connections by source port only once it has read our SPORT_IDX, so it
 * may have taken this lane for its path 0: what it sends here is numbered in its path 0's
 * sequence space, which our path 0 never sees, and it resends that, RETRANSMITTED, on its real
 * path 0 later: read twice. So nothing more is taken from this carrier, and every path to the
 * peer is dropped (all were dialled against the old life, some may still be connecting): path 0
 * reconnects and the lanes follow its pong (RdsConnection.lanesMayConnect), each then paired by
 * its source port. True when it dropped them.
 */
export function laneSawRestart(conn: RdsConnection, cp: RdsConnPath): boolean {
  if (cp.index === 0 || cp.index >= conn.stack.maxPaths || !conn.transport.initiates(cp)) return false;
  conn.stack.counters.add(RDS_CTR.lane_restart_dropped);
  for (const p of conn.madePaths()) if (p.index < conn.stack.maxPaths) p.drop('peer restarted: lanes wait for path 0');
  return true;
}

/**
 * The acceptor's side of laneSawRestart: a carrier we accepted, from a peer that says here that
 * it encodes path indexes in its TCP source ports (SPORT_IDX), whose port names another lane
 * than the path that took it. Before we have read the peer's SPORT_IDX we pair accepted
 * carriers as kernels up to 6.19 do (the first free path), so a lane the peer dialled before its
 * path 0 reached us (it still ran path 0 to our previous life) became our path 0; what it
 * brought was numbered in that lane's space, so path 0's numbering goes back (laneTakenForPath0).
 * To the peer the carrier is that lane, and it goes on sending the lane's messages on it: it
 * moves, unclosed, to our lane (the transport's carrierToLane), and this frame and the rest are
 * taken there. Dropping it lost what followed this frame (seed 7079: a 7.x kernel's messages our
 * TCP had acknowledged, which the kernel had released). Dropped, as before, when the lane has a
 * carrier or the peer's NPATHS does not count it: an rds-socket peer says 1 there (its count is in
 * its capabilities), and it drops every lane itself when it meets our new generation on one
 * (laneSawRestart) and resends what has no RDS ack. False when the carrier is where it belongs;
 * true when it was dropped; the lane when it moved there (the caller completes the lane's connect).
 */
export function misplacedLane(conn: RdsConnection, cp: RdsConnPath, hs: HandshakeExtensions): RdsConnPath | boolean {
  if (hs.sportIdx !== true || cp.index >= conn.stack.maxPaths) return false;
  const lane = conn.transport.acceptedLane?.(cp);
  if (lane === undefined || lane === cp.index) return false;
  conn.stack.counters.add(RDS_CTR.accept_lane_misplaced);
  cp.laneTakenForPath0();
  const why = `accepted carrier from a source port for lane ${lane} taken for path ${cp.index}`;
  const to = lane < Math.min(hs.npaths ?? 1, conn.stack.maxPaths) ? conn.path(lane)! : null;
  if (to === null || to.state === RDS_CONN_UP || conn.transport.carrierToLane?.(cp, to) !== true) {
    cp.drop(why);
    return true;
  }
  conn.stack.counters.add(RDS_CTR.accept_lane_moved);
  cp.drop(`${why}: moved to lane ${lane}`);
  return to;
}
