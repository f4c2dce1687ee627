import { RDS_CONN_UP } from '../../constants.js';
import { RdsError } from '../../errors.js';
import { canonicalAddress } from '../address.js';
import type { RdsConnection } from '../connection.js';
import type { RdsOutgoing } from '../message.js';
import type { RdsConnPath } from '../path.js';
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
    // Asked on every send: no lookup when there are no overrides.
    return this.perPeer.size === 0 ? this.base : (this.perPeer.get(peer) ?? this.base);
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

/**
 * Where a socket (its bound port) sends on a connection, and its last message there: `seq` is the
 * number that message got (or the one after it, if a probe took it first); `msg` is that message,
 * found at the next send (undefined until then, null once it was gone: acknowledged).
 */
interface Placement {
  path: RdsConnPath;
  seq: number;
  msg: RdsOutgoing | null | undefined;
  /** The last message found before (a pick not followed by a message leaves `msg` unfound). */
  last: RdsOutgoing | null;
}

interface ConnPolicyState {
  placed: Map<number, Placement>;
  turn: number;
  /**
   * While placements are new on the connection: each lane's last sequence number from before, when
   * sockets went the kernel's way unrecorded. A socket never placed may still have messages among
   * them; it keeps the kernel's way until they are all acknowledged (then null).
   */
  before: number[] | null;
}

const states = new WeakMap<RdsConnection, ConnPolicyState>();
/** Recent send-to-acknowledge time per path (an average over what was acknowledged since the last look). */
const latencies = new WeakMap<RdsConnPath, { count: number; sum: number; avg: number | null }>();

