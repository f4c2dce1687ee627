import { randomInt } from 'node:crypto';
import { EventEmitter } from 'eventemitter3';
import {
  RDS_FLAG_PROBE_PORT, RDS_FLAG_RETRANSMITTED, RDS_HEADER_SIZE, RDS_MAX_MSG_SIZE, RDS_MPATH_WORKERS, RDS_TCP_PORT, RDS_TRANS_LOOP, RDSSOCK_CAP_ACK, RDSSOCK_CAP_FAILOVER, RDSSOCK_CAP_HEARTBEAT, RDSSOCK_CAP_PATHS_SHIFT,
  RDSSOCK_CAP_CONFIRM, RDSSOCK_CAP_NO_HELLO, RDS_CONN_UP,
} from '../constants.js';
import { genNumExtension, npathsExtension, packExtensions, rdsCapsExtension, sportIdxExtension, type RdsExtension } from '../wire/extensions.js';
import { encodeHeader } from '../wire/header.js';
import type { RxEntry } from './rx-ack.js';
import { RdsError } from '../errors.js';
import { CongMap } from './cong-map.js';
import { RdsConnection } from './connection.js';
import type { ConnState, RdsConnPath } from './path.js';
import { recvIncoming } from './recv.js';
import { defer } from './defer.js';
import { ControlEndpoint } from './control.js';
import { checkStackOptions, controlFromEnv, warnUnhandledError } from './stack-options.js';
import { parseCidr } from './address.js';
import { PeerTable, type PeerEvent, type PeerInfo, type PeerState } from './peer-state.js';
import { RdsStats, type RdsCounterName, RDS_CTR } from './stats.js';
import { WireSlab } from './wire-slab.js';
import { RxLimiter } from './rx-limit.js';
import { ConnReclaimer } from './reclaim.js';
import type { RdsTransport } from './transport.js';

