import { RDS_CONN_UP } from '../constants.js';
import { compareAddresses } from './address.js';
import type { CongMap } from './cong-map.js';
import { ConnFailover } from './ext/failover.js';
import { Handshake } from './handshake.js';
import { type ConnState, RdsConnPath } from './path.js';
import { pickPath } from './ext/path-policy.js';
import type { RdsStack } from './stack.js';
import type { RdsTransport } from './transport.js';
import { RDS_CTR } from './stats.js';

/**
 * What one node knows about one peer over one transport (struct rds_connection): the peer's
 * congestion map, the negotiated number of paths, generation numbers, and the paths themselves.
 * Connections are shared by every socket of the stack and live as long as the stack.
 */
export class RdsConnection {
  /**
   * The paths by index: path 0 from the start, a lane > 0 or rail slot once something uses it
   * (path()). Until then it is a hole: a fresh path holds nothing and does nothing, so an idle
   * peer with 8 lanes negotiated keeps only the path objects (~1.2 KiB each) of the lanes it used.
   */
  private readonly slots: (RdsConnPath | undefined)[];
  private pathCount = 0;
  /**
   * The negotiator: hello, probe and pong, and all that is known about the peer from them (its
   * kind, generation, capabilities and what they allow: read there, under one name). @internal
   */
  readonly handshake: Handshake = new Handshake(this);
  /** The peer's congestion map (for a loopback connection, the destination address's own map). */
  readonly peerCong: CongMap;
  /** True when this side has the numerically smaller address (it initiates TCP). */
  readonly isInitiator: boolean;
  readonly isLoopback: boolean;
  private changedAt = Date.now();
  private upAt = 0;
  private heard = 0;
  private forgotten = false;
  /**
   * Our map changed since the peer was last sent it (the kernel's c_map_queued, also per
   * connection): path 0 sends it, or any path that is up while path 0 is not (rails and lanes
   * keep carrying traffic while path 0 is down, and an rds-socket peer's path 0 is not redialled
   * for nothing: an update left for it alone would never leave).
   */
  private mapQueued = false;
  /** Failover between this connection's paths (rds-socket peers only). */
  readonly failover = new ConnFailover(this);

  constructor(
    readonly stack: RdsStack,
    readonly laddr: string,
    readonly faddr: string,
    readonly transport: RdsTransport,
    maxPaths: number,
    /** c_tos: the TOS the connection carries (the transport's map of its sockets'); part of its key. */
    readonly tos = 0,
  ) {
    this.peerCong = stack.congMap(faddr);
    this.isInitiator = compareAddresses(laddr, faddr) < 0;
    this.isLoopback = transport.local === true;
    this.slots = Array.from({ length: maxPaths }, (_, i) => (i === 0 ? new RdsConnPath(this, 0) : undefined));
  }

  /**
   * Every path, lanes then rail slots, each made now if it was not yet. For users, tests and
   * tools; the stack itself goes through path(), pathIf() and madePaths(), so a lane nobody uses
   * costs nothing.
   */
  get paths(): RdsConnPath[] {
    for (let i = 1; i < this.slots.length; i++) this.path(i);
    return this.slots as RdsConnPath[];
  }

  /** How many path slots there are: the lanes the transport can run, then the rail slots. */
  get pathSlots(): number {
    return this.slots.length;
  }

  /** Path `index`, made on first use; undefined outside the slots. */
  path(index: number): RdsConnPath | undefined {
    const p = this.slots[index];
    if (p !== undefined || !(Number.isInteger(index) && index >= 0 && index < this.slots.length)) return p;
    const made = new RdsConnPath(this, index);
    this.slots[index] = made;
    // A lane made after the fan-out waits where it would have waited had it existed then.
    this.failover.laneMade(made);
    return made;
  }

  /** Path `index` if it was made (a path not made is DOWN, empty and idle). */
  pathIf(index: number): RdsConnPath | undefined {
    return this.slots[index];
  }

  /** The paths made so far, in index order: what there is to count, show, time or stop. */
  madePaths(): RdsConnPath[] {
    return this.slots.filter((p): p is RdsConnPath => p !== undefined);
  }

  /** Rail slot `index` (rail.ts), the slots before it left to be made when used. @internal */
  railSlot(index: number): RdsConnPath {
    if (this.slots.length <= index) this.slots.length = index + 1;
    return this.path(index)!;
  }

  /** 0 until a handshake says otherwise (spec §3.2); then the agreed number of paths. */
  get npaths(): number {
    return this.pathCount;
  }
  /** Last time any path changed state (ms since the epoch): idleness is measured from it. */
  get stateChangedAt(): number {
    return this.changedAt;
  }
  /** Last time a path of this connection was UP (left UP or came UP); 0 = never. */
  get lastUpAt(): number {
    return this.upAt;
  }
  /** Last time an accepted carrier from this peer delivered a complete frame; 0 = never (a stranger). */
  get heardAt(): number {
    return this.heard;
  }
  /** The stack forgot this connection (idle, nothing queued): holders must look it up again. */
  get reclaimed(): boolean {
    return this.forgotten;
  }

  /** One of its paths moved from `from` to `to` (RdsConnPath.transition). @internal */
  pathStateChanged(from: ConnState, to: ConnState): void {
    this.changedAt = Date.now();
    if (from === 'UP' || to === 'UP') this.upAt = this.changedAt;
  }

