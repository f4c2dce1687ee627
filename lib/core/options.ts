import { RDS_MAX_MSG_SIZE, RDS_MPATH_WORKERS, RDS_TCP_PORT } from '../constants.js';
import { RdsError } from '../errors.js';
import type { RdsTransport } from './transport.js';

// The options of a stack, written once (RdsStackOptions, with their documentation), their
// defaults once (DEFAULTS) and the rule each value must follow once (RULES), as js-libp2p-yamux's
// config.ts does. resolveStackOptions() is the only place that reads what a caller passed.

/** The options of `new RdsStack()`: the kernel's `net.rds.*` settings and rds-socket's own (paths, limits, timers). An unknown name or a value out of range is EINVAL. */
export interface RdsStackOptions {
  /**
   * TCP port the TCP transport listens on and connects to (the kernel's is 16385). A TCP-only
   * knob: `new TcpTransport({ tcpPort })` is its home; the stack spelling is still accepted and
   * applies when the transport's own is not given.
   */
  tcpPort?: number;
  /** net.rds.reconnect_min_delay_ms: first backoff step. Default 1. */
  reconnectMinDelayMs?: number;
  /**
   * net.rds.reconnect_max_delay_ms: backoff cap. Default 1000. The backoff resets when a
   * connection that stayed up at least min(1000, this) ms dies (the kernel resets it on every UP).
   */
  reconnectMaxDelayMs?: number;
  /** net.rds.ping_enable: answer pings and multipath probes. Default true. */
  pingEnable?: boolean;
  /** Transports to register; defaults to the library's (TCP and loopback). */
  transports?: RdsTransport[];
  /** Use RDS-level acknowledgements with rds-socket peers (negotiated; kernels never see them). Default true. */
  rdsAcks?: boolean;
  /** net.rds.max_unacked_packets: ask for an ack at least every N messages. Default 8. */
  maxUnackedPackets?: number;
  /** net.rds.max_unacked_bytes: ... or every N payload bytes. Default 16 MiB. */
  maxUnackedBytes?: number;
  /**
   * A message its application has not read is acknowledged as queued after this long (flow
   * control: it returns the sender's budget; confirmations of RDSSOCK_CAP_CONFIRM peers still
   * wait for the read). Infinity: never acknowledge unread messages. Default 1000.
   */
  ackDelayMaxMs?: number;
  /**
   * Heartbeat period towards rds-socket peers (an ack-only frame asking for an answer) and kernel
   * peers over TCP (an RDS ping, which the kernel answers with a pong: ext/heartbeat.ts); 0
   * disables both. Default 2000.
   */
  heartbeatIntervalMs?: number;
  /**
   * Silent periods after which the path is dropped and reconnected (a kernel's only if it has
   * answered a ping on the connection, our multipath probe included). Default 4 (detection < 10 s).
   */
  heartbeatMissedLimit?: number;
  /**
   * How long to wait for the peer's handshake before treating it as a kernel (a peer that has
   * already sent what no kernel sends, an RDS ack over TCP or a read report, is then taken for an
   * rds-socket node that acknowledges and reports reads, until its handshake comes). Default 3000.
   */
  handshakeTimeoutMs?: number;
  /**
   * Peers allowed to connect: addresses or CIDR blocks ("10.1.0.0/16"). Connections from
   * anyone else are refused and counted (conn_refused_allowlist), by TCP source address, before
   * any TLS handshake or per-peer state. Default: everyone, as the kernel.
   */
  allowPeers?: string[];
  /**
   * At most this many TCP connections (all peers, all paths, TLS handshakes included); more are
   * reset (conn_refused_limit). Default 4096. TCP-only: also a TcpTransport option, which wins;
   * the stack spelling is still accepted.
   */
  maxConnections?: number;
  /**
   * At most this many accepted connections that have not yet sent a complete frame (with TLS,
   * counted from TCP accept); strangers' connections and pokes beyond it are reset
   * (conn_refused_limit). Known peers (messages queued for them, or identified and up within
   * peerIdleTimeoutMs) get in regardless, each with an allowance of its own. Default 64.
   */
  maxUnidentifiedConnections?: number;
  /**
   * A peer that starts a frame header must finish it within this many ms, or is dropped. Also
   * bounds each step of a new TCP connection: the TLS handshake, then its first complete frame;
   * and our own connects and pokes wait at most this, and never more than 3 s, for the peer's
   * answer before they are made again (a SYN lost to a partition is resent by TCP only seconds
   * later). Default 10000. TCP-only: also a TcpTransport option, which wins; the stack spelling is still
   * accepted.
   */
  headerTimeoutMs?: number;
  /**
   * The kernel send buffer of each TCP connection, in bytes, as `net.rds.tcp.rds_tcp_sndbuf` sets
   * it in the kernel (what `getsockopt(SO_SNDBUF)` then reports): 0 leaves it to the kernel's
   * autotuning (the kernel's RDS default). Default `'auto'`: autotuning, and 128 KiB for a
   * connection to a peer on this host (a 127.0.0.0/8 address or one of this host's own) from the
   * first message of 64 KiB or more it writes. Why: on this host one `write()` delivers its bytes
   * to the receiving socket in the same call, and every path of a node shares one JavaScript
   * thread, so with an autotuned buffer (up to 4 MiB) one write of a 1 MiB message held every other
   * path of the node for about a millisecond (docs/performance.md, head-of-line); small messages
   * go out in runs of about 16 KiB whatever the buffer, and capping it for them cost a fan-in of
   * 1 KiB messages a quarter of its throughput (docs/fan-in-regression.md). Otherwise 0 or at
   * least 131072: with less, loopback TCP was seen waiting on delayed acknowledgements (64 KiB
   * moved 2 MiB/s). Linux caps a value above twice `net.core.wmem_max`. TCP-only: also a
   * TcpTransport option, which wins.
   */
  tcpSndbuf?: number | 'auto';
  /**
   * Once a frame's header has arrived, its payload must be complete within this many ms, or the
   * connection is dropped (recv_drop_frame_timeout); time spent waiting for room in
   * maxPartialFrameBytes counts, time while the receive limits stop the node reading the
   * connection does not. Default 30000.
   */
  frameTimeoutMs?: number;
  /**
   * Stack-wide cap on the bytes of frames whose header has arrived and payload has not (h_len of
   * frames over 64 KiB, at least 256 KiB each; all TCP connections). A connection whose next frame
   * would go past it stops being read (recv_pause_partial_limit) until there is room; strangers'
   * frames may hold half of it, and a stalled frame is dropped for a higher-ranked one that waits
   * (recv_drop_frame_stalled; docs/partial-frames.md). At least 1 MiB (one frame always fits).
   * Default 64 MiB.
   */
  maxPartialFrameBytes?: number;
  /**
   * Hard limit per socket on received, unread messages: this many times its SO_RCVBUF (each
   * message counted as its payload plus 512 bytes). Congestion is only advice to senders; past
   * this the node stops reading the connection that delivered the message, so TCP pushes back on
   * the sender (recv_pause_queue_limit). Nothing is dropped. Default 64: senders that honour
   * congestion still overshoot SO_RCVBUF by what they had in flight when the map arrived
   * (measured up to ~30x with three rds-socket senders on eight paths each), and are not paused.
   */
  recvHardLimitFactor?: number;
  /**
   * The per-socket hard limit is never below this many bytes, whatever SO_RCVBUF says. A kernel
   * sender that honours congestion still has a TCP window or more in flight when our map reaches
   * it; with a small SO_RCVBUF (4 KiB) that overshoot alone passed 64 x SO_RCVBUF and paused the
   * whole connection, other ports' messages included, until the application read the full one.
   * Default 8 MiB; 0 lets small SO_RCVBUF values set the limit alone.
   */
  recvHardLimitMinBytes?: number;
  /**
   * The same for all of the stack's sockets together, in bytes: past it, any socket over its
   * SO_RCVBUF stops the connection that delivers to it. Default 256 MiB.
   */
  maxRecvQueueBytes?: number;
  /**
   * Messages a path queues on the node's own account (pongs, probe answers, its probe) and has
   * not had acknowledged: at most this many. Pings beyond it are not answered
   * (recv_drop_ping_budget). Default 256.
   */
  maxOwnQueued?: number;
  /**
   * A connection to a peer is forgotten (its paths, queues and the peer's congestion map freed)
   * once all its paths have been down this long (ms) with no application message queued or
   * unacknowledged for the peer; the next message or connection makes a fresh one. The initiating
   * side also stops keeping path 0 up to a kernel peer it has nothing for after this long (an
   * rds-socket peer with nothing queued for it is not redialled at all: it pokes). Infinity keeps
   * every connection for the life of the stack (the kernel's way). Default 60000.
   */
  peerIdleTimeoutMs?: number;
  /**
   * Open a control endpoint for rds-info: true for a Unix socket in the runtime directory
   * ($XDG_RUNTIME_DIR/rds-socket), or a path. Owner-only. Default off.
   */
  control?: boolean | string;
  /**
   * Paths (TCP connections) per peer for multipath RDS: 1, 2, 4 or 8. Default 8, as the kernel.
   * Used with rds-socket peers and with kernels that send SPORT_IDX (7.0+); with older kernels
   * rds-socket runs one path (see docs/kernel-interop.md).
   */
  npaths?: number;
  /**
   * Between rds-socket peers running several paths: a path that stays down this long (ms) while
   * another path to the same peer is up hands its queued and unacknowledged messages to the live
   * path, without loss, duplication or reordering per socket pair; its sockets return when it is
   * back. Infinity disables failover. Never used with kernel peers. Default 2000.
   */
  failoverGraceMs?: number;
  /**
   * A peer none of whose paths has been UP for this long (ms) is down: 'peer-down' on the stack
   * and on every socket with messages queued or unacknowledged to it, 'peer-up' when a path
   * comes back. Counted from the last path leaving UP, or from the first attempt to reach a peer
   * never reached. Infinity: never. Messages are kept either way (see SO_SNDTIMEO). Default 5000.
   */
  peerDownMs?: number;
  /**
   * After this many failed connection attempts in a row a path stops trying and stays in ERROR
   * (RTRS's max_reconnect_attempts) until path.reconnect() / stack.reconnectPath(); 'peer-down'
   * fires as for any unreachable peer and queued messages stay until cancelled or timed out.
   * Default Infinity (retry forever, with backoff).
   */
  maxReconnectAttempts?: number;
  /**
   * Sequence number of the first message on each path this stack makes. Default 'clock': the
   * wall clock in microseconds when the path is made (Date.now() x 1000), so a restarted node's
   * (or a forgotten connection's) numbers continue above those of its previous life on that
   * path. A kernel keeps its next_rx_seq for our address across reconnects and drops a
   * RETRANSMITTED message numbered below it: starting again at 1, as the kernel itself does, a
   * new life's first messages resent after a refused carrier were dropped as old by Linux up to
   * 6.19 (docs/kernel-new-life.md). A number (1 is the kernel's start) fixes the numbering, for
   * reproducible captures and tests only; it brings that loss back. The clock start holds while
   * a life sends fewer than 1,000 messages per millisecond on one path on average and the clock
   * does not step back between lives.
   */
  initialSequence?: number | 'clock';
  /**
   * How sockets are spread over a connection's live paths (lanes and rails) between rds-socket
   * peers: 'hash' (default: per bound port, as before), 'round-robin', 'min-inflight' or
   * 'min-latency'. Sockets move only when they have nothing in flight. See docs/rails.md, "Several
   * links to one peer". Kernel peers always run one path.
   */
  pathPolicy?: 'hash' | 'round-robin' | 'min-inflight' | 'min-latency';
  /** Per peer address, a policy that overrides pathPolicy (also stack.setPathPolicy()). */
  peerPathPolicies?: Record<string, 'hash' | 'round-robin' | 'min-inflight' | 'min-latency'>;
  /**
   * Rails declared at start (as stack.addRail() for each): the peer `peer` is also reachable from
   * our address `local` to its address `remote`. rds-socket peers over TCP only.
   */
  rails?: { peer: string; local: string; remote: string }[];
}