export interface RdsStackOptions {
  /** TCP port the TCP transport listens on and connects to (the kernel's is 16385). */
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
  /** Heartbeat period towards rds-socket peers; 0 disables. Default 2000. */
  heartbeatIntervalMs?: number;
  /** Silent periods after which the path is dropped and reconnected. Default 4 (detection < 10 s). */
  heartbeatMissedLimit?: number;
  /** How long to wait for the peer's handshake before treating it as a kernel. Default 3000. */
  handshakeTimeoutMs?: number;
  /**
   * Peers allowed to connect: addresses or CIDR blocks ("10.1.0.0/16"). Connections from
   * anyone else are refused and counted (conn_refused_allowlist), by TCP source address, before
   * any TLS handshake or per-peer state. Default: everyone, as the kernel.
   */
  allowPeers?: string[];
  /** At most this many TCP connections (all peers, all paths, TLS handshakes included); more are reset (conn_refused_limit). Default 4096. */
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
   * bounds each step of a new TCP connection: the TLS handshake, then its first complete frame.
   * Default 10000.
   */
  headerTimeoutMs?: number;
  /**
   * Once a frame's header has arrived, its payload must be complete within this many ms, or the
   * connection is dropped (recv_drop_frame_timeout). Time while the node itself has stopped
   * reading the connection (receive limits) does not count. Default 30000.
   */
  frameTimeoutMs?: number;
  /**
   * Stack-wide cap on the bytes of frames whose header has arrived and payload has not (declared
   * h_len, all TCP connections). A connection whose next frame would go past it stops being read
   * (recv_pause_partial_limit) until frames in progress elsewhere complete or are dropped.
   * At least 1 MiB (one frame always fits). Default 64 MiB.
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
   * side also stops reconnecting to a peer it has nothing for after this long. Infinity keeps
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
   * Used with rds-socket peers; with kernel peers rds-socket runs one path (see README).
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
}

export interface ResolvedStackOptions {
  tcpPort: number;
  reconnectMinDelayMs: number;
  reconnectMaxDelayMs: number;
  pingEnable: boolean;
  rdsAcks: boolean;
  maxUnackedPackets: number;
  maxUnackedBytes: number;
  ackDelayMaxMs: number;
  heartbeatIntervalMs: number;
  heartbeatMissedLimit: number;
  handshakeTimeoutMs: number;
  npaths: number;
  maxConnections: number;
  maxUnidentifiedConnections: number;
  headerTimeoutMs: number;
  frameTimeoutMs: number;
  maxPartialFrameBytes: number;
  recvHardLimitFactor: number;
  maxRecvQueueBytes: number;
  maxOwnQueued: number;
  failoverGraceMs: number;
  peerDownMs: number;
  peerIdleTimeoutMs: number;
}

function positiveInt(v: unknown, name: string, dflt: number, min = 1): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) {
    throw new RdsError('EINVAL', `${name} must be an integer >= ${min}, got ${String(v)}`);
  }
  return v;
}

/** A message as recvmsg() returns it. */
export interface RdsMessage {
  data: Buffer;
  /** Sender's address and bound port (port 0 for a pong). */
  address: string;
  port: number;
  /** With SO_TIMESTAMP: when the message was queued to the socket, ms since the epoch. */
  timestamp?: number;
  /** With RDS_CONG_MONITOR: ports (bit p % 64) that became uncongested; data is empty. */
  congestionUpdate?: bigint;
  /**
   * RDS_CMSG_ZCOPY_COMPLETION: cookies of MSG_ZEROCOPY sends whose buffers the caller may reuse
   * (acknowledged or cancelled), at most 8 per call. Alone (address '', data empty) when no
   * message is waiting, otherwise carried by the next message.
   */
  zcopyCompletions?: number[];
}

/** Tells the path that delivered a message when the application has taken it (for acks). */
export type Receipt = RxEntry;

/** A queued message as rds-info lists it (send, retransmit and receive queues). */
export interface MessageInfo {
  localAddress: string;
  localPort: number;
  peerAddress: string;
  peerPort: number;
  seq: number;
  bytes: number;
}

export interface SocketInfo {
  boundAddress: string;
  boundPort: number;
  connectedAddress: string;
  connectedPort: number;
  sndbuf: number;
  rcvbuf: number;
  /** A stable number per socket (the kernel shows the inode). */
  inode: number;
  transport: string;
}

/** What the stack needs of a socket bound in it. */
export interface BoundSocket {
  info(): SocketInfo;
  /** Messages waiting to be read. */
  receiveQueue(): MessageInfo[];
  readonly boundAddress: string;
  readonly boundPort: number;
  /** Queue a message; false if the socket is gone (the message is dropped). */
  enqueueIncoming(msg: RdsMessage, receipt: Receipt | null): boolean;
  /** What its unread messages cost (payload + RX_MSG_OVERHEAD each) is over `factor` x SO_RCVBUF. */
  rxOverLimit?(factor: number): boolean;
  congestionUpdated(conn: RdsConnection, mask: bigint): void;
  /** A peer was declared down or came back (the socket decides whether it has traffic for it). */
  peerDown?(ev: PeerEvent): void;
  peerUp?(ev: PeerEvent): void;
  close(): Promise<void>;
}

export interface PathInfo {
  index: number;
  state: ConnState;
  nextTxSeq: number;
  nextRxSeq: number;
  sendQueue: number;
  retransQueue: number;
  sentMessages: number;
  sentBytes: number;
  recvMessages: number;
  recvBytes: number;
  upCount: number;
  /** Connect attempts that failed. */
  connectFailures: number;
  acksSent: number;
  heartbeatsSent: number;
  /** Messages this path handed to a live path while it was down (failover). */
  movedByFailover: number;
  /** While failed over: the index of the path its sockets use meanwhile; otherwise null. */
  failedOverTo: number | null;
  /** Send-to-acknowledge times: bucket b counts messages acknowledged in [2^(b-1), 2^b) ms (b=0: < 1 ms). */
  latencyHistogram: number[];
  /** Sum of the times counted in latencyHistogram, ms. */
  latencySumMs: number;
  /** Transport details (TCP: local and peer ports, bytes, reassembly state). */
  transport: Record<string, unknown> | null;
}

export interface ConnectionInfo {
  localAddress: string;
  peerAddress: string;
  transport: string;
  npaths: number;
  initiator: boolean;
  paths: PathInfo[];
}

export interface PathStateEvent {
  localAddress: string;
  peerAddress: string;
  transport: string;
  path: number;
  from: ConnState;
  to: ConnState;
}

export interface RdsStackEvents {
  /** A path changed state. */
  state: (ev: PathStateEvent) => void;
  /** A path was dropped, and why (peer closed, protocol error, heartbeat, ...). */
  drop: (ev: { localAddress: string; peerAddress: string; transport: string; path: number; reason: string }) => void;
  /** A path stayed down past failoverGraceMs: `moved` messages went to path `to`. */
  failover: (ev: { localAddress: string; peerAddress: string; transport: string; path: number; to: number; moved: number }) => void;
  /** A connection was dropped because the peer broke the protocol (already counted). */
  'protocol-error': (ev: { localAddress: string; peerAddress: string; transport: string; path: number; error: Error }) => void;
  /** No path to a peer has been UP for peerDownMs: `unreachableMs` says for how long. */
  'peer-down': (ev: PeerEvent) => void;
  /** A path to a peer that was down is UP again; `unreachableMs`: how long it was unreachable. */
  'peer-up': (ev: PeerEvent) => void;
  /** An asynchronous failure with no call to report it to (a listener died, ...). */
  error: (err: Error) => void;
}

/** The part of the stack a transport talks to. */
export type RdsTransportHost = Pick<RdsStack,
  'peerAllowed' | 'counters' | 'options' | 'connFor' | 'findConn' | 'recvIncoming' | 'isLocalAddress' | 'referenced' | 'reportProtocolError'
  | 'closing' | 'emit' | 'isBound'>;

const defaultTransportFactories: (() => RdsTransport)[] = [];

/**
 * One RDS node inside this process: the bind table, the connections to every peer (shared by
 * all sockets), the congestion maps and the counters. Sockets made without a stack use the
 * default one, so a process is one node unless it asks for more.
 */
export class RdsStack extends EventEmitter<RdsStackEvents> {
  /** @internal */ private static defaultStack: RdsStack | null = null;

