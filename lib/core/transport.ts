import type { RdmaTransport } from './rdma-ops.js';
import type { TransportConn, TransportPath } from './transport-path.js';
import type { RdsOutgoing } from './message.js';
import type { EventEmitter } from 'eventemitter3';
import type { ResolvedStackOptions } from './options.js';
import type { RdsStackEvents } from './types.js';
import type { RxEntry } from './ext/rx-ack.js';
import type { RdsStats } from './stats.js';
import type { RailHost } from './ext/rail.js';

/**
 * What a transport may ask of the stack it is registered with, and nothing more: the options in
 * force, the counters, admission (allowlist, local addresses, the bind table), the connection
 * table, the receive entry point and error reporting. The stack hands each transport one of
 * these in attach(); a transport never sees the stack itself.
 */
export interface TransportHost {
  readonly options: ResolvedStackOptions;
  readonly counters: RdsStats;
  /** The stack is closing: no new carriers. */
  readonly closing: boolean;
  /** The stack holds the event loop (some socket is open). */
  readonly referenced: boolean;
  /** The allowlist (allowPeers). */
  peerAllowed(address: string): boolean;
  /** An address some socket of the stack is bound to (its traffic uses the loopback transport). */
  isLocalAddress(address: string): boolean;
  /** Whether (address, port) is bound in the stack. */
  isBound(address: string, port: number): boolean;
  /** The connection (laddr, faddr, transport, tos: default 0), made on first use. */
  connFor(laddr: string, faddr: string, transport: RdsTransport, tos?: number): TransportConn;
  /** The connection if there is one; never makes one (admission checks). */
  findConn(laddr: string, faddr: string, transport: RdsTransport, tos?: number): TransportConn | undefined;
  /**
   * rds_recv_incoming: one complete frame from a path's carrier. `localReceipt` (loopback only):
   * settled by the receiving socket when its application takes the message (see localReceipt).
   */
  recvIncoming(cp: TransportPath, header: Buffer, payload: Buffer, localReceipt?: RxEntry): void;
  /** The peer broke the protocol on `cp`: counted and reported ('protocol-error'). */
  reportProtocolError(cp: TransportPath, error: Error): void;
  /** The stack's rails (transports that carry them open and accept their carriers). */
  readonly rails: RailHost;
  /** Emits a stack event; transports emit 'error' for an asynchronous failure no call waits for (a listener died). */
  emit<T extends EventEmitter.EventNames<RdsStackEvents>>(
    event: T,
    ...args: EventEmitter.EventArgs<RdsStackEvents, T>
  ): boolean;
}

/** The name this interface was first published under (a Pick of RdsStack); the same interface. */
export type RdsTransportHost = TransportHost;

/**
 * What a transport provides, modelled on the kernel's struct rds_transport. The core calls these;
 * a transport calls back into the path (connectComplete, connectFailed, drop, tx.ackThrough,
 * tx.kick, heartbeat.noteRx before handing up what one read brought) and into the host
 * (recvIncoming, connFor). The core never imports a transport: they are handed to a stack when it
 * is made.
 */
export interface RdsTransport {
  /** "tcp", "infiniband", "loopback": the names rds-info prints. */
  readonly name: string;
  /** SO_RDS_TRANSPORT value (RDS_TRANS_TCP, RDS_TRANS_IB, RDS_TRANS_LOOP). */
  readonly transType: number;
  /** True if the transport can carry more than one path per connection (mprds). */
  readonly mpathCapable: boolean;
  /**
   * The wire needs RDS acknowledgements from every peer, kernels included (IB: the sender frees a
   * message only on h_ack). Without it acknowledgements are an rds-socket extra (TCP).
   */
  readonly alwaysAcks?: boolean;
  /** Whether sockets may choose it (the loopback transport is only ever picked by the core). */
  readonly userSelectable: boolean;
  /**
   * Each path is one byte stream (TCP): a segment the peer's kernel must retransmit holds up
   * everything it sent after it, pongs included, for as long as its retransmission backs off. The
   * core then pings a kernel peer that has gone silent (ext/heartbeat.ts).
   */
  readonly streamCarrier?: boolean;
  /**
   * The kernel's get_tos_map: the TOS a socket asking for `tos` (0..255) keeps, and whose
   * connection it then uses (connections are keyed by it). TCP maps every TOS to 0 (one
   * connection carries them all); IB keeps it (a connection per TOS). Without it SIOCRDSSETTOS is
   * ENOTTY, as on the kernel's loopback transport.
   */
  tosMap?(tos: number): number;
  /**
   * Messages never leave this host (the loopback transport, the kernel's rds_loop_transport): no
   * handshake, acknowledgements, heartbeats or congestion updates on a wire. The core asks this,
   * never which transport it has.
   */
  readonly local?: boolean;
  /**
   * A received congestion map tells RDS_CONG_MONITOR sockets exactly which ports were cleared (IB,
   * as the kernel's rds_ib passes the mask); without it every port is reported (the kernel's TCP).
   */
  readonly exactCongMask?: boolean;
  /**
   * The transport carries rails: paths of a connection over another address pair, opened with
   * the rail hello (see RailHost). Only TCP.
   */
  readonly rails?: boolean;
  /**
   * Why this transport carries no rails as configured, when it would otherwise (TCP with the tls
   * option): addRail() and the rails option refuse with it (EOPNOTSUPP).
   */
  readonly railsRefusal?: string;
  /**
   * What the transport's own connection setup already says about the peer of `cp` (IB: private
   * data without rds-socket's mark comes from a kernel). 'kernel' skips the multipath probe and
   * settles the peer as a kernel at once: a kernel's RDS/IB never probes, and 6.1 answers a probe
   * received over IB with a WARN_ON (rds_conn_peer_gen_update expects TCP).
   */
  peerKindHint?(cp: TransportPath): 'kernel' | 'unknown';
  /**
   * For a carrier this side accepted: the lane its source port names as a SPORT_IDX peer encodes
   * it (port % 8). Undefined for a carrier this side dialled, a rail's, or a transport without
   * ports. An accepted carrier whose peer says SPORT_IDX and whose port names another lane than
   * the path that took it moves to that lane (carrierToLane) or is dropped (lane-pairing.ts).
   */
  acceptedLane?(cp: TransportPath): number | undefined;
  /**
   * The accepted carrier of `cp` is lane `to` of the peer (acceptedLane): it becomes `to`'s
   * carrier, unclosed, and everything it brings from now on (the rest of the read under way
   * included) feeds `to`; `cp` is left without a carrier. The core then drops `cp` and completes
   * `to`'s connect. False when it cannot (`to` has a carrier): the core drops the carrier.
   */
  carrierToLane?(cp: TransportPath, to: TransportPath): boolean;
  /**
   * RDS's RDMA operations (IB): memory registration for getMr(); the transport posts a message's
   * RdmaOp (msg.rdma) before its SEND. Transports without it refuse RDMA with EOPNOTSUPP.
   */
  readonly rdma?: RdmaTransport;