function stateOf(conn: RdsConnection): ConnPolicyState {
  let s = states.get(conn);
  if (s === undefined) {
    // A lane not made yet has numbered nothing (a path numbers from 1).
    const before = Array.from({ length: Math.min(conn.pathSlots, conn.stack.maxPaths) }, (_, i) => {
      const p = conn.pathIf(i);
      return p === undefined ? 0 : p.tx.nextTxSeq - 1;
    });
    s = { placed: new Map(), turn: 0, before };
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
  // The kernel's choice while nothing else was ever used on this connection: no placement is
  // recorded, so sending stays as cheap as before.
  // Kernels (7.0 and later run lanes too) always get it: policies are between rds-socket nodes.
  if (
    !hasRailSlots(conn) &&
    (conn.npaths <= 1 || conn.handshake.peer !== 'rds-socket' || (policy === 'hash' && !states.has(conn)))
  )
    return legacyPath(conn, sport);
  const st = stateOf(conn);
  const was = st.placed.get(sport);
  if (was === undefined ? earlierInFlight(conn, st) : inFlight(conn, was, sport)) {
    // Stays (never placed: the kernel's way) until its messages are acknowledged, this one too.
    // (While its path is failed over the message goes elsewhere; the hold on the path's return
    // covers it.)
    const p = was === undefined ? legacyPath(conn, sport) : conn.failover.redirect(was.path);
    place(st, sport, was?.path ?? p, p);
    return p;
  }
  const p = choose(conn, policy, sport, st);
  place(st, sport, p, p);
  return p;
}

/** Records that the socket's next message goes on `p` (its placement stays `home`). */
function place(st: ConnPolicyState, sport: number, home: RdsConnPath, p: RdsConnPath): void {
  const was = st.placed.get(sport);
  // Redirected by failover: the message is numbered elsewhere; the placement's record stands.
  if (was !== undefined && p !== home) return;
  if (was === undefined || was.path !== p)
    st.placed.set(sport, { path: p, seq: p.tx.nextTxSeq, msg: undefined, last: null });
  else {
    was.seq = p.tx.nextTxSeq;
    was.msg = undefined;
  }
}

/**
 * A message still waiting on its path got a later number there (PathSend.adoptAhead, when failover
 * put messages ahead of it): its socket's placement, if it names that message by number and has
 * not found it yet, follows it.
 */
export function renumbered(m: RdsOutgoing, oldSeq: number): void {
  const was = states.get(m.path.conn)?.placed.get(m.sport);
  if (was === undefined || was.path !== m.path || was.msg !== undefined) return;
  if (was.seq === oldSeq || was.seq + 1 === oldSeq) was.seq = m.seq - (oldSeq - was.seq);
}

/** Path 0 with one path, else the lane the port hashes to (or where that lane failed over). */
function legacyPath(conn: RdsConnection, sport: number): RdsConnPath {
  if (conn.npaths <= 1) return conn.path(0)!;
  return conn.failover.redirect(conn.path(portHash(sport) % conn.npaths)!);
}

/** A never-placed socket may have unacknowledged messages from before placements began. */
function earlierInFlight(conn: RdsConnection, st: ConnPolicyState): boolean {
  const before = st.before;
  if (before === null) return false;
  for (let i = 0; i < before.length; i++) {
    const p = conn.path(i)!;
    if (conn.failover.failedOverTo(p) !== null || conn.failover.currentHold(p) !== null) return true;
    const oldest = p.tx.oldestInCarrier();
    if (oldest !== undefined && oldest <= before[i]!) return true;
  }
  st.before = null;
  return false;
}

/** Whether the socket's last message where it was placed (and so any before it) is unacknowledged. */
function inFlight(conn: RdsConnection, was: Placement, sport: number): boolean {
  const p = was.path;
  // Failed over (its messages went elsewhere) or waiting behind another path: stay with it.
  if (conn.failover.failedOverTo(p) !== null || conn.failover.currentHold(p) !== null) return true;
  if (was.msg === undefined) was.msg = queued(p, was.seq, sport) ?? queued(p, was.seq + 1, sport) ?? null;
  if (was.msg !== null) was.last = was.msg;
  // A path acknowledges in order: the last one acknowledged means every earlier one is. One
  // cancelled (a send() timeout or signal) says nothing of those before it, and if it went out it
  // may still be delivered: while the path holds any (oldestInCarrier), the socket stays, or its
  // next message would overtake them (found by the nemesis).
  const m = was.last;
  if (m === null || m.path !== p) return false;
  return !m.done || (m.cancelled && p.tx.oldestInCarrier() !== undefined);
}

/** The socket's message numbered `seq` still held by `p` (sent or not), if any: binary search. */
function queued(p: RdsConnPath, seq: number, sport: number): RdsOutgoing | undefined {
  for (const q of [p.tx.retrans, p.tx.sendQueue]) {
    let lo = 0;
    let hi = q.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const m = q.at(mid)!;
      if (m.seq === seq) return m.sport === sport ? m : undefined;
      if (m.seq < seq) lo = mid + 1;
      else hi = mid - 1;
    }
  }
  return undefined;
}

/** Live candidates: the lanes in use and the rails, UP, in index order. */
function livePaths(conn: RdsConnection): RdsConnPath[] {
  const out: RdsConnPath[] = [];
  for (let i = 0; i < Math.max(1, conn.npaths); i++) {
    const p = conn.pathIf(i);
    if (p !== undefined && p.state === RDS_CONN_UP) out.push(p);
  }
  out.push(...upRailPaths(conn));
  return out;
}

function choose(conn: RdsConnection, policy: PathPolicy, sport: number, st: ConnPolicyState): RdsConnPath {
  const live = livePaths(conn);
  const lanes = Math.max(1, conn.npaths);
  if (policy === 'hash' || live.length === 0) {
    // The lanes whatever their state (a down lane's messages wait or fail over), then the live rails.
    const rails = upRailPaths(conn);
    const k = portHash(sport) % (lanes + rails.length);
    return conn.failover.redirect(k < lanes ? conn.path(k)! : rails[k - lanes]!);
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
  const hist = p.tx.latency.histogram;
  let count = 0;
  for (const c of hist) count += c;
  const sum = p.tx.latency.sumMs;
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