  readonly options: ResolvedStackOptions;
  /** Counters named as the kernel's (rds-info -c); cheap to read. */
  readonly counters = new RdsStats();
  /** Memory for queued frames, shared by every path so bursts lie contiguous (see WireSlab). @internal */
  readonly wireSlab = new WireSlab();
  /** rds_gen_num: random per stack instance, so peers can tell that we restarted. @internal */
  readonly genNum: number = randomInt(1, 0xffffffff);
  /** @internal */ readonly maxPaths = RDS_MPATH_WORKERS;
  /** @internal */ readonly loopTransportType = RDS_TRANS_LOOP;
  /** Hard limits on unread received messages (recvHardLimitFactor, maxRecvQueueBytes). @internal */
  readonly rxLimit: RxLimiter;

  /** @internal */ private readonly transports = new Map<string, RdsTransport>();
  /** Bound sockets by address, then port: an address is here while any socket is bound to it. @internal */
  private readonly bindTable = new Map<string, Map<number, BoundSocket>>();
  /** @internal */ private readonly conns = new Map<string, RdsConnection>();
  /** @internal */ private readonly congMaps = new Map<string, CongMap>();
  /** Sockets waiting for a congestion map (send() blocked on ENOBUFS). @internal */
  private readonly congWaiters = new Set<() => void>();
  /** @internal */ private openSockets = 0;
  /** Bumped on every received map: poll() reports POLLWRBAND once after each. @internal */
  congGeneration = 0;
  closing = false;
  referenced = false;
  /** Reachability per peer address, fed by pathStateChanged (see peer-state.ts). */
  private readonly peerTable: PeerTable;
  /** The allowlist (allowPeers); everyone by default. */
  peerAllowed: (address: string) => boolean = () => true;

  /** Registers the transports every new stack gets; the package entry point supplies them. @internal */
  static setDefaultTransports(factories: (() => RdsTransport)[]): void {
    defaultTransportFactories.splice(0, defaultTransportFactories.length, ...factories);
  }

  /** The process-wide stack used by sockets made without one. */
  static default(): RdsStack {
    if (RdsStack.defaultStack === null || RdsStack.defaultStack.closing) {
      // RDS_SOCKET_CONTROL=1 opens rds-info's endpoint on the default stack without code changes.
      const control = controlFromEnv();
      RdsStack.defaultStack = new RdsStack(control === false ? {} : { control });
    }
    return RdsStack.defaultStack;
  }

