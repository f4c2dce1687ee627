import {
  RDS_CONN_UP,
  RDSSOCK_CAP_ACK,
  RDSSOCK_CAP_CONFIRM,
  RDSSOCK_CAP_FAILOVER,
  RDSSOCK_CAP_HEARTBEAT,
  RDSSOCK_CAP_LAZY_LANES,
  RDSSOCK_CAP_NO_HELLO,
  RDSSOCK_CAP_PATHS_SHIFT,
  RDSSOCK_CAP_RAILS,
} from '../constants.js';
import { decodeHandshake, parseExtensions, type HandshakeExtensions, type RdsExtension } from '../wire/extensions.js';
import { OFF_EXTHDR } from '../wire/header.js';
import type { RdsConnection } from './connection.js';
import { handshakeExtensionsOf, helloFrameOf, localCapsOf } from './handshake-frames.js';
import type { RdsConnPath } from './path.js';
import { hasRailSlots } from './ext/rail.js';
import { laneSawRestart, misplacedLane } from './lane-pairing.js';
import { RDS_CTR } from './stats.js';

/**
 * What the other end of a connection is: not known until its handshake arrives (or the wait for
 * it times out), then a kernel (no rds-socket capabilities) or an rds-socket node.
 */
export type PeerKind = 'unknown' | 'kernel' | 'rds-socket';

/**
 * The negotiator of one connection: the kernel's multipath probe and pong (rds_send_probe,
 * rds_recv_hs_exthdrs) and rds-socket's hello, what they say about the peer (its kind, its
 * capability word, SPORT_IDX, its generation and a restart) and the path count they settle. It
 * alone writes what is known about the peer; the rest of the core reads `peer`, `caps` and the
 * policies derived from them below.
 */
export class Handshake {
  private peerCaps = 0;
  private capsKnown = false;
  private peerSportIdx = false;
  /** A carrier taken for path 0 was a lane (misplacedLane); apart from peerSportIdx, which settle learns. */
  private misplacedSeen = false;
  /** What we know of the peer came from the handshake timeout, not from a frame of it. */
  private guessed = false;
  private genNum = 0;
  private pathsPongPending = false;
  /** The peer sent what only rds-socket sends (see spokeAsRdsSocket). */
  private spokeRdsSocket = false;
  private pingAnswered = false;
  /** Our last handshake frame went without NPATHS (see extensions): the peer was not told our count. */
  private npathsUnsaid = false;

  constructor(private readonly conn: RdsConnection) {}

  /** 'unknown' until a handshake (or its timeout) told us; then 'kernel' or 'rds-socket'. */
  get peer(): PeerKind {
    if (!this.capsKnown) return 'unknown';
    return this.peerCaps === 0 ? 'kernel' : 'rds-socket';
  }

  /** The capability word (RDSSOCK_CAP_*) the peer advertised; 0 for a kernel or while unknown. */
  get caps(): number {
    return this.peerCaps;
  }

  /** The peer encodes path indexes in its TCP source ports (SPORT_IDX). */
  get sportIdx(): boolean {
    return this.peerSportIdx;
  }

  /**
   * The peer pairs carriers by source port (SPORT_IDX, or a lane of it taken for path 0): until the
   * path count is settled only its path 0's carrier is taken (tcp-listen.ts pathForAccepted).
   */
  get pairsByPort(): boolean {
    return this.peerSportIdx || this.misplacedSeen;
  }

  /**
   * We raised NPATHS for a kernel that pairs by source port and wait for its pong to that probe:
   * lanes do not connect before it, so the kernel never pairs a lane while it runs one path.
   */
  get awaitingPathsPong(): boolean {
    return this.pathsPongPending;
  }

  /** The peer's generation from GEN_NUM; 0 while unknown. */
  get peerGenNum(): number {
    return this.genNum;
  }

  // ---- what we say ----

  /** rds-socket capabilities we advertise (handshake-frames.ts). */
  localCaps(): number {
    return localCapsOf(this.conn);
  }

