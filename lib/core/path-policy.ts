import { RDS_CONN_UP } from '../constants.js';
import { RdsError } from '../errors.js';
import { canonicalAddress } from './address.js';
import type { RdsConnection } from './connection.js';
import type { RdsConnPath } from './path.js';
import { hasRailSlots, upRailPaths } from './rail.js';

/**
 * How a connection's sockets are spread over its live paths (lanes and rails), between
 * rds-socket peers (a kernel runs one path, so it never sees a choice):
 * - 'hash': by a hash of the socket's bound port (the default; the kernel's way for lanes);
 * - 'round-robin': each socket, when it has nothing in flight, takes the next live path in turn;
 * - 'min-inflight': ... the live path with the fewest unacknowledged bytes;
 * - 'min-latency': ... the live path with the lowest recent send-to-acknowledge time.
 * Every policy moves a socket only when none of its messages is unacknowledged on its path, so
 * its messages never overtake each other.
 */
export type PathPolicy = 'hash' | 'round-robin' | 'min-inflight' | 'min-latency';
export const PATH_POLICIES: readonly PathPolicy[] = ['hash', 'round-robin', 'min-inflight', 'min-latency'];

/** Checks a policy name from user code. */
export function checkPathPolicy(v: unknown, what = 'pathPolicy'): PathPolicy {
  if (typeof v === 'string' && (PATH_POLICIES as readonly string[]).includes(v)) return v as PathPolicy;
  throw new RdsError('EINVAL', `${what} must be one of ${PATH_POLICIES.join(', ')}, got ${JSON.stringify(v)}`);
}

/** The stack's policy and its per-peer overrides. */
export class PathPolicies {
  private readonly perPeer = new Map<string, PathPolicy>();

  constructor(
    public base: PathPolicy,
    overrides: Record<string, unknown> = {},
  ) {
    for (const [peer, p] of Object.entries(overrides)) this.set(peer, checkPathPolicy(p, `peerPathPolicies[${peer}]`));
  }

  /** The policy for sockets sending to `peer`. */
  for(peer: string): PathPolicy {
    return this.perPeer.get(peer) ?? this.base;
  }

  /** Overrides the policy for one peer; null goes back to the stack's. */
  set(peer: string, policy: PathPolicy | null): void {
    const a = canonicalAddress(peer);
    if (a === null) throw new RdsError('EINVAL', `peer must be an IP address, got ${JSON.stringify(peer)}`);
    if (policy === null) this.perPeer.delete(a);
    else this.perPeer.set(a, checkPathPolicy(policy));
  }

  overrides(): Record<string, PathPolicy> {
    return Object.fromEntries(this.perPeer);
  }
}

/** Spreads bound ports over paths (a multiplicative hash; the choice is local, never on the wire). */
export function portHash(port: number): number {
  return (Math.imul(port, 0x9e3779b1) >>> 16) & 0xffff;
}

/** Where a socket (its bound port) last sent on a connection, and the sequence its message got there at most. */
interface Placement {
  path: RdsConnPath;
  seq: number;
}

interface ConnPolicyState {
  placed: Map<number, Placement>;
  turn: number;
}

const states = new WeakMap<RdsConnection, ConnPolicyState>();
/** Recent send-to-acknowledge time per path (an average over what was acknowledged since the last look). */
const latencies = new WeakMap<RdsConnPath, { count: number; sum: number; avg: number | null }>();

function stateOf(conn: RdsConnection): ConnPolicyState {
  let s = states.get(conn);
  if (s === undefined) {
    s = { placed: new Map(), turn: 0 };
    states.set(conn, s);
  }
  return s;
}

/**
 * The path a socket bound to `sport` sends its next message on. Without rails and with 'hash',
 * exactly the kernel's choice (as before): a fixed lane per port, or where that lane failed over.
 */