  constructor(opts: RdsStackOptions = {}) {
    super();
    checkStackOptions(opts);
    const tcpPort = opts.tcpPort ?? RDS_TCP_PORT;
    if (!Number.isInteger(tcpPort) || tcpPort < 1 || tcpPort > 65535) {
      throw new RdsError('EINVAL', `tcpPort must be an integer 1..65535, got ${String(opts.tcpPort)}`);
    }
    const min = opts.reconnectMinDelayMs ?? 1;
    const max = opts.reconnectMaxDelayMs ?? 1000;
    if (!(min >= 1) || !(max >= min)) {
      throw new RdsError('EINVAL', `need 1 <= reconnectMinDelayMs <= reconnectMaxDelayMs, got ${min} and ${max}`);
    }
    this.options = {
      tcpPort, reconnectMinDelayMs: min, reconnectMaxDelayMs: max, pingEnable: opts.pingEnable ?? true,
      rdsAcks: opts.rdsAcks ?? true,
      maxUnackedPackets: positiveInt(opts.maxUnackedPackets, 'maxUnackedPackets', 8),
      maxUnackedBytes: positiveInt(opts.maxUnackedBytes, 'maxUnackedBytes', 16 << 20),
      ackDelayMaxMs: opts.ackDelayMaxMs === Infinity ? Infinity : positiveInt(opts.ackDelayMaxMs, 'ackDelayMaxMs', 1000, 0),
      heartbeatIntervalMs: positiveInt(opts.heartbeatIntervalMs, 'heartbeatIntervalMs', 2000, 0),
      heartbeatMissedLimit: positiveInt(opts.heartbeatMissedLimit, 'heartbeatMissedLimit', 4),
      handshakeTimeoutMs: positiveInt(opts.handshakeTimeoutMs, 'handshakeTimeoutMs', 3000),
      npaths: positiveInt(opts.npaths, 'npaths', RDS_MPATH_WORKERS),
      maxConnections: positiveInt(opts.maxConnections, 'maxConnections', 4096),
      maxUnidentifiedConnections: positiveInt(opts.maxUnidentifiedConnections, 'maxUnidentifiedConnections', 64),
      headerTimeoutMs: positiveInt(opts.headerTimeoutMs, 'headerTimeoutMs', 10000),
      frameTimeoutMs: positiveInt(opts.frameTimeoutMs, 'frameTimeoutMs', 30000),
      maxPartialFrameBytes: positiveInt(opts.maxPartialFrameBytes, 'maxPartialFrameBytes', 64 << 20, RDS_MAX_MSG_SIZE),
      recvHardLimitFactor: positiveInt(opts.recvHardLimitFactor, 'recvHardLimitFactor', 64),
      maxRecvQueueBytes: positiveInt(opts.maxRecvQueueBytes, 'maxRecvQueueBytes', 256 << 20),
      maxOwnQueued: positiveInt(opts.maxOwnQueued, 'maxOwnQueued', 256),
      failoverGraceMs: opts.failoverGraceMs === Infinity ? Infinity : positiveInt(opts.failoverGraceMs, 'failoverGraceMs', 2000, 0),
      peerDownMs: opts.peerDownMs === Infinity ? Infinity : positiveInt(opts.peerDownMs, 'peerDownMs', 5000, 0),
      peerIdleTimeoutMs: opts.peerIdleTimeoutMs === Infinity ? Infinity : positiveInt(opts.peerIdleTimeoutMs, 'peerIdleTimeoutMs', 60000),
    };
    this.rxLimit = new RxLimiter(this.options.maxRecvQueueBytes, this.options.recvHardLimitFactor, this.counters);
    if (this.options.peerDownMs > 2 ** 31 - 1 && Number.isFinite(this.options.peerDownMs)) {
      throw new RdsError('EINVAL', `peerDownMs must be at most ${2 ** 31 - 1} ms (a timer's limit) or Infinity, got ${this.options.peerDownMs}`);
    }
    this.peerTable = new PeerTable(this.options.peerDownMs, {
      peerDown: (ev) => this.peerWentDown(ev),
      peerUp: (ev) => this.peerCameUp(ev),
    });
    this.reclaimer = new ConnReclaimer(this.options.peerIdleTimeoutMs, this.conns, (c) => this.forgetConn(c));
    if (opts.allowPeers !== undefined) {
      if (!Array.isArray(opts.allowPeers)) throw new RdsError('EINVAL', 'allowPeers must be an array of addresses or CIDR blocks');
      const tests = opts.allowPeers.map((p) => parseCidr(String(p)));
      this.peerAllowed = (a) => tests.some((t) => t(a));
    }
    if (![1, 2, 4, 8].includes(this.options.npaths)) {
      throw new RdsError('EINVAL', `npaths must be 1, 2, 4 or 8 (paths pair by source port modulo npaths), got ${this.options.npaths}`);
    }
    for (const t of opts.transports ?? defaultTransportFactories.map((f) => f())) this.registerTransport(t);
    if (opts.control) {
      this.openControl(typeof opts.control === 'string' ? opts.control : undefined).catch((e) => this.emit('error', e as Error));
    }
  }

  /** Like Node's EventEmitter, an 'error' nobody listens for is not dropped (eventemitter3 would): it becomes a process warning. */
  override emit<T extends EventEmitter.EventNames<RdsStackEvents>>(event: T, ...args: EventEmitter.EventArgs<RdsStackEvents, T>): boolean {
    if (event === 'error' && this.listenerCount('error') === 0) {
      warnUnhandledError(args[0]);
      return false;
    }
    return super.emit(event, ...args);
  }

  /** @internal */ registerTransport(t: RdsTransport): void {
    if (this.transports.has(t.name)) throw new RdsError('EINVAL', `transport ${t.name} is already registered`);
    this.transports.set(t.name, t);
    t.attach(this);
  }

  /** @internal */ transport(name: string): RdsTransport | undefined {
    return this.transports.get(name);
  }

  /** @internal */ transportByType(type: number): RdsTransport | undefined {
    for (const t of this.transports.values()) if (t.transType === type) return t;
    return undefined;
  }

  /** Transports a socket may bind with, in the kernel's preference order (IB before TCP). @internal */
  selectableTransports(): RdsTransport[] {
    return [...this.transports.values()].filter((t) => t.userSelectable).sort((a, b) => a.transType - b.transType);
  }

  // ---- bind table (bind.c) ----

  /** Whether (address, port) is bound in this stack (transports ask it; see RdsTransportHost). */
  isBound(address: string, port: number): boolean {
    return this.bindTable.get(address)?.has(port) === true;
  }

  /** Reserves (address, port) for a socket; throws EADDRINUSE if taken. @internal */
  bindReserve(address: string, port: number, sock: BoundSocket): void {
    let ports = this.bindTable.get(address);
    if (ports?.has(port)) {
      throw new RdsError('EADDRINUSE', `${address}:${port} is already bound by another RDS socket in this stack; choose another port or 0 for an ephemeral one`);
    }
    if (ports === undefined) {
      ports = new Map();
      this.bindTable.set(address, ports);
    }
    ports.set(port, sock);
  }

