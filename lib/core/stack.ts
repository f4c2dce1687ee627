import { randomInt } from 'node:crypto';
import {
  type HostNodeHandle,
  type HostWing,
  loadedHostWing,
  registerHostWing,
  type ServeOptions,
} from './ext/host-hooks.js';
import { EventEmitter } from 'eventemitter3';
import { RDS_MPATH_WORKERS, RDS_TRANS_LOOP } from '../constants.js';
import { BindTable } from './bind.js';
import { CongTable } from './cong.js';
import type { CongMap } from './cong-map.js';
import type { RdsConnection } from './connection.js';
import type { RdsConnPath } from './path.js';
import { recvIncoming } from './recv.js';
import { controlAnswer } from './ext/control-commands.js';
import { ControlEndpoint } from './ext/control.js';
import {
  controlFromEnv,
  resolveStackOptions,
  warnUnhandledError,
  type RdsStackOptions,
  type ResolvedStackOptions,
} from './options.js';
import { parseCidr } from './address.js';
import type { PeerInfo, PeerState } from './ext/peer-state.js';
import { PathEvents } from './ext/stack-events.js';
import { RdsStats } from './stats.js';
import { WireSlab } from './wire-slab.js';
import { RxLimiter } from './ext/rx-limit.js';
import { ConnTable } from './conn-table.js';
import { connectionsInfo, peersInfo, stackInfo, type StackInfo } from './info.js';
import type { RdsTransport } from './transport.js';
import { TransportRegistry, transportHostOf } from './transport-registry.js';
import type { ConnectionInfo, RdsStackEvents, Receipt, StackReader, StackReport } from './types.js';
import type { RdsCounterName } from './stats.js';
import { StackRails, type RailSpec } from './ext/rail.js';
import { checkPathPolicy, PathPolicies, type PathPolicy } from './ext/path-policy.js';
import { resetPathFigures } from './ext/path-stats.js';
import { RxTraceClock } from './rx-trace.js';

// The stack composes the parts that do the kernel's jobs: the bind table (bind.ts), the
// connections (connection.ts, each with its negotiator, handshake.ts), the options (options.ts),
// rds-info's views (info.ts), the path and peer events with peer reachability (stack-events.ts,
// peer-state.ts), the transports (transport-registry.ts), the connection table (conn-table.ts),
// delivery to sockets (recv.ts). Its own code is the glue: the congestion maps and 'error'. Types
// users see live in types.ts and are re-exported here, where they were first published.
export type { RdsStackOptions, ResolvedStackOptions } from './options.js';
export type {
  RdsMessage,
  MessageInfo,
  SocketInfo,
  PathInfo,
  ConnectionInfo,
  PathStateEvent,
  RdsStackEvents,
  StackReport,
  StackReader,
} from './types.js';
/** @internal */ export type { Receipt, BoundSocket } from './types.js';
export type { RdsTransportHost } from './transport.js';

const defaultTransportFactories: (() => RdsTransport)[] = [];

/**
 * One RDS node inside this process: the bind table, the connections to every peer (shared by
 * all sockets), the congestion maps and the counters. Sockets made without a stack use the
 * default one, so a process is one node unless it asks for more.
 */
export class RdsStack extends EventEmitter<RdsStackEvents> implements StackReader {
  /** @internal */ private static defaultStack: RdsStack | null = null;

  /** The options in force: what the constructor was given, defaults for the rest (read-only). */
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
  /** SO_RDS_MSG_RXPATH_LATENCY's stamps of the frame being delivered (taken while a socket traces). @internal */
  readonly rxTrace = new RxTraceClock();

  /** The transports, each attached with what it may see of the stack (transport-registry.ts). @internal */
  readonly transports = new TransportRegistry(transportHostOf(this));
  /**
   * Which socket holds each (address, port) (bind.ts): sockets reserve and release their ports
   * there, transports ask whether a port is bound or an address is ours. @internal
   */
  readonly binds = new BindTable();
  /** The connections to every peer (conn-table.ts). @internal */
  private readonly conns: ConnTable;
  /** The congestion maps and the senders waiting on them. @internal */
  private readonly cong = new CongTable();
  /** @internal */ private openSockets = 0;
  /** @internal */ private isClosing = false;
  /** @internal */ private isReferenced = false;
  /** The events of paths and peers, and the peers' reachability they feed (stack-events.ts). @internal */
  readonly pathEvents: PathEvents;
  /** The allowlist (allowPeers); everyone by default. @internal */
  readonly peerAllowed: (address: string) => boolean = () => true;
  /** Declared rails (rail.ts). @internal */
  readonly rails: StackRails = new StackRails(this, () => this.conns.values());
  /** The path policy and its per-peer overrides (path-policy.ts). @internal */
  readonly pathPolicies: PathPolicies;

