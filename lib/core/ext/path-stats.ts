import type { RdsConnPath } from '../path.js';
import type { PathInfo } from '../types.js';

/** A path's cumulative figures (what rds-info shows per path; documented on PathInfo). */
export type PathFigures = Pick<
  PathInfo,
  | 'sentMessages'
  | 'sentBytes'
  | 'recvMessages'
  | 'recvBytes'
  | 'upCount'
  | 'connectFailures'
  | 'acksSent'
  | 'heartbeatsSent'
  | 'movedByFailover'
  | 'latencyHistogram'
  | 'latencySumMs'
>;

/** What each path's figures were at the last resetStats(): shown figures count from there. */
const baselines = new WeakMap<RdsConnPath, PathFigures>();

function raw(p: RdsConnPath): PathFigures {
  return {
    sentMessages: p.tx.sentMessages,
    sentBytes: p.tx.sentBytes,
    recvMessages: p.rxSeq.acceptedMessages,
    recvBytes: p.rxSeq.acceptedBytes,
    upCount: p.upCount,
    connectFailures: p.connectFailures,
    acksSent: p.acks.acksSent,
    heartbeatsSent: p.heartbeat.heartbeatsSent,
    movedByFailover: p.conn.failover.movedBy(p),
    latencyHistogram: [...p.tx.latency.histogram],
    latencySumMs: p.tx.latency.sumMs,
  };
}

/**
 * The path's figures since the last reset (RTRS's stats/reset_all). The paths' own counters keep
 * running (the metrics exporter's counters must never go backwards); a reset records a baseline.
 */
export function pathFigures(p: RdsConnPath): PathFigures {
  const now = raw(p);
  const b = baselines.get(p);
  if (b === undefined) return now;
  const out = { ...now };
  for (const k of Object.keys(now) as (keyof PathFigures)[]) {
    if (k === 'latencyHistogram')
      out.latencyHistogram = now.latencyHistogram.map((v, i) => v - (b.latencyHistogram[i] ?? 0));
    else out[k] = now[k] - b[k];
  }
  return out;
}

/** Starts the path's shown figures over from zero. */
export function resetPathFigures(p: RdsConnPath): void {
  baselines.set(p, raw(p));
}