  /** Picks a free port the way the kernel does: random start >= 2, probing upward. @internal */
  ephemeralPort(address: string): number {
    const start = randomInt(2, 65536);
    for (let i = 0; i < 65534; i++) {
      const p = 2 + ((start - 2 + i) % 65534);
      if (!this.isBound(address, p)) return p;
    }
    throw new RdsError('EADDRINUSE', `no free RDS port left on ${address}`);
  }

  /** @internal */ unbind(address: string, port: number, sock: BoundSocket): void {
    const ports = this.bindTable.get(address);
    if (ports?.get(port) !== sock) return;
    ports.delete(port);
    if (ports.size === 0) this.bindTable.delete(address);
  }

  /** An address some socket of this stack is bound to: traffic to it uses the loopback transport. */
  isLocalAddress(address: string): boolean {
    return this.bindTable.has(address);
  }

  /** @internal */ sockets(): BoundSocket[] {
    return [...this.bindTable.values()].flatMap((ports) => [...ports.values()]);
  }

  // ---- sockets keep the process alive, an idle stack does not ----

  /** @internal */ socketOpened(): void {
    if (this.openSockets++ === 0) this.setRef(true);
  }

  /** @internal */ socketClosed(): void {
    if (--this.openSockets === 0) this.setRef(false);
  }

  /** @internal */ private setRef(ref: boolean): void {
    this.referenced = ref;
    for (const t of this.transports.values()) t.setRef(ref);
    for (const c of this.conns.values()) for (const p of c.paths) p.setRef(ref);
  }

  // ---- connections (connection.c) ----

  /** The connection (laddr, faddr, transport), made on first use. */
  connFor(laddr: string, faddr: string, transport: RdsTransport): RdsConnection {
    const key = RdsConnection.key(laddr, faddr, transport.name);
    let c = this.conns.get(key);
    if (c === undefined) {
      c = new RdsConnection(this, laddr, faddr, transport, transport.mpathCapable ? this.maxPaths : 1);
      this.conns.set(key, c);
      this.reclaimer.connCreated(c);
    }
    return c;
  }

  /** The connection (laddr, faddr, transport) if there is one; never makes one (admission checks). (transports ask it; see RdsTransportHost) */
  findConn(laddr: string, faddr: string, transport: RdsTransport): RdsConnection | undefined {
    return this.conns.get(RdsConnection.key(laddr, faddr, transport.name));
  }

  /** Forgets idle connections (see peerIdleTimeoutMs). @internal */
  private readonly reclaimer: ConnReclaimer;

  /**
   * Forgets every idle connection now (all paths down for peerIdleTimeoutMs, nothing queued or
   * unacknowledged for the peer), as the periodic sweep does; returns how many.
   */
  reclaimIdleConnections(): number {
    return this.reclaimer.sweep();
  }

  /** @internal */
  private forgetConn(c: RdsConnection): void {
    this.conns.delete(c.key);
    this.counters.add(RDS_CTR.conn_reclaimed);
    // The peer's map goes with its last connection (ours stay while anything is bound to them).
    if (this.isLocalAddress(c.faddr)) return;
    for (const o of this.conns.values()) if (o.faddr === c.faddr || o.laddr === c.faddr) return;
    this.congMaps.delete(c.faddr);
  }

  /** The connection a socket bound with `transport` uses to reach faddr: loopback if faddr is ours. @internal */
  connForSend(laddr: string, faddr: string, transport: RdsTransport): RdsConnection {
    if (this.isLocalAddress(faddr)) {
      const loop = this.transportByType(RDS_TRANS_LOOP);
      if (loop) return this.connFor(laddr, faddr, loop);
    }
    return this.connFor(laddr, faddr, transport);
  }

  /** rds-socket capabilities we advertise in handshakes. @internal */
  localCaps(conn: RdsConnection): number {
    // We always answer heartbeats, even when we send none ourselves.
    const paths = conn.transport.mpathCapable ? this.options.npaths : 1;
    // Failover needs acks (to know what the peer has) and paths to move between.
    const failover = this.options.rdsAcks && paths > 1 ? RDSSOCK_CAP_FAILOVER : 0;
    const acks = this.options.rdsAcks ? RDSSOCK_CAP_ACK | RDSSOCK_CAP_CONFIRM : 0;
    return acks | RDSSOCK_CAP_HEARTBEAT | RDSSOCK_CAP_NO_HELLO | failover | (paths << RDSSOCK_CAP_PATHS_SHIFT);
  }

  /**
   * Extensions of our hello, probe and pong: the kernel's set (NPATHS, GEN_NUM, and SPORT_IDX when
   * we choose our source ports), then ours last, where kernel parsers stop.
   * @internal
   */
  handshakeExtensions(conn: RdsConnection): RdsExtension[] {
    const exts = [npathsExtension(this.advertisedPaths(conn)), genNumExtension(this.genNum)];
    if (conn.isInitiator && conn.transport.mpathCapable) exts.push(sportIdxExtension());
    exts.push(rdsCapsExtension(this.localCaps(conn)));
    return exts;
  }

