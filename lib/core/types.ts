import type { ConnState } from './path.js';
import type { PeerEvent, PeerInfo } from './ext/peer-state.js';
import type { RdsCounterName } from './stats.js';
import type { RxEntry } from './ext/rx-ack.js';
import type { RdsConnection } from './connection.js';
import type { RxSocketLimit } from './ext/rx-limit.js';
import type { RxTrace } from './rx-trace.js';

// The types a stack's users and its sockets see: messages, rds-info's listings, events.

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
  /**
   * RDS_CMSG_RDMA_STATUS: the completion of one of this socket's RDMA ops (sendmsg's `rdma`),
   * with its token and status (RDS_RDMA_SUCCESS, RDS_RDMA_REMOTE_ERROR, RDS_RDMA_CANCELED,
   * RDS_RDMA_DROPPED, RDS_RDMA_OTHER_ERROR). Alone: address '', port 0, data empty; returned before
   * any message.
   */
  rdmaStatus?: { token: bigint; status: number };
  /** RDS_CMSG_RDMA_DEST: the cookie of a memory region the sender exposes with this message. */
  rdmaDest?: bigint;
  /**
   * msg_flags, on what recvmsg()/recv() return when called with options: MSG_TRUNC when the
   * message did not fit the call's `buffer` (the rest was dropped). MSG_CTRUNC is never set:
   * control data are fields of this object, never cut.
   */
  flags?: number;
  /**
   * RDS_CMSG_RXPATH_LATENCY, with SO_RDS_MSG_RXPATH_LATENCY: the receive-path intervals asked for
   * (positions) and their lengths in nanoseconds (values), as struct rds_cmsg_rx_trace.
   */
  rxTrace?: RxTrace;
  /** The receive-path stamps 0-2 (process.hrtime.bigint()), on a socket tracing them. @internal */
  rxStamps?: readonly bigint[];
  /**
   * recvmsg(2)'s return value, on what recvmsg()/recv() return when called with options: the
   * bytes in `data`, or the message's full length when it was truncated and the call's flags had
   * MSG_TRUNC.
   */
  length?: number;
  /**
   * rds-socket's own (no kernel reports it): the index of the connection path the message came on
   * from its peer: 0 to npaths-1 for the multipath lanes (a kernel sender picks the lane from its
   * socket's port hash, so messages of one sending socket keep their order only within a lane),
   * 8 and up for rails. A message moved to another path by failover (between rds-socket nodes)
   * reports the path that carried it. Absent on notifications (address '').
   */
  path?: number;
}

/** Tells the path that delivered a message when the application has taken it (for acks). @internal */
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

/** What the stack needs of a socket bound in it. @internal */
export interface BoundSocket {
  info(): SocketInfo;
  /** Messages waiting to be read. */
  receiveQueue(): MessageInfo[];
  readonly boundAddress: string;
  readonly boundPort: number;
  /**
   * Queue a message; false if the socket is gone (the message is dropped). `header`: its RDS
   * header as received, for a host node that forwards the frame's bytes (local-rx.ts RxHandoff).
   */
  enqueueIncoming(msg: RdsMessage, receipt: Receipt | null, header?: Buffer): boolean;
  /** What its unread messages cost (payload + RX_MSG_OVERHEAD each) is over max(factor x SO_RCVBUF, minBytes). */
  rxOverLimit?(limit: RxSocketLimit): boolean;
  congestionUpdated(conn: RdsConnection, mask: bigint): void;
  /** exthdr RDMA: the peer's RDMA op on our region `rkey` is done (a USE_ONCE region is freed). */
  rdmaUsed?(rkey: number): void;
  /** A peer was declared down or came back (the socket decides whether it has traffic for it). */
  peerDown?(ev: PeerEvent): void;
  peerUp?(ev: PeerEvent): void;
  close(): Promise<void>;
}