  /**
   * NPATHS we advertise in the kernel-visible extension: 1, except to a kernel that sent SPORT_IDX
   * (7.0+), which pairs accepted connections by source port (spec §3.6) and gets our real count. A
   * kernel up to 6.19 pairs them in arrival order, so after reconnects its path j can meet our path
   * i and duplicate suppression breaks (spec §3.5): one path is always safe. rds-socket peers learn
   * our real count from the capability extension, and are always told 1 here.
   */
  advertisedPaths(): number {
    return this.kernelPairsBySport && this.conn.transport.mpathCapable
      ? Math.min(this.conn.stack.options.npaths, this.conn.pathSlots)
      : 1;
  }

  /** A kernel (no rds-socket capabilities) that sent SPORT_IDX: a 7.0+ kernel, which pairs by source port. */
  get kernelPairsBySport(): boolean {
    return this.peerSportIdx && this.peer === 'kernel';
  }

  /**
   * Extensions of our hello, probe and pong (handshakeExtensionsOf): NPATHS only once the peer is
   * known, over a multipath transport (why: handshakeExtensionsOf).
   */
  extensions(): RdsExtension[] {
    const sayPaths = this.capsKnown || !this.conn.transport.mpathCapable;
    this.npathsUnsaid = !sayPaths;
    return handshakeExtensionsOf(this.conn, sayPaths ? this.advertisedPaths() : null, this.localCaps());
  }

  /** The unsequenced hello that starts a lane's carrier (handshake-frames.ts). */
  helloFrame(): Buffer {
    return helloFrameOf(this.extensions());
  }

  /**
   * A path came UP. On path 0 we send the multipath probe, as a 7.0 kernel does after every
   * reconnect: the answer tells us the path count, the peer's generation (did it restart?) and
   * whether it is rds-socket (acks, heartbeats). A peer that never answers is treated as a kernel.
   */
  pathUp(cp: RdsConnPath): void {
    const conn = this.conn;
    if (conn.isLoopback || cp.index !== 0) return;
    if (conn.transport.peerKindHint?.(cp) === 'kernel') {
      if (!this.capsKnown || this.peerCaps !== 0) this.settle(0);
      return;
    }
    // A probe still waiting to be sent (queued ahead of the first data) serves this carrier too.
    if (cp.tx.lastProbe === null || cp.tx.lastProbe.sentAt !== 0 || cp.tx.lastProbe.done) this.queueProbe(cp);
    // A peer that never answers (an old kernel) still gets our messages on it, later.
    const ups = cp.upCount;
    if (this.acceptedPath0(cp)) setTimeout(() => cp.showCarrier(ups), conn.stack.options.handshakeTimeoutMs).unref();
    if (!this.capsKnown) {
      const t = setTimeout(() => {
        if (this.capsKnown) return;
        this.guessed = true;
        // A peer that already sent what no kernel sends is rds-socket, however late its answer
        // (sequenced, it may wait behind a backlog the peer resends to us): taken for a kernel,
        // its acknowledgements of messages it has not read would confirm them.
        if (this.spokeRdsSocket) {
          // Not waited for without end: its own probe may be refused by its budget for frames of
          // its own that we leave unacknowledged while we do not know it. Taken for what it showed
          // itself to be (it acknowledges; it may report reads, so confirmations wait for its
          // reports, never resolve on an h_ack), on one path; its answer, when it comes, settles
          // the rest.
          conn.stack.counters.add(RDS_CTR.handshake_wait_rds_socket);
          this.settle(RDSSOCK_CAP_ACK | RDSSOCK_CAP_CONFIRM | RDSSOCK_CAP_HEARTBEAT | RDSSOCK_CAP_NO_HELLO);
          return;
        }
        conn.stack.counters.add(RDS_CTR.handshake_timeout);
        this.settle(0);
      }, conn.stack.options.handshakeTimeoutMs);
      t.unref();
    }
  }

  /**
   * Path 0 of a connection we accept sends no socket's message before the peer's handshake is
   * known. A 7.x kernel that ran its lanes to our previous life redials them all at once; not
   * knowing yet that it pairs carriers by source port, we take each for path 0, and what went on
   * one that is a lane is numbered in that lane's sequence space at the kernel (reset to 0 by our
   * new GEN_NUM) and resent on the next: read once per carrier (the nemesis, seed 2029). The
   * probe goes; its pong either says the carrier is a lane (misplacedLane moves it there) or
   * settles the handshake. A kernel too sends nothing before its handshake settles the path count
   * (spec §3.4); the handshake timeout ends the wait.
   */
  holdsData(cp: RdsConnPath): boolean {
    if (!this.acceptedPath0(cp)) return false;
    // After a handshake that only timed out, also on each carrier until the peer shows on it that it
    // is path 0: a lane's carrier taken for path 0 got path 0's messages (1200 s replay, session 25).
    return !this.capsKnown || (this.guessed && !cp.carrierShown);
  }