  /**
   * The unsequenced hello (seq 0, RETRANSMITTED, sport 1 -> dport 0, handshake extensions) that
   * starts a carrier of a lane > 0 (only rds-socket peers run lanes) and, on path 0, only a carrier
   * to an older rds-socket peer (no RDSSOCK_CAP_NO_HELLO), which acknowledges nothing before it.
   * A kernel never gets it: it would count it in recv_drop_old_seq.
   * @internal
   */
  helloFrame(conn: RdsConnection): Buffer {
    const h = Buffer.allocUnsafe(RDS_HEADER_SIZE);
    encodeHeader(h, 0, { sport: RDS_FLAG_PROBE_PORT, dport: 0, flags: RDS_FLAG_RETRANSMITTED, exthdr: packExtensions(this.handshakeExtensions(conn)) });
    return h;
  }

  /**
   * A path came UP. On path 0 we send the multipath probe, as a 7.0 kernel does after every
   * reconnect: the answer tells us the path count, the peer's generation (did it restart?) and
   * whether it is rds-socket (acks, heartbeats). A peer that never answers is treated as a kernel.
   * @internal
   */
  pathUp(cp: RdsConnPath): void {
    const conn = cp.conn;
    if (conn.isLoopback || cp.index !== 0) return;
    // A probe still waiting to be sent (queued ahead of the first data) serves this carrier too.
    if (cp.lastProbe === null || cp.lastProbe.sentAt !== 0 || cp.lastProbe.done) this.queueProbe(cp);
    if (!conn.capsKnown) {
      const t = setTimeout(() => {
        if (!conn.capsKnown) {
          this.counters.add(RDS_CTR.handshake_timeout);
          this.handshakeReceived(conn, 0);
        }
      }, this.options.handshakeTimeoutMs);
      t.unref();
    }
  }

  /**
   * Queues the multipath probe on path 0. The first sequenced frame an incarnation sends on a
   * path 0 is its probe (queued ahead of the first message), so a peer learns our generation
   * before any of our data, on whichever carrier it first arrives, without a frame a kernel
   * would count (the kernel's hello-less way; see README "Reliability").
   * @internal
   */
  queueProbe(cp: RdsConnPath): void {
    // Refused only when the peer has left maxOwnQueued of our messages unacknowledged: the
    // handshake then times out and the peer is treated as a kernel.
    if (cp.tx.queueProbe(this.handshakeExtensions(cp.conn)) !== null) this.counters.add(RDS_CTR.handshake_sent);
  }

  /** What a handshake (or its absence) says about the peer; settles the path count. @internal */
  handshakeReceived(conn: RdsConnection, caps: number, hs: { npaths?: number; sportIdx?: boolean } = {}): void {
    const changed = !conn.capsKnown || conn.peerCaps !== caps;
    conn.peerCaps = caps;
    conn.capsKnown = true;
    if (hs.sportIdx) conn.peerSportIdx = true;
    // rds-socket peers say how many paths they run in their capabilities; a kernel's NPATHS is
    // answered with our NPATHS of 1 (see advertisedPaths), so kernels always run one path.
    const peerPaths = (caps >>> RDSSOCK_CAP_PATHS_SHIFT) & 0xf;
    const n = peerPaths > 0 && conn.transport.mpathCapable
      ? Math.min(this.options.npaths, peerPaths, conn.paths.length)
      : Math.max(1, Math.min(this.advertisedPaths(conn), hs.npaths ?? 1));
    conn.setPathCount(n);
    // A kernel is never acknowledged: drop what was tracked while we did not know.
    if (!conn.tracksReceipts) for (const p of conn.paths) p.rx.reset();
    if (changed) for (const p of conn.paths) p.capabilitiesChanged();
    // An older rds-socket peer acknowledges nothing on a carrier before our hello.
    if (changed && conn.wantsLegacyHello && conn.paths[0]!.state === RDS_CONN_UP) conn.paths[0]!.sendLegacyHello();
    conn.transport.capabilitiesChanged?.(conn);
  }

  /**
   * NPATHS we advertise in the kernel-visible extension: always 1. A kernel up to 6.19 pairs
   * accepted connections with paths in arrival order, so after reconnects its path j can meet our
   * path i and duplicate suppression breaks (spec §3.5); one path is always safe. rds-socket peers
   * learn our real path count from the capability extension.
   * @internal
   */
  advertisedPaths(_conn: RdsConnection): number {
    return 1;
  }

  /** @internal */ private control: ControlEndpoint | null = null;

  /** Opens the rds-info control endpoint (see the `control` option); returns its path. */
  async openControl(path?: string): Promise<string> {
    if (this.control === null) this.control = await ControlEndpoint.open(() => this.info(), path);
    return this.control.path;
  }

  get controlPath(): string | null {
    return this.control?.path ?? null;
  }