/** The options that take a value (the rest: transports, allowPeers, control, are handled by the stack). */
type Tunable = Exclude<
  keyof RdsStackOptions,
  'transports' | 'allowPeers' | 'control' | 'pathPolicy' | 'peerPathPolicies' | 'rails'
>;

/** Every tunable option with its value in force (the caller's or the default). */
export type ResolvedStackOptions = { readonly [K in Tunable]-?: NonNullable<RdsStackOptions[K]> };

/** The defaults, in one place: what `new RdsStack()` runs with. */
export const DEFAULTS: ResolvedStackOptions = Object.freeze({
  tcpPort: RDS_TCP_PORT,
  reconnectMinDelayMs: 1,
  reconnectMaxDelayMs: 1000,
  pingEnable: true,
  rdsAcks: true,
  maxUnackedPackets: 8,
  maxUnackedBytes: 16 << 20,
  ackDelayMaxMs: 1000,
  heartbeatIntervalMs: 2000,
  heartbeatMissedLimit: 4,
  handshakeTimeoutMs: 3000,
  npaths: RDS_MPATH_WORKERS,
  maxConnections: 4096,
  maxUnidentifiedConnections: 64,
  headerTimeoutMs: 10000,
  tcpSndbuf: 'auto',
  frameTimeoutMs: 30000,
  maxPartialFrameBytes: 64 << 20,
  recvHardLimitFactor: 64,
  recvHardLimitMinBytes: 8 << 20,
  maxRecvQueueBytes: 256 << 20,
  maxOwnQueued: 256,
  failoverGraceMs: 2000,
  peerDownMs: 5000,
  peerIdleTimeoutMs: 60000,
  maxReconnectAttempts: Infinity,
  initialSequence: 'clock',
});

