import type { RdsConnPath } from './path.js';
import type { PathInfo } from './types.js';

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
    sentMessages: p.sentMessages,
    sentBytes: p.sentBytes,
    recvMessages: p.recvMessages,
    recvBytes: p.recvBytes,
    upCount: p.upCount,
    connectFailures: p.connectFailures,
    acksSent: p.acksSent,
    heartbeatsSent: p.heartbeatsSent,
    movedByFailover: p.movedByFailover,
    latencyHistogram: [...p.latencyHistogram],
    latencySumMs: p.latencySumMs,
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
