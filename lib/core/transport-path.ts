import type { CarrierKind } from './carrier.js';
import type { PeerKind } from './handshake.js';
import type { RdsConnPath } from './path.js';

/**
 * What a transport may see of a path (the kernel's struct rds_conn_path as rds_tcp and rds_ib use
 * it), and nothing more. The core hands transports its RdsConnPath typed as this view; the path's
 * state machine, reconnect backoff, parts and counters stay the core's. Grouped by concern:
 * identity, carrier slot, state moves, the send queue it drains, receive, handshake facts.
 */
export interface TransportPath {
  /** The connection this path is a lane (0..7) or rail (8 and up) of. */
  readonly conn: TransportConn;
  /** Lane (0 = the first, the only one a kernel without multipath runs) or rail slot. */
  readonly index: number;
  /** RDS_CONN_*: transports check it before they send or take a carrier. */
  readonly state: number;

  // ---- the carrier slot ----

  /** The transport's per-path carrier object of `kind`, made on first use (see CarrierKind). */
  carrier<C>(kind: CarrierKind<C>): C;
  /** The carrier object of `kind` if one was made. */
  carrierIf<C>(kind: CarrierKind<C>): C | null;
  /**
   * The transport stopped reading this path's carrier (rxPause), or reads again: the peer's
   * silence is then ours, and is not held against it (heartbeats).
   */
  readonly readPaused: boolean;
  /** Says the transport stopped reading this path's carrier (true) or reads it again (false). */
  setReadPaused(paused: boolean): void;

  // ---- state moves (the transport's reports; the path decides) ----

  /** The outgoing carrier is established (initiator), or an accepted one is taken. */
  connectComplete(): void;
  /** A connect attempt failed before reaching UP. */
  connectFailed(): void;
  /** A transport without an ordering rule (IB) accepted an incoming connection for this DOWN path. */
  acceptIncoming(): void;
  /** The carrier failed or misbehaved (rds_conn_path_drop). */
  drop(reason: string): void;
  /** The carrier failed or closed: a connect that had not completed failed, a live one is dropped. */
  carrierLost(reason: string): void;
  /** The peer showed it is back (it poked us): connect now rather than wait out the backoff. */
  connectNow(): void;
  /** The peer (larger address, lanes on demand) poked for this lane: connect it now. */
  pokedFor(): void;

  // ---- the send side and receive side ----

  /** The path's send queue as the transport drains it. */
  readonly tx: TransportPathSend;
  /** The transport heard from the peer on this carrier (before it hands up what one read brought). */
  readonly heartbeat: TransportPathHeartbeat;
  /** Acknowledgement pacing: what the transport tells it about reads. */
  readonly acks: TransportPathAcks;
}

/** The send queue of a path (PathSend), as a transport sees it. */
export interface TransportPathSend {
  /** Messages waiting to be sent (the queue's pump hands them to xmit; the transport only counts them). */
  readonly sendQueue: { readonly length: number };
  /** The peer has every message through `seq` (transport-level acknowledgement, IB's h_ack). */
  ackThrough(seq: number, receiverConfirms?: boolean): void;
  /** The carrier can take more after xmit returned false. */
  kick(): void;
  /** The local congestion map changed: send it before the next message (IB's map on a new carrier). */
  queueCongUpdate(): void;
}

/** A path's heartbeat (rds-socket peers), as a transport sees it. */
export interface TransportPathHeartbeat {
  /** Something arrived from the peer now. */
  noteRx(): void;
  /** When something last arrived (performance.now() ms). */
  readonly lastRxAt: number;
}

/** A path's acknowledgement pacing, as a transport sees it. */
export interface TransportPathAcks {
  /** One read from the carrier ended: an acknowledgement may be due. */
  readCut(): void;
}

/** What a transport may see of a connection (the kernel's struct rds_connection). */
export interface TransportConn {
  readonly laddr: string;
  readonly faddr: string;
  /** The TOS the connection is keyed by (the transport's map of a socket's SIOCRDSSETTOS; 0 by default). */
  readonly tos: number;
  /** This side has the numerically smaller address (it initiates TCP). */
  readonly isInitiator: boolean;
  /** 0 until a handshake says otherwise; then the agreed number of lanes. */
  readonly npaths: number;
  /** Path `index`, made on first use; undefined outside the slots. */
  path(index: number): TransportPath | undefined;
  /** Every path, each made now if it was not yet. */
  readonly paths: readonly TransportPath[];
  /** The paths made so far, in index order. */
  madePaths(): TransportPath[];
  /** A carrier from the peer delivered a complete frame: the peer identified itself. */
  heardFrom(): void;
  /**
   * A known peer gets in past a flood of strangers (admission): one we have messages for, or one
   * that identified itself and was up within peerIdleTimeoutMs.
   */
  isKnownPeer(now?: number): boolean;
  /** What the handshake knows of the peer. */
  readonly handshake: TransportHandshake;
}

/** The handshake's facts a transport acts on (see Handshake for each). */
export interface TransportHandshake {
  /** 'unknown' until a handshake (or its timeout) told us; then 'kernel' or 'rds-socket'. */
  readonly peer: PeerKind;
  /** RDS-level acks: both sides are rds-socket and the stack allows it, or the transport needs them. */
  readonly ackMode: boolean;
  /** The peer encodes path indexes in its TCP source ports (SPORT_IDX). */
  readonly sportIdx: boolean;
  /** The peer pairs carriers by source port: SPORT_IDX, or one of its lanes was taken for path 0 and dropped. */
  readonly pairsByPort: boolean;
  /** A kernel (no rds-socket capabilities) that sent SPORT_IDX: a 7.0+ kernel, which pairs by source port. */
  readonly kernelPairsBySport: boolean;
  /** Lanes > 0 open on demand (both sides advertise RDSSOCK_CAP_LAZY_LANES). */
  readonly lazyLanes: boolean;
  /** Whether a transport-level acknowledgement (TCP's) may release messages: kernel peers only. */
  readonly releaseOnTransportAck: boolean;
}

/**
 * The path behind a view a transport handed back (TransportHost.recvIncoming, the rail hello). Every
 * TransportPath a transport holds is one the core gave it, so this only widens the type again; for
 * the core's side of the transport boundary (transport-registry.ts, ext/rail.ts), never transports.
 * @internal
 */
export function corePath(cp: TransportPath): RdsConnPath {
  return cp as RdsConnPath;
}