/** What a numeric option must be: an integer in [min, max], or Infinity where that means "never". */
interface Rule {
  min: number;
  max?: number;
  infinity?: boolean;
  /** Added to the message when the value is refused: why the bound is what it is. */
  why?: string;
  /** A word also taken, meaning what the option documents (e.g. 'auto'). */
  word?: string;
  /** Integers inside [min, max] that are still refused. */
  gap?: readonly [number, number];
}

/** setTimeout's limit: a longer timer fires at once. */
const TIMER_MAX = 2 ** 31 - 1;

const RULES: { readonly [K in Tunable]: Rule | 'boolean' } = {
  tcpPort: { min: 1, max: 65535 },
  reconnectMinDelayMs: { min: 1 },
  reconnectMaxDelayMs: { min: 1 },
  // Not checked before (any value was taken as truthy or falsy): kept that way for compatibility.
  pingEnable: 'boolean',
  rdsAcks: 'boolean',
  maxUnackedPackets: { min: 1 },
  maxUnackedBytes: { min: 1 },
  ackDelayMaxMs: { min: 0, infinity: true },
  heartbeatIntervalMs: { min: 0 },
  heartbeatMissedLimit: { min: 1 },
  handshakeTimeoutMs: { min: 1 },
  npaths: { min: 1 },
  maxConnections: { min: 1 },
  maxUnidentifiedConnections: { min: 1 },
  headerTimeoutMs: { min: 1 },
  tcpSndbuf: {
    min: 0,
    word: 'auto',
    gap: [1, 131071],
    why: 'below 128 KiB loopback TCP waits on delayed acknowledgements',
  },
  frameTimeoutMs: { min: 1 },
  maxPartialFrameBytes: { min: RDS_MAX_MSG_SIZE, why: 'one frame of the largest message must always fit' },
  recvHardLimitFactor: { min: 1 },
  recvHardLimitMinBytes: { min: 0 },
  maxRecvQueueBytes: { min: 1 },
  maxOwnQueued: { min: 1 },
  failoverGraceMs: { min: 0, infinity: true },
  peerDownMs: { min: 0, max: TIMER_MAX, infinity: true, why: "a timer's limit" },
  peerIdleTimeoutMs: { min: 1, infinity: true },
  maxReconnectAttempts: { min: 1, infinity: true },
  initialSequence: { min: 1, max: 2 ** 52, word: 'clock', why: 'numbers must stay exact in a JavaScript number' },
};