  /** Path 0 of a connection we accept on a multipath transport: its carriers may be lanes. */
  private acceptedPath0(cp: RdsConnPath): boolean {
    const c = this.conn;
    return cp.index === 0 && !c.isInitiator && !c.isLoopback && c.transport.mpathCapable;
  }

  /**
   * The peer sent a frame no kernel sends (an RDS ack over a transport where kernels acknowledge
   * nothing, a read report): while its handshake is unknown, the wait for it no longer ends in
   * taking it for a kernel.
   */
  spokeAsRdsSocket(): void {
    this.spokeRdsSocket = true;
  }

  /**
   * Queues the multipath probe on path 0. An incarnation's first sequenced frame on a path 0 is
   * its probe (ahead of the first message), so a peer learns our generation before any of our
   * data, with no frame a kernel would count (the kernel's hello-less way; docs/reliability.md).
   */
  queueProbe(cp: RdsConnPath): void {
    // Refused only when the peer left maxOwnQueued of ours unacknowledged: the handshake times out.
    if (cp.tx.queueProbe(this.extensions()) !== null) this.conn.stack.counters.add(RDS_CTR.handshake_sent);
  }

  // ---- what the peer says ----

  /**
   * A pong arrived (accepted): what it says, and if we were waiting for the answer to a raised
   * NPATHS, this is it (a kernel answers probes in order).
   */
  pongReceived(header: Buffer): void {
    // A probe is a ping: a peer that answers one has pings enabled (answersPings).
    this.pingAnswered = true;
    const raised = this.pathsPongPending;
    this.frameReceived(header);
    if (raised) this.pathsPongPending = false;
  }

  /**
   * A hello, probe or pong arrived (accepted, not a duplicate): everything it says. With `cp`,
   * the carrier it came on (a hello, whose generation was not looked at before): false when that
   * carrier was dropped for it (see laneSawRestart) and nothing more of it may be taken.
   */
  frameReceived(header: Buffer, cp?: RdsConnPath): boolean {
    const hs = decodeHandshake(parseExtensions(header.subarray(OFF_EXTHDR)));
    this.conn.stack.counters.add(RDS_CTR.handshake_received);
    if (cp !== undefined && this.misplacedLane(cp, hs)) return false;
    if (!this.generation(hs.genNum, cp)) return false;
    this.settle(hs.rdsCaps ?? 0, hs);
    this.guessed = false;
    // A frame taken, without SPORT_IDX: the peer (a new one at this address) does not pair by port.
    if (hs.sportIdx !== true) this.misplacedSeen = false;
    return true;
  }

  /**
   * A probe or pong before its duplicate check: only its generation (the rest is processed once it
   * is accepted), so a restarted peer's first frames are not taken for old retransmissions.
   * False when the carrier was dropped for it (see laneSawRestart): the frame is not taken.
   */
  generationReceived(cp: RdsConnPath, header: Buffer): boolean {
    const hs = decodeHandshake(parseExtensions(header.subarray(OFF_EXTHDR)));
    if (this.misplacedLane(cp, hs) || !this.generation(hs.genNum, cp)) return false;
    // Acks on this carrier now name only sequence numbers of the peer's current life.
    cp.acks.helloReceived();
    return true;
  }

  /**
   * GEN_NUM: a new one after a known one means the peer restarted (its sequences start over).
   * False when `cp` is a lane we dialled and was dropped for it (see laneSawRestart).
   */
  private generation(genNum: number | undefined, cp?: RdsConnPath): boolean {
    if (genNum === undefined || genNum === 0) return true;
    const restarted = this.genNum !== 0 && this.genNum !== genNum;
    this.genNum = genNum;
    if (!restarted) return true;
    this.peerRestarted();
    return cp === undefined || !laneSawRestart(this.conn, cp);
  }