  /** Registers the transports every new stack gets; the package entry point supplies them. @internal */
  static setDefaultTransports(factories: (() => RdsTransport)[]): void {
    defaultTransportFactories.splice(0, defaultTransportFactories.length, ...factories);
  }

  /** The host node (lib/host) serve() and attach() use, registered by the package entry point. @internal */
  static useHostWing(wing: HostWing): void {
    registerHostWing(wing);
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

  /**
   * Hosts this stack as the node for every process and thread of the host: they attach through a
   * Unix socket (see docs/host-node.md, "Processes, threads and the host node").
   */
  serve(opts: ServeOptions = {}): Promise<HostNodeHandle> {
    return loadedHostWing().serve(this, opts);
  }

  /** A stack whose sockets live in the host node at `path` (default: $RDS_SOCKET_NODE, else this user's node, else the system node's /run/rds-socket/node.sock). */
  static attach(path?: string): Promise<RdsStack> {
    return loadedHostWing().attach(path);
  }

  /** @internal */ private node: HostNodeHandle | null = null;

  /** The node being served by serve(), closed with the stack. @internal */
  get hostNode(): HostNodeHandle | null {
    return this.node;
  }

  /** serve() has opened the host node (`node`), or it has closed (null). @internal */
  hostNodeChanged(node: HostNodeHandle | null): void {
    this.node = node;
  }

  /** close() has begun. @internal */
  get closing(): boolean {
    return this.isClosing;
  }

  /** Some socket is open: the stack holds the event loop. @internal */
  get referenced(): boolean {
    return this.isReferenced;
  }

  /** close() begins: false if it already had (a second close does nothing). @internal */
  protected beginClose(): boolean {
    if (this.isClosing) return false;
    this.isClosing = true;
    return true;
  }

  constructor(opts: RdsStackOptions = {}) {
    super();
    this.options = resolveStackOptions(opts);
    this.pathPolicies = new PathPolicies(
      opts.pathPolicy === undefined ? 'hash' : checkPathPolicy(opts.pathPolicy),
      opts.peerPathPolicies ?? {},
    );
    const rails = (opts.rails ?? []).map((r) => StackRails.check(r));
    this.rxLimit = new RxLimiter(this.options, this.counters);
    this.pathEvents = new PathEvents(this, this.options.peerDownMs, (a) => this.conns.refersTo(a));
    this.conns = new ConnTable(this, (c) => this.connForgotten(c));
    if (opts.allowPeers !== undefined) {
      const tests = opts.allowPeers.map((p) => parseCidr(String(p)));
      this.peerAllowed = (a) => tests.some((t) => t(a));
    }
    for (const t of opts.transports ?? defaultTransportFactories.map((f) => f())) this.transports.register(t);
    // Refused here, not in an 'error' later: a TLS stack carries no rails.
    if (rails.length > 0) this.rails.railTransport();
    for (const r of rails) this.addRail(r).catch((e) => this.emit('error', e as Error));
    if (opts.control) {
      this.openControl(typeof opts.control === 'string' ? opts.control : undefined).catch((e) =>
        this.emit('error', e as Error),
      );
    }
  }

  /** Like Node's EventEmitter, an 'error' nobody listens for is not dropped (eventemitter3 would): it becomes a process warning. */
  override emit<T extends EventEmitter.EventNames<RdsStackEvents>>(
    event: T,
    ...args: EventEmitter.EventArgs<RdsStackEvents, T>
  ): boolean {
    if (event === 'error' && this.listenerCount('error') === 0) {
      warnUnhandledError(args[0]);
      return false;
    }
    return super.emit(event, ...args);
  }

  // ---- sockets keep the process alive, an idle stack does not ----

  /** @internal */ socketOpened(): void {
    if (this.openSockets++ === 0) this.setRef(true);
  }

  /** @internal */ socketClosed(): void {
    if (--this.openSockets === 0) this.setRef(false);
  }

  /** @internal */ private setRef(ref: boolean): void {
    this.isReferenced = ref;
    this.transports.setRef(ref);
    this.conns.setRef(ref);
  }

  // ---- connections (connection.c) ----

  /** The connection (laddr, faddr, transport, tos), made on first use. @internal */
  connFor(laddr: string, faddr: string, transport: RdsTransport, tos = 0): RdsConnection {
    return this.conns.get(laddr, faddr, transport, tos);
  }

  /** The connection (laddr, faddr, transport, tos) if there is one; never makes one (admission checks; see TransportHost). @internal */
  findConn(laddr: string, faddr: string, transport: RdsTransport, tos = 0): RdsConnection | undefined {
    return this.conns.find(laddr, faddr, transport, tos);
  }

  /**
   * Forgets every idle connection now (all paths down for peerIdleTimeoutMs, nothing queued or
   * unacknowledged for the peer), as the periodic sweep does; returns how many.
   */
  reclaimIdleConnections(): number {
    return this.conns.sweep();
  }

  /** An idle connection was forgotten: the peer's map goes with its last one (ours stay while anything is bound to them). @internal */
  private connForgotten(c: RdsConnection): void {
    if (!this.binds.hasAddress(c.faddr) && !this.conns.refersTo(c.faddr, true)) this.cong.forget(c.faddr);
  }

  /**
   * The connection a socket bound with `transport` and keeping `tos` uses to reach faddr:
   * loopback if faddr is ours (keyed by the TOS too, as the kernel's rds_conn_create_outgoing). @internal
   */
  connForSend(laddr: string, faddr: string, transport: RdsTransport, tos = 0): RdsConnection {
    if (this.binds.hasAddress(faddr)) {
      const loop = this.transports.byType(RDS_TRANS_LOOP);
      if (loop) return this.connFor(laddr, faddr, loop, tos);
    }
    return this.connFor(laddr, faddr, transport, tos);
  }

  /** @internal */ private control: ControlEndpoint | null = null;

  /** Opens the rds-info control endpoint (see the `control` option); returns its path. */
  async openControl(path?: string): Promise<string> {
    if (this.control === null) this.control = await ControlEndpoint.open((req) => controlAnswer(this, req), path);
    return this.control.path;
  }

  get controlPath(): string | null {
    return this.control?.path ?? null;
  }

  /** Everything rds-info can show, as plain data (info.ts). @internal */
  info(): StackInfo {
    return stackInfo(this.conns.values(), this.counters, this.binds.all());
  }

  /**
   * Everything rds-info shows: counters named as the kernel names them, plus per connection and
   * per path figures. Cheap enough to poll every second.
   */
  stats(): { counters: Record<RdsCounterName, number>; connections: ConnectionInfo[] } {
    return { counters: this.counters.snapshot(), connections: this.connections() };
  }

  /** Every connection and its paths: state, next_tx_seq, next_rx_seq, queues. */
  connections(): ConnectionInfo[] {
    return connectionsInfo(this.conns.values());
  }

  // ---- peer reachability (peer-state.ts, kept by stack-events.ts) ----

  /** A socket is about to send to `address`: its reachability entry (made if new). @internal */
  peerEntry(address: string): PeerState {
    return this.pathEvents.peers.entry(address);
  }

  /** How long `address` has had no path UP (0 if it has one, or is unknown). @internal */
  peerUnreachableMs(address: string): number {
    return this.pathEvents.peers.get(address)?.unreachableMs() ?? 0;
  }

  /** Every peer this node has tried to reach or heard from, with its reachability and queue. */
  peers(): PeerInfo[] {
    return peersInfo(this.conns.values(), this.pathEvents.peers);
  }

  /**
   * Counters, connections and peers at one moment, on any stack: read here on a stack of this
   * process, asked of the node on an attached one (RdsStack.attach()), whose synchronous
   * stats(), connections(), peers() and counters cannot answer across processes.
   */
  report(): Promise<StackReport> {
    return Promise.resolve(this.reportNow());
  }

  /** report() of this process's stack, synchronously (the host node answers attached stacks with it). @internal */
  reportNow(): StackReport {
    return { counters: this.counters.snapshot(), connections: this.connections(), peers: this.peers() };
  }

  // ---- receive side ----

  /** rds_recv_incoming (recv.ts). @internal */
  recvIncoming(cp: RdsConnPath, header: Buffer, payload: Buffer, localReceipt?: Receipt): void {
    recvIncoming(this, cp, header, payload, localReceipt);
  }

  // ---- congestion (cong.ts) ----

  /** Bumped on every received map: poll() reports POLLWRBAND once after each. @internal */
  get congGeneration(): number {
    return this.cong.generation;
  }

  /** The map of an address: ours if it is local, the peer's copy otherwise. @internal */
  congMap(address: string): CongMap {
    return this.cong.map(address);
  }

  /** A local port's bit flipped: every connection from that address sends the full map. @internal */
  localCongChanged(laddr: string): void {
    this.cong.localChanged(laddr, this.conns.values());
  }

  /** @internal */ congMapReceived(conn: RdsConnection, cleared: bigint): void {
    this.cong.received(conn, cleared, this.binds.at(conn.laddr));
  }

  /** @internal */ addCongWaiter(fn: () => void): void {
    this.cong.addWaiter(fn);
  }

  /** @internal */ removeCongWaiter(fn: () => void): void {
    this.cong.removeWaiter(fn);
  }

  // ---- several links to one peer: rails, path policies, operator controls (docs/rails.md) ----

  /**
   * Declares a rail: `peer` (an RDS address) is also reachable from our address `local` to its
   * address `remote`. Both nodes declare it (each from its side); the rail carries traffic once
   * both ends agreed in the rail hello. Resolves once we listen on `local`. rds-socket peers over
   * TCP only; a kernel never sees a rail.
   */
  addRail(rail: RailSpec): Promise<void> {
    return this.rails.add(rail);
  }

  /** Removes a rail: its paths close, their messages move to a live path. False if not declared. */
  removeRail(rail: RailSpec): boolean {
    return this.rails.remove(rail);
  }

  /** The declared rails. */
  listRails(): RailSpec[] {
    return this.rails.list();
  }

  /** Sets the path policy for one peer (null: back to the stack's pathPolicy), or for all (no peer). */
  setPathPolicy(policy: PathPolicy, peer?: string): void;
  setPathPolicy(policy: null, peer: string): void;
  setPathPolicy(policy: PathPolicy | null, peer?: string): void {
    if (peer === undefined) this.pathPolicies.base = checkPathPolicy(policy);
    else this.pathPolicies.set(peer, policy);
  }

  /** The path policy in force for `peer`. */
  pathPolicy(peer: string): PathPolicy {
    return this.pathPolicies.for(peer);
  }

  /** Drops path `index` to `peer` and lets it connect again (clears disconnect() and an ERROR from maxReconnectAttempts). */
  reconnectPath(peer: string, index: number, localAddress?: string): void {
    this.conns.path(peer, index, localAddress).control.reconnect();
  }

  /** Drops path `index` to `peer` and keeps it down until reconnectPath(); its messages move to a live path after failoverGraceMs. */
  disconnectPath(peer: string, index: number, localAddress?: string): void {
    this.conns.path(peer, index, localAddress).control.disconnect('disconnected by the operator');
  }

  /** Sets every counter and every path's figures (stats(), connections(), rds-info) back to zero. */
  resetStats(): void {
    this.counters.reset();
    for (const c of this.conns.values())
      for (const p of c.madePaths()) {
        resetPathFigures(p);
        c.transport.resetPathStats?.(p);
      }
  }

  /** Closes every socket and connection and stops listening. The stack cannot be used afterwards. */
  async close(): Promise<void> {
    if (!this.beginClose()) return;
    await this.node?.close();
    this.pathEvents.peers.close();
    await Promise.all(this.binds.all().map((s) => s.close()));
    this.rxLimit.clear();
    this.conns.close();
    await this.transports.close();
    await this.control?.close();
    this.control = null;
    if (RdsStack.defaultStack === this) RdsStack.defaultStack = null;
  }
}