/** Every option name `new RdsStack()` takes. */
export const STACK_OPTION_NAMES: readonly string[] = [
  ...Object.keys(DEFAULTS),
  'transports',
  'allowPeers',
  'control',
  'pathPolicy',
  'peerPathPolicies',
  'rails',
];

/**
 * One option's value checked against its rule (undefined: the default). Throws EINVAL saying what
 * the option takes. `owner` names where it was given ("RdsStack", "TcpTransport").
 */
export function checkOption<K extends Tunable>(name: K, value: unknown, owner = 'RdsStack'): ResolvedStackOptions[K] {
  if (value === undefined) return DEFAULTS[name];
  const rule = RULES[name];
  if (rule === 'boolean') return value as ResolvedStackOptions[K];
  if (rule.infinity && value === Infinity) return value as ResolvedStackOptions[K];
  if (rule.word !== undefined && value === rule.word) return value as ResolvedStackOptions[K];
  if (
    typeof value !== 'number' ||
    !Number.isInteger(value) ||
    value < rule.min ||
    (rule.max !== undefined && value > rule.max) ||
    (rule.gap !== undefined && value >= rule.gap[0] && value <= rule.gap[1])
  ) {
    const range =
      rule.gap !== undefined
        ? `${rule.min} or >= ${rule.gap[1] + 1}`
        : rule.max === undefined
          ? `>= ${rule.min}`
          : `${rule.min}..${rule.max}`;
    const inf = (rule.infinity ? ' or Infinity' : '') + (rule.word !== undefined ? ` or '${rule.word}'` : '');
    const why = rule.why ? ` (${rule.why})` : '';
    throw new RdsError(
      'EINVAL',
      `${owner} option ${name} must be an integer ${range}${inf}${why}, got ${String(value)}`,
    );
  }
  return value as ResolvedStackOptions[K];
}