  /** misplacedLane (lane-pairing.ts), remembering that the peer pairs carriers by port. */
  private misplacedLane(cp: RdsConnPath, hs: HandshakeExtensions): boolean {
    const moved = misplacedLane(this.conn, cp, hs);
    if (moved === false) return false;
    this.misplacedSeen = true;
    if (moved === true) return true;
    // The frame that showed the lane is the peer's handshake: settled before the lane comes up,
    // so the lane starts as one to a known peer (a kernel gets no hello on it, whose NPATHS 1 it
    // would take); the frame itself is then taken on the lane.
    this.settle(hs.rdsCaps ?? 0, hs);
    moved.connectComplete();
    return true;
  }

  /** A kernel's connection made anew with the same GEN_NUM: see recv.ts (rds_tcp reloaded). */
  kernelRenumbered(): void {
    if (this.peer === 'kernel') this.peerRestarted();
  }

  /**
   * A restarted peer (new GEN_NUM): its sequence numbering starts over, so every path forgets
   * where it was. Our unacknowledged messages are kept and resent: the new incarnation never saw
   * them (the kernel flushes them instead, losing them).
   */
  private peerRestarted(): void {
    this.conn.stack.counters.add(RDS_CTR.peer_restarted);
    for (const p of this.conn.madePaths()) p.peerRestarted();
  }

  /** A forgotten connection made again: the generation its tombstone kept (see reclaim.ts). */
  restoreGeneration(genNum: number): void {
    this.genNum = genNum;
  }

  /**
   * What a handshake (or its absence: caps 0 after the timeout) says about the peer; settles the
   * path count and tells the paths and the transport when the capabilities changed.
   */
  settle(caps: number, hs: Pick<HandshakeExtensions, 'npaths' | 'sportIdx'> = {}): void {
    const conn = this.conn;
    const changed = !this.capsKnown || this.peerCaps !== caps;
    const held = this.holdsData(conn.path(0)!);
    this.peerCaps = caps;
    this.capsKnown = true;
    if (held) conn.path(0)!.tx.schedulePump();
    const learnedSportIdx = hs.sportIdx === true && !this.peerSportIdx;
    if (hs.sportIdx) this.peerSportIdx = true;
    // rds-socket peers say how many paths they run in their capabilities; a kernel's NPATHS is
    // answered with ours (see advertisedPaths): 1 unless the kernel pairs by source port.
    const peerPaths = (caps >>> RDSSOCK_CAP_PATHS_SHIFT) & 0xf;
    const n =
      peerPaths > 0 && conn.transport.mpathCapable
        ? Math.min(conn.stack.options.npaths, peerPaths, conn.pathSlots)
        : Math.max(1, Math.min(this.advertisedPaths(), hs.npaths ?? 1));
    // A kernel that just told us it pairs by source port has so far seen NPATHS = 1 from us, or
    // none: a new probe tells it our real count (7.x accepts the increase), and lanes wait for its
    // pong. Any other kernel our frames said no count to gets one too: the count it kept may be
    // one we do not run (a kernel peer that had our address before us, or npaths 1 here).
    if (learnedSportIdx && caps === 0 && this.advertisedPaths() > 1) {
      this.pathsPongPending = true;
      if (!conn.isLoopback && conn.path(0)!.state === RDS_CONN_UP) this.queueProbe(conn.path(0)!);
    } else if (caps === 0 && this.npathsUnsaid) {
      // After this turn: settled by the kernel's probe, our pong (queued right after) says it.
      queueMicrotask(() => this.tellPaths());
    }
    conn.setPathCount(n);
    // A kernel is never acknowledged: drop what was tracked while we did not know, but keep what a
    // peer taken for a kernel by mistake (its answer late) must still hear: its refusals, and that
    // messages went untracked (RxAckTracker.pause). (Paths not made yet start empty and idle.)
    if (!this.tracksReceipts) for (const p of conn.madePaths()) p.acks.rx.pause();
    if (changed) for (const p of conn.madePaths()) p.capabilitiesChanged();
    // An older rds-socket peer acknowledges nothing on a carrier before our hello.
    if (changed && this.wantsLegacyHello && conn.path(0)!.state === RDS_CONN_UP) conn.path(0)!.sendLegacyHello();
    conn.transport.capabilitiesChanged?.(conn);
    // The dialling side opens the rails declared to this peer (if it runs them).
    conn.stack.rails.settled(conn);
  }