  /** Called once when the transport is registered with a stack. */
  attach(host: TransportHost): void;

  /**
   * bind(): make `laddr` reachable through this transport (the TCP transport starts listening).
   * Rejects with an RdsError explaining why the address cannot be used.
   */
  laddrCheck(laddr: string): Promise<void>;

  /** Whether this side opens (and re-opens) the given path; the other side waits to be connected. */
  initiates(cp: TransportPath): boolean;

  /** Start connecting a path that the core has moved to CONNECTING. */
  connPathConnect(cp: TransportPath): void;

  /** Tear down whatever carries the path; after this no callback for the old carrier may reach the core. */
  connPathShutdown(cp: TransportPath): void;

  /**
   * Optional batching hooks around a burst of xmit calls (the TCP transport corks). False: the
   * carrier takes nothing now and the burst does not start (a TCP socket already destroyed whose
   * 'close' the path has not seen yet); the path's reset follows.
   */
  xmitBegin?(cp: TransportPath): boolean | void;
  /** The end of a burst of xmit calls begun by xmitBegin (the TCP transport uncorks). */
  xmitEnd?(cp: TransportPath): void;

  /**
   * Send one encoded message. Return false when the carrier will not take more now; the transport
   * then calls cp.tx.kick() when it can. The transport calls cp.tx.ackThrough() once the peer has it.
   */
  xmit(cp: TransportPath, msg: RdsOutgoing): boolean;

  /** Send the full congestion map of the path's local address (h_flags 0x01, seq 0). */
  xmitCong(cp: TransportPath, map: Buffer): boolean;

  /**
   * Send an unsequenced header-only frame (ack-only frame, heartbeat, hello), bypassing the send
   * queue. `done` runs once it has left. Transports without it never carry rds-socket extras.
   */
  xmitControl?(cp: TransportPath, header: Buffer, done: () => void): void;

  /** The peer's handshake said what it is (kernel or rds-socket); see Handshake.releaseOnTransportAck. */
  capabilitiesChanged?(conn: TransportConn): void;

  /**
   * Stop taking frames from the path's carrier (a receive queue it feeds is over its hard limit),
   * so the transport's own flow control stops the peer; frames already read are still handed up.
   * The pause outlives a carrier change until rxResume. While paused the transport sets
   * cp.readPaused. Transports without it are never paused (loopback: its senders are local
   * sockets, bounded by SO_SNDBUF; InfiniBand: not yet, see docs/security.md).
   */
  rxPause?(cp: TransportPath): void;
  /** Take frames from the path's carrier again after rxPause. */
  rxResume?(cp: TransportPath): void;

  /** Keep (true) or stop keeping (false) the Node event loop alive. */
  setRef(ref: boolean): void;

  /** Close every carrier gracefully and stop listening. */
  close(): Promise<void>;

  /** Per-path details for diagnostics (rds-info -T). */
  pathInfo?(cp: TransportPath): Record<string, unknown> | null;
  /** resetStats(): the transport's own per-path figures (those pathInfo shows) start over. */
  resetPathStats?(cp: TransportPath): void;
}