/**
 * Refuses what JavaScript callers can pass and TypeScript would have caught (a non-object, an
 * option name the stack does not know: a typo like heartbeatInterval would otherwise be ignored),
 * then every value, then the rules between values. Returns the options in force.
 */
export function resolveStackOptions(opts: unknown): ResolvedStackOptions {
  if (opts === null || typeof opts !== 'object' || Array.isArray(opts)) {
    throw new RdsError('EINVAL', 'RdsStack options must be an object');
  }
  for (const name of Object.keys(opts)) {
    if (STACK_OPTION_NAMES.includes(name)) continue;
    const lower = name.toLowerCase();
    const near = STACK_OPTION_NAMES.find(
      (k) => k.toLowerCase() === lower || k.toLowerCase().startsWith(lower) || lower.startsWith(k.toLowerCase()),
    );
    throw new RdsError(
      'EINVAL',
      `unknown RdsStack option ${JSON.stringify(name)}${near ? `; did you mean ${near}?` : ''} (known: ${STACK_OPTION_NAMES.join(', ')})`,
    );
  }
  const given = opts as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const name of Object.keys(DEFAULTS) as Tunable[]) out[name] = checkOption(name, given[name]);
  const r = out as ResolvedStackOptions;
  if (r.reconnectMaxDelayMs < r.reconnectMinDelayMs) {
    throw new RdsError(
      'EINVAL',
      `need 1 <= reconnectMinDelayMs <= reconnectMaxDelayMs, got ${r.reconnectMinDelayMs} and ${r.reconnectMaxDelayMs}`,
    );
  }
  if (![1, 2, 4, 8].includes(r.npaths)) {
    throw new RdsError(
      'EINVAL',
      `npaths must be 1, 2, 4 or 8 (paths pair by source port modulo npaths), got ${r.npaths}`,
    );
  }
  if (given.rails !== undefined && !Array.isArray(given.rails)) {
    throw new RdsError('EINVAL', 'rails must be an array of { peer, local, remote }');
  }
  if (given.allowPeers !== undefined && !Array.isArray(given.allowPeers)) {
    throw new RdsError('EINVAL', 'allowPeers must be an array of addresses or CIDR blocks');
  }
  return Object.freeze(r);
}

/**
 * RDS_SOCKET_CONTROL in the environment opens the rds-info control endpoint on the default stack
 * without code changes: "1" (or "true", "yes") for the usual place, an absolute path for that
 * path, "0" / "" / unset for none.
 */
export function controlFromEnv(env: NodeJS.ProcessEnv = process.env): boolean | string {
  const v = (env.RDS_SOCKET_CONTROL ?? '').trim();
  if (v === '' || v === '0' || /^(false|no|off)$/i.test(v)) return false;
  if (v.startsWith('/')) return v;
  return true;
}

/**
 * An 'error' no listener takes: eventemitter3 would drop it silently. Node's EventEmitter throws;
 * a stack's errors come from listeners and background work (where a throw would crash the
 * process from a callback), so it is made visible as a process warning instead, once per message.
 */
const warned = new Set<string>();
export function warnUnhandledError(err: unknown): void {
  const text = err instanceof Error ? err.message : String(err);
  if (warned.has(text)) return;
  warned.add(text);
  process.emitWarning(
    `unhandled 'error' event on an RdsStack: ${text} (listen with stack.on('error', ...) to handle it)`,
    { type: 'RdsStackWarning', code: 'RDS_SOCKET_UNHANDLED_ERROR' },
  );
}