  /** A kernel our frames gave no count (see extensions) gets one, unless a frame since said it. */
  private tellPaths(): void {
    const cp0 = this.conn.path(0);
    if (!this.npathsUnsaid || this.conn.isLoopback || cp0?.state !== RDS_CONN_UP) return;
    this.queueProbe(cp0);
  }

  // ---- what follows from it (read by paths, receive and transports) ----

  /** RDS-level acks: both sides are rds-socket and the stack allows it, or the transport needs them. */
  get ackMode(): boolean {
    const conn = this.conn;
    if (conn.isLoopback) return false;
    return (
      conn.transport.alwaysAcks === true || ((this.peerCaps & RDSSOCK_CAP_ACK) !== 0 && conn.stack.options.rdsAcks)
    );
  }

  /** A kernel on a transport where acks are part of the wire: it sends no hello, yet must be acked. */
  get acksWithoutHello(): boolean {
    return this.conn.transport.alwaysAcks === true && this.peer === 'kernel';
  }

  /**
   * Confirmations wait for the peer's read cursor (RDSSOCK_EXTHDR_READ), not its h_ack: an
   * rds-socket peer that advertised RDSSOCK_CAP_CONFIRM, with acks on.
   */
  get confirmsReads(): boolean {
    return (this.peerCaps & RDSSOCK_CAP_CONFIRM) !== 0 && this.ackMode;
  }

  /**
   * An older rds-socket peer (no RDSSOCK_CAP_NO_HELLO): it acknowledges nothing on a carrier
   * until our unsequenced hello arrived there, so it still gets one. Never a kernel.
   */
  get wantsLegacyHello(): boolean {
    return this.peer === 'rds-socket' && (this.peerCaps & RDSSOCK_CAP_NO_HELLO) === 0 && !this.conn.isLoopback;
  }

  /**
   * Lanes > 0 open on demand (both sides advertise RDSSOCK_CAP_LAZY_LANES): a lane
   * connects when a socket that uses it has something to send, or (initiator) when the peer pokes
   * for it. Otherwise the initiator opens every lane once the path count is settled.
   */
  get lazyLanes(): boolean {
    return (this.peerCaps & RDSSOCK_CAP_LAZY_LANES) !== 0 && (this.localCaps() & RDSSOCK_CAP_LAZY_LANES) !== 0;
  }

  /**
   * The peer has answered a ping on this connection, our multipath probe or a liveness ping
   * (ext/heartbeat.ts): a kernel with net.rds.ping_enable = 0 answers neither.
   */
  get answersPings(): boolean {
    return this.pingAnswered;
  }

  notePingAnswered(): void {
    this.pingAnswered = true;
  }

  /** The peer answers heartbeats. */
  get heartbeatMode(): boolean {
    return (this.peerCaps & RDSSOCK_CAP_HEARTBEAT) !== 0 && !this.conn.isLoopback;
  }

  /**
   * Whether received messages are tracked for acknowledgement: only while we may send RDS acks
   * (an rds-socket peer, or one whose handshake has not arrived yet). Never over loopback, never
   * for a kernel, so the tracker cannot grow with traffic nobody acknowledges.
   */
  get tracksReceipts(): boolean {
    return !this.conn.isLoopback && (this.peer === 'unknown' || this.ackMode);
  }

  /**
   * Whether a dead path's messages may move to a live one: only between rds-socket peers that
   * acknowledge messages (so we know what the peer has) and suppress duplicates across paths.
   * Never with a kernel, whose per-path sequence rules forbid it.
   */
  get failoverAllowed(): boolean {
    const conn = this.conn;
    return (
      this.ackMode &&
      (((this.peerCaps & RDSSOCK_CAP_FAILOVER) !== 0 && conn.npaths > 1) ||
        ((this.peerCaps & RDSSOCK_CAP_RAILS) !== 0 && hasRailSlots(conn))) &&
      Number.isFinite(conn.stack.options.failoverGraceMs)
    );
  }

  /** Whether a transport-level acknowledgement (TCP's) may release messages: kernel peers only. */
  get releaseOnTransportAck(): boolean {
    return this.peer !== 'unknown' && !this.ackMode;
  }
}