  /** Everything rds-info can show, as plain data. @internal */
  info(): {
    counters: Record<RdsCounterName, number>; sockets: SocketInfo[]; connections: ConnectionInfo[];
    sendQueue: MessageInfo[]; retransQueue: MessageInfo[]; recvQueue: MessageInfo[];
  } {
    const sendQueue: MessageInfo[] = [];
    const retransQueue: MessageInfo[] = [];
    for (const c of this.conns.values()) {
      for (const p of c.paths) {
        const list = (q: Iterable<{ done: boolean; sport: number; dport: number; seq: number; len: number }>, out: MessageInfo[]): void => {
          for (const m of q) {
            if (!m.done) out.push({ localAddress: c.laddr, localPort: m.sport, peerAddress: c.faddr, peerPort: m.dport, seq: m.seq, bytes: m.len });
          }
        };
        list(p.sendQueue, sendQueue);
        list(p.retrans, retransQueue);
      }
    }
    return {
      counters: this.counters.snapshot(),
      sockets: this.sockets().map((s) => s.info()),
      connections: this.connections(),
      sendQueue, retransQueue,
      recvQueue: this.sockets().flatMap((s) => s.receiveQueue()),
    };
  }

  /**
   * Everything rds-info shows: counters named as the kernel names them, plus per connection and
   * per path figures. Cheap enough to poll every second.
   */
  stats(): { counters: Record<RdsCounterName, number>; connections: ConnectionInfo[] } {
    return { counters: this.counters.snapshot(), connections: this.connections() };
  }

  connections(): ConnectionInfo[] {
    return [...this.conns.values()].map((c) => ({
      localAddress: c.laddr,
      peerAddress: c.faddr,
      transport: c.transport.name,
      npaths: c.npaths,
      initiator: c.isInitiator,
      paths: c.paths.slice(0, Math.max(1, c.npaths)).map((p) => {
        const q = p.pendingCount();
        return {
          index: p.index, state: p.stateName, nextTxSeq: p.nextTxSeq, nextRxSeq: p.nextRxSeq,
          sendQueue: q.send, retransQueue: q.retrans, sentMessages: p.sentMessages, sentBytes: p.sentBytes,
          recvMessages: p.recvMessages, recvBytes: p.recvBytes, upCount: p.upCount,
          connectFailures: p.connectFailures, acksSent: p.acksSent, heartbeatsSent: p.heartbeatsSent,
          movedByFailover: p.movedByFailover, failedOverTo: p.failedOverTo?.index ?? null,
          latencyHistogram: [...p.latencyHistogram], latencySumMs: p.latencySumMs,
          transport: c.transport.pathInfo?.(p) ?? null,
        };
      }),
    }));
  }

  /** @internal */
  pathStateChanged(cp: RdsConnPath, from: ConnState, to: ConnState): void {
    const conn = cp.conn;
    conn.stateChangedAt = Date.now();
    if (from === 'UP' || to === 'UP') conn.lastUpAt = conn.stateChangedAt;
    this.emit('state', {
      localAddress: cp.conn.laddr, peerAddress: cp.conn.faddr, transport: cp.conn.transport.name,
      path: cp.index, from, to,
    });
    this.peerTable.pathChanged(cp.conn.faddr, from, to);
  }

  // ---- peer reachability (peer-state.ts) ----

  /** A socket is about to send to `address`: its reachability entry (made if new). @internal */
  peerEntry(address: string): PeerState {
    return this.peerTable.entry(address);
  }

  /** How long `address` has had no path UP (0 if it has one, or is unknown). @internal */
  peerUnreachableMs(address: string): number {
    return this.peerTable.get(address)?.unreachableMs() ?? 0;
  }