/** One path of a connection (a lane or a rail), as `stack.connections()` and `rds-info -R` report it. */
export interface PathInfo {
  /** 0..7: lanes over the connection's own address pair; 8 and up: rails (see docs/rails.md, "Several links to one peer"). */
  index: number;
  state: ConnState;
  /** The path is a rail (another address pair to the same peer). */
  rail: boolean;
  /** The path's source and destination addresses (a lane: the connection's; a rail: the rail's). */
  source: string;
  destination: string;
  /** Messages queued or sent and not yet acknowledged on this path. */
  inFlightMessages: number;
  /** Failed connect attempts since the path was last UP (see maxReconnectAttempts). */
  failedAttempts: number;
  /** Held down by disconnect() (or a removed rail) until reconnect(). */
  held: boolean;
  /** Sequence of the next message queued on the path (the first is the clock, see initialSequence); 0 for a path not made yet. */
  nextTxSeq: number;
  nextRxSeq: number;
  sendQueue: number;
  retransQueue: number;
  sentMessages: number;
  sentBytes: number;
  recvMessages: number;
  recvBytes: number;
  /** Times the path came UP (reconnects that succeeded, the first included). */
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

/** One connection to a peer (local address, peer address, transport) and its paths: `stack.connections()`. */
export interface ConnectionInfo {
  localAddress: string;
  peerAddress: string;
  transport: string;
  /**
   * The TOS the connection carries (c_tos; rds-info's Tos column): a connection per TOS on IB,
   * 0 on TCP (every TOS maps to 0). Absent from a host node older than this field.
   */
  tos?: number;
  npaths: number;
  initiator: boolean;
  paths: PathInfo[];
}

/**
 * What `await stack.report()` answers: the counters, connections and peers of the node the stack's
 * sockets live in, read at one moment (as stats() and peers() read them on a stack of this process).
 */
export interface StackReport {
  counters: Record<RdsCounterName, number>;
  connections: ConnectionInfo[];
  peers: PeerInfo[];
}

/**
 * What every stack answers, wherever its node runs: RdsStack reads its own tables, an attached
 * stack (RdsStack.attach()) asks its host node. Its synchronous views (stats(), counters, ...)
 * cannot cross a process, so on an attached stack they throw EOPNOTSUPP and point here.
 */
export interface StackReader {
  /** The node's counters, connections and peers, read at one moment (asked of the node if attached). */
  report(): Promise<StackReport>;
}

/** A path's state change: the stack's 'state' event. */
export interface PathStateEvent {
  localAddress: string;
  peerAddress: string;
  transport: string;
  path: number;
  from: ConnState;
  to: ConnState;
}

/** The events of an RdsStack (eventemitter3). */
export interface RdsStackEvents {
  /** A path changed state. */
  state: (ev: PathStateEvent) => void;
  /** A path was dropped, and why (peer closed, protocol error, heartbeat, ...). */
  drop: (ev: { localAddress: string; peerAddress: string; transport: string; path: number; reason: string }) => void;
  /** A path stayed down past failoverGraceMs: `moved` messages went to path `to`. */
  failover: (ev: {
    localAddress: string;
    peerAddress: string;
    transport: string;
    path: number;
    to: number;
    moved: number;
  }) => void;
  /** A connection was dropped because the peer broke the protocol (already counted). */
  'protocol-error': (ev: {
    localAddress: string;
    peerAddress: string;
    transport: string;
    path: number;
    error: Error;
  }) => void;
  /** No path to a peer has been UP for peerDownMs: `unreachableMs` says for how long. */
  'peer-down': (ev: PeerEvent) => void;
  /** A path to a peer that was down is UP again; `unreachableMs`: how long it was unreachable. */
  'peer-up': (ev: PeerEvent) => void;
  /**
   * A rail's hello was refused (counted in rail_refused): by this node (`by: 'local'`: not declared
   * here, or the address pair leads to another node) or by the peer (`by: 'peer'`, its reason).
   */
  'rail-refused': (ev: {
    localAddress: string;
    peerAddress: string;
    local: string;
    remote: string;
    path: number;
    reason: string;
    by: 'local' | 'peer';
  }) => void;
  /** An asynchronous failure with no call to report it to (a listener died, ...). */
  error: (err: Error) => void;
}