export function pickPath(conn: RdsConnection, sport: number): RdsConnPath {
  const policy = conn.stack.pathPolicies.for(conn.faddr);
  if (policy === 'hash' && !hasRailSlots(conn)) {
    if (conn.npaths <= 1) return conn.paths[0]!;
    return conn.failover.redirect(conn.paths[portHash(sport) % conn.npaths]!);
  }
  if (conn.npaths <= 1 && !hasRailSlots(conn)) return conn.paths[0]!;
  const st = stateOf(conn);
  const was = st.placed.get(sport);
  if (was !== undefined && inFlight(conn, was)) {
    // Stays: and this message, too, must be acknowledged before the socket may move. (While its
    // path is failed over the message goes elsewhere; the hold on the path's return covers it.)
    const p = conn.failover.redirect(was.path);
    if (p === was.path) was.seq = p.nextTxSeq + 1;
    return p;
  }
  const p = choose(conn, policy, sport, st);
  // +1: a probe may take the next number on path 0 ahead of the message (over-estimating only
  // keeps the socket where it is a little longer).
  st.placed.set(sport, { path: p, seq: p.nextTxSeq + 1 });
  return p;
}

/** Whether some message the socket sent where it was placed may still be unacknowledged. */
function inFlight(conn: RdsConnection, was: Placement): boolean {
  const p = was.path;
  // Failed over (its messages went elsewhere) or waiting behind another path: stay with it.
  if (conn.failover.failedOverTo(p) !== null || conn.failover.currentHold(p) !== null) return true;
  const oldest = p.tx.oldestUnacked();
  return oldest !== undefined && oldest <= was.seq;
}

/** Live candidates: the lanes in use and the rails, UP, in index order. */
function livePaths(conn: RdsConnection): RdsConnPath[] {
  const out: RdsConnPath[] = [];
  for (let i = 0; i < Math.max(1, conn.npaths); i++) if (conn.paths[i]!.state === RDS_CONN_UP) out.push(conn.paths[i]!);
  out.push(...upRailPaths(conn));
  return out;
}

function choose(conn: RdsConnection, policy: PathPolicy, sport: number, st: ConnPolicyState): RdsConnPath {
  const live = livePaths(conn);
  const lanes = Math.max(1, conn.npaths);
  if (policy === 'hash' || live.length === 0) {
    // The lanes whatever their state (a down lane's messages wait or fail over), then the live rails.
    const all = conn.paths.slice(0, lanes).concat(upRailPaths(conn));
    return conn.failover.redirect(all[portHash(sport) % all.length]!);
  }
  if (policy === 'round-robin') return live[st.turn++ % live.length]!;
  const score = policy === 'min-inflight' ? unackedBytes : recentLatency;
  let best = live[0]!;
  let bestScore = score(best);
  for (let i = 1; i < live.length; i++) {
    const v = score(live[i]!);
    if (v < bestScore) {
      best = live[i]!;
      bestScore = v;
    }
  }
  return best;
}

/** Payload bytes queued or sent and not yet acknowledged on the path. */
export function unackedBytes(p: RdsConnPath): number {
  let n = 0;
  for (const m of p.tx.sendQueue) if (!m.done) n += m.len;
  for (const m of p.tx.retrans) if (!m.done) n += m.len;
  return n;
}

/**
 * The path's recent send-to-acknowledge time, ms: the mean over the messages acknowledged since
 * the last look, smoothed (7/8 old, 1/8 new as TCP's SRTT). A path never measured scores 0, so
 * it gets tried.
 */
export function recentLatency(p: RdsConnPath): number {
  const hist = p.tx.latencyHistogram;
  let count = 0;
  for (const c of hist) count += c;
  const sum = p.tx.latencySumMs;
  let l = latencies.get(p);
  if (l === undefined) {
    l = { count: 0, sum: 0, avg: null };
    latencies.set(p, l);
  }
  if (count > l.count) {
    const mean = (sum - l.sum) / (count - l.count);
    l.avg = l.avg === null ? mean : (7 * l.avg + mean) / 8;
  }
  l.count = count;
  l.sum = sum;
  return l.avg ?? 0;
}