  /** Every peer this node has tried to reach or heard from, with its reachability and queue. */
  peers(): PeerInfo[] {
    const queued = new Map<string, { messages: number; bytes: number }>();
    for (const c of this.conns.values()) {
      let q = queued.get(c.faddr);
      if (q === undefined) queued.set(c.faddr, (q = { messages: 0, bytes: 0 }));
      for (const p of c.paths) {
        for (const list of [p.sendQueue, p.retrans]) {
          for (const m of list) {
            if (m.done || !m.fromSocket) continue;
            q.messages++;
            q.bytes += m.len;
          }
        }
      }
    }
    const now = Date.now();
    return this.peerTable.list().map((p) => ({
      address: p.address, state: p.state, since: p.since, unreachableMs: p.unreachableMs(now), pathsUp: p.pathsUp,
      queuedMessages: queued.get(p.address)?.messages ?? 0, queuedBytes: queued.get(p.address)?.bytes ?? 0,
    })).sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0));
  }

  private peerWentDown(ev: PeerEvent): void {
    this.emit('peer-down', ev);
    for (const s of this.sockets()) s.peerDown?.(ev);
    // A peer no connection refers to any more (one reclaimed meanwhile) needs no entry.
    let referenced = false;
    for (const c of this.conns.values()) if (c.faddr === ev.address) referenced = true;
    if (!referenced) this.peerTable.forget(ev.address);
  }

  private peerCameUp(ev: PeerEvent): void {
    // Reported after the transition that caused it has finished (it happens inside a path's
    // state change): listeners may send, close or reconnect without re-entering it.
    defer(() => {
      if (this.closing) return;
      this.emit('peer-up', ev);
      for (const s of this.sockets()) s.peerUp?.(ev);
    });
  }

  /** Why a path went down, for operators: a 'drop' event (the 'state' events follow). @internal */
  pathDropped(cp: RdsConnPath, reason: string): void {
    this.emit('drop', {
      localAddress: cp.conn.laddr, peerAddress: cp.conn.faddr, transport: cp.conn.transport.name, path: cp.index, reason,
    });
  }

  /** A path's messages moved to a live one: a 'failover' event. @internal */
  pathFailedOver(cp: RdsConnPath, to: RdsConnPath, moved: number): void {
    this.emit('failover', {
      localAddress: cp.conn.laddr, peerAddress: cp.conn.faddr, transport: cp.conn.transport.name, path: cp.index, to: to.index, moved,
    });
  }

  reportProtocolError(cp: RdsConnPath, error: Error): void {
    this.counters.add(RDS_CTR.recv_drop_protocol_error);
    this.emit('protocol-error', {
      localAddress: cp.conn.laddr, peerAddress: cp.conn.faddr, transport: cp.conn.transport.name, path: cp.index, error,
    });
  }

  /**
   * A restarted peer (new GEN_NUM): its sequence numbering starts over, so forget where it was.
   * Our unacknowledged messages are kept and resent: the new incarnation never saw them (the
   * kernel flushes them instead, losing them).
   * @internal
   */
  peerRestarted(conn: RdsConnection): void {
    this.counters.add(RDS_CTR.peer_restarted);
    for (const p of conn.paths) {
      p.rx.reset();
      p.peerRestarted();
    }
  }

  // ---- receive side ----

  recvIncoming(cp: RdsConnPath, header: Buffer, payload: Buffer): void {
    recvIncoming(this, cp, header, payload);
  }

  /**
   * Hands a message to the socket bound to (laddr, dport); false if there is none. `from`, the
   * path it came on, stops being read if the message took the socket or the stack over a hard
   * receive limit (see RxLimiter).
   * @internal
   */
  deliver(laddr: string, dport: number, faddr: string, sport: number, data: Buffer, receipt: Receipt | null, from?: RdsConnPath): boolean {
    const sock = this.bindTable.get(laddr)?.get(dport);
    if (sock === undefined) {
      this.counters.add(RDS_CTR.recv_drop_no_sock);
      return false;
    }
    this.counters.add(RDS_CTR.recv_delivered);
    this.counters.add(RDS_CTR.recv_bytes_added_to_sock, data.length);
    if (!sock.enqueueIncoming({ data, address: faddr, port: sport }, receipt)) return false;
    if (from !== undefined) this.rxLimit.delivered(from, sock);
    return true;
  }

  // ---- congestion (cong.c) ----

  /** The map of an address: ours if it is local, the peer's copy otherwise. @internal */
  congMap(address: string): CongMap {
    let m = this.congMaps.get(address);
    if (m === undefined) {
      m = new CongMap();
      this.congMaps.set(address, m);
    }
    return m;
  }

  /** A local port's bit flipped: every connection from that address sends the full map. @internal */
  localCongChanged(laddr: string): void {
    for (const c of this.conns.values()) {
      if (c.laddr !== laddr || c.isLoopback) continue;
      c.paths[0]!.queueCongUpdate();
    }
    // Loopback senders read this map directly; wake any that wait on it.
    this.wakeCongWaiters();
  }

  /** @internal */ congMapReceived(conn: RdsConnection, cleared: bigint): void {
    this.congGeneration++;
    // TCP notifies monitors with every port (the kernel passes an all-ones mask for TCP).
    const mask = conn.transport.exactCongMask === true ? cleared : 0xffffffffffffffffn;
    for (const s of this.bindTable.get(conn.laddr)?.values() ?? []) s.congestionUpdated(conn, mask);
    this.wakeCongWaiters();
  }

  /** @internal */ addCongWaiter(fn: () => void): void {
    this.congWaiters.add(fn);
  }

  /** @internal */ removeCongWaiter(fn: () => void): void {
    this.congWaiters.delete(fn);
  }

  /** @internal */ private wakeCongWaiters(): void {
    const fns = [...this.congWaiters];
    this.congWaiters.clear();
    for (const fn of fns) fn();
  }

  /** Closes every socket and connection and stops listening. The stack cannot be used afterwards. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    this.peerTable.close();
    await Promise.all(this.sockets().map((s) => s.close()));
    this.rxLimit.clear();
    // Unread messages were discarded with their sockets: acknowledge everything before the carriers end.
    for (const c of this.conns.values()) for (const p of c.paths) p.finalAck();
    for (const c of this.conns.values()) for (const p of c.paths) p.dispose();
    this.reclaimer.stop();
    // Hold the event loop while carriers close gracefully (bounded by the transports' linger).
    for (const t of this.transports.values()) t.setRef(true);
    await Promise.all([...this.transports.values()].map((t) => t.close()));
    await this.control?.close();
    this.control = null;
    if (RdsStack.defaultStack === this) RdsStack.defaultStack = null;
  }
}