  /** A carrier from the peer delivered a complete frame (or closed after doing so): the peer identified itself. @internal */
  heardFrom(): void {
    this.heard = Date.now();
  }

  /** The stack forgot it (reclaim.ts). @internal */
  markReclaimed(): void {
    this.forgotten = true;
  }

  /** The local map of this connection's address changed: send it to the peer (cong.ts). */
  queueCongUpdate(): void {
    this.mapQueued = true;
    this.stack.counters.add(RDS_CTR.cong_update_queued);
    this.kickMapCarrier();
  }

  /** Whether `cp`'s pump sends the queued map now (taken if so): path 0, or any path while path 0 is not up. @internal */
  takeCongUpdate(cp: RdsConnPath): boolean {
    if (!this.mapQueued || (cp.index !== 0 && this.slots[0]!.state === RDS_CONN_UP)) return false;
    this.mapQueued = false;
    return true;
  }

  /** A queued map waits: wake the pump of the path that will send it (path 0 left UP: another one). @internal */
  kickMapCarrier(): void {
    if (!this.mapQueued) return;
    const p0 = this.slots[0]!;
    if (p0.state === RDS_CONN_UP) return p0.tx.schedulePump();
    for (const p of this.slots)
      if (p !== undefined && p.state === RDS_CONN_UP) {
        p.tx.schedulePump();
        return;
      }
  }

  /** Application messages wait to be sent or acknowledged on some path (probes and pongs do not count). */
  hasPendingData(): boolean {
    for (const p of this.slots) if (p?.tx.hasPendingData()) return true;
    return false;
  }

  anyPathUp(): boolean {
    for (const p of this.slots) if (p !== undefined && p.state === RDS_CONN_UP) return true;
    return false;
  }

  /**
   * Worth (re)connecting to: we have messages for the peer, a path is up, or one was up within
   * peerIdleTimeoutMs. Otherwise the peer connects or pokes when it has something for us.
   */
  wantsPeer(now = Date.now()): boolean {
    return this.anyPathUp() || now - this.lastUpAt < this.stack.options.peerIdleTimeoutMs || this.hasPendingData();
  }

  /**
   * A known peer gets in past a flood of strangers: one we have messages for, or one that has
   * identified itself (sent a complete frame) and was up within peerIdleTimeoutMs.
   */
  isKnownPeer(now = Date.now()): boolean {
    if (this.heardAt > 0 && (this.anyPathUp() || now - this.lastUpAt < this.stack.options.peerIdleTimeoutMs))
      return true;
    return this.hasPendingData();
  }

  get key(): string {
    return RdsConnection.key(this.laddr, this.faddr, this.transport.name, this.tos);
  }

  static key(laddr: string, faddr: string, transport: string, tos = 0): string {
    return `${laddr}|${faddr}|${transport}|${tos}`;
  }

  /**
   * The path a socket's messages use: fixed per bound port so one socket's messages to one peer
   * stay in order. Path 0 until multipath is negotiated (a sender never waits for the handshake).
   * Between rds-socket peers the stack's path policy may spread sockets over lanes and rails.
   */
  pathFor(sport: number): RdsConnPath {
    // The path policy (path-policy.ts): with 'hash' and no rails, the choice above, unchanged.
    return pickPath(this, sport);
  }

  /** A handshake settled the path count. Going from one path to several starts multipath. */
  setPathCount(n: number): void {
    const before = this.pathCount;
    this.pathCount = n;
    if (n > 1 && before <= 1) {
      // Lanes wait until lane 0 has delivered what was queued before the fan-out, so no socket's
      // message on its new lane overtakes one still on lane 0 (spec §3.3).
      const p0 = this.path(0)!;
      this.failover.holdLanesBehind(p0, p0.tx.nextTxSeq - 1, n);
      this.stack.counters.add(RDS_CTR.mprds_fanout);
    }
    this.openLanes();
  }

  /**
   * rds_start_mprds: the initiating side opens lanes 1..n-1, but only while path 0 is UP and the
   * peer has answered our probe on it: then it knows our path count and SPORT_IDX and pairs each
   * lane by source port. Before that it could take a lane connection for path 0.
   */
  lanesMayConnect(): boolean {
    const p0 = this.path(0)!;
    return this.npaths > 1 && p0.state === RDS_CONN_UP && p0.peerPongSeen && !this.handshake.awaitingPathsPong;
  }

  /**
   * Opens the lanes that may open now. With lazyLanes only those wanted (see RdsConnPath.laneWanted)
   * or with messages queued: an idle peer costs one carrier, not npaths. The larger side connects
   * nothing itself: it pokes for the lanes it has messages for (RdsConnPath.connectIfDown).
   */
  openLanes(): void {
    if (!this.lanesMayConnect()) return;
    const lazy = this.handshake.lazyLanes;
    if (!lazy && !this.transport.initiates(this.path(0)!)) return;
    for (let i = 1; i < this.npaths; i++) {
      // On demand, a lane not made yet is neither wanted nor has messages.
      const p = lazy ? this.pathIf(i) : this.path(i);
      if (p !== undefined && (!lazy || p.laneWanted || p.tx.sendQueue.length > 0)) p.connectIfDown();
    }
  }
}
