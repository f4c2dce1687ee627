// The boundary under RdsSocket: what a socket needs of whatever carries it. RdsSocket (socket.ts)
// checks arguments, waits and polls once for every kind of socket; a backend does the rest. Two
// exist: LocalBackend (local-backend.ts: the socket lives in this process's stack) and the host
// node's NodeBackend (lib/host/node-backend.ts: the socket lives in a host node and this side
// exchanges frames with it). The core never imports the second: the package entry registers how
// to make it (RdsSocket.useNodeBackends).
import type { RdsError } from '../errors.js';
import type { RdsAddress } from './address.js';
import type { PeerEvent } from './ext/peer-state.js';
import type { RdmaControl } from './rdma-ops.js';
import type { MrTable } from './rdma-ops.js';
import type { SocketOptionValues } from './socket-options.js';
import type { RdsInfoResult } from './info-result.js';
import type { RdsStack } from './stack.js';
import type { MessageInfo, RdsMessage, SocketInfo } from './types.js';
import type { RdsSocketOptions, SendmsgOptions } from './socket-types.js';

/**
 * A message RdsSocket has checked (data, destination, flags, sizes, RDMA refusals) and hands to
 * its backend. One object per socket is reused for every send: a backend reads it during
 * enqueue() and keeps nothing of it but the payload.
 * @internal
 */
export interface CheckedSend {
  payload: Uint8Array | readonly Uint8Array[];
  len: number;
  address: string;
  port: number;
  /** sendmsg flags (MSG_ZEROCOPY ...), 0 for none. */
  flags: number;
  /** MSG_ZEROCOPY on a socket with SO_ZEROCOPY: the payload stays the caller's until its cookie completes. */
  zcopy: boolean;
  zcopyCookie: number | undefined;
  /** RDMA control messages, prepared by a backend that can carry them (rdmaControl()). */
  rdma: RdmaControl | null;
  /** send({ confirm }): enqueue() answers with a Confirmation. */
  confirm: boolean;
  /** The socket's TOS (SIOCRDSSETTOS, as its transport mapped it): the connection is the one keyed by it. */
  tos: number;
  /**
   * The message already in the RDS wire format (the host node's cut-through send): a data header
   * with ports and length set and everything else zero, then the payload (`payload` is a view of
   * it). A backend may queue these bytes as the frame, stamping the sequence; null otherwise.
   */
  wire: Buffer | null;
}

/** A confirmed send's wait for the peer (send({ confirm })). @internal */
export interface Confirmation {
  readonly len: number;
  /**
   * Resolves with `len` once the peer has the message; the signal gives it up (as
   * RDS_CANCEL_SENT_TO would). send({ confirm }) with nothing to abort it returns this promise
   * itself, with no async wait around it.
   */
  wait(signal: AbortSignal | undefined): Promise<number>;
}

/** What enqueue() answers: the length queued, a confirmation to wait for, or why it must wait. @internal */
export type EnqueueResult = number | Confirmation | 'EAGAIN' | 'ENOBUFS';

/** What a backend tells its socket. @internal */
export interface BackendEvents {
  /** The socket's state changed (room, a message, congestion cleared, ...): blocked calls re-check. */
  wake(): void;
  /** A message or notification can be read (announced once per turn). */
  readable(): void;
  /** After EAGAIN, half the send budget is free again. */
  writable(): void;
  /** A peer this socket sends to went down or came back. */
  peer(kind: 'peer-down' | 'peer-up', ev: PeerEvent): void;
  /** Closes the socket (the stack closing its sockets goes through the socket's own close()). */
  close(): Promise<void>;
}

/**
 * What carries an RdsSocket.
 * @internal
 */
export interface SocketBackend {
  /** The stack the socket belongs to (an attached socket: its attached stack). */
  readonly stack: RdsStack;
  /** The option values (SO_SNDBUF, ...): written by RdsSocket's setsockopt, read by the backend. */
  readonly options: SocketOptionValues;
  /** Where the socket is bound, once bind() has finished. */
  readonly bound: RdsAddress | null;
  /** SO_RDS_TRANSPORT: RDS_TRANS_NONE until chosen or bound. */
  readonly transportType: number;
  /** The transport's name when it is not TCP (zero-copy is TCP only), else null. */
  readonly nonTcpTransport: string | null;
  /** The transport's name, null until chosen or bound. */
  readonly transportName: string | null;
  /** The transport can carry RDMA (getMr, RDS_CMSG_RDMA_*). */
  readonly rdmaCapable: boolean;
  /** The host node's path (node backends); undefined for a socket of this process's stack. */
  readonly nodePath: string | undefined;

  /** Called once by the socket that owns this backend. */
  open(events: BackendEvents): void;
  /** An error every call now meets (the node refused to open the socket, or went away), or null. */
  failure(): RdsError | null;
  /** A refusal of an earlier call that arrived since (a host node's), given once, or null. */
  takeRefusal(): RdsError | null;
  /** connect()'s default destination (rds-info shows it). */
  connected(peer: RdsAddress): void;
  /** SO_RDS_TRANSPORT (checked by the socket: before bind, in range). */
  setTransport(type: number): void;
  /** The socket's transport's get_tos_map of `tos` (RdsTransport.tosMap); null without one (ENOTTY). */
  tosMap(tos: number): number | null;
  /** SIOCRDSSETTOS kept `tos` (a host node's socket tells the node; a local one reads CheckedSend.tos). */
  tosSet?(tos: number): void;
  /** Binds to the checked endpoint (port 0: ephemeral); resolves once peers can reach it. */
  bind(ep: RdsAddress): Promise<void>;

  /** Queues a checked message. */
  enqueue(m: CheckedSend): EnqueueResult;
  /** The EAGAIN to throw after enqueue() answered 'EAGAIN', saying who holds the budget. */
  fullError(): RdsError;
  /** Room in the send budget now; `waiting`: a send() is about to wait for it. */
  hasRoom(waiting: boolean): boolean;
  /** send() waits for a congested destination: `wake` is called when some map clears. Returns the undo. */
  watchCongestion(wake: () => void): () => void;
  /** RDS_CMSG_RDMA_* for an RDMA-capable backend (the region table, the op); others refuse first. */
  rdmaControl(opts: SendmsgOptions, laddr: string): RdmaControl;
  /** The EOPNOTSUPP this backend gives RDMA calls. */
  rdmaRefusal(what: string): RdsError;
  /** This socket's memory regions (created on first use when `create`). */
  regions(create: boolean): MrTable | null;
  /** flush(): true/false whether all is acknowledged or cancelled now (re-asked on each wake), or a promise of it. */
  flushed(): boolean | Promise<unknown>;
  /** RDS_CANCEL_SENT_TO (the socket checked it is bound). */
  cancelSentTo(ep: RdsAddress): void;
  /** setsockopt() stored a valued option; `before` is its value before (undefined: could not be read). */
  optionSet(level: number, name: number, value: unknown, before: number | undefined): void;

  /** The next received message or notification, or null. */
  take(): RdsMessage | null;
  /**
   * MSG_PEEK: a copy of the next received message, left queued (its receive accounting, receipt
   * and credit untouched); a notification, and zero-copy completions riding on it, are consumed
   * as take() consumes them (rds_recvmsg consumes them whatever the flags). Null when nothing.
   */
  peek(): RdsMessage | null;
  /** Something can be read (POLLIN). */
  readable(): boolean;
  /** Congestion maps received so far (poll() reports POLLWRBAND once after each). */
  congGeneration(): number;
  /** A refusal waits to be thrown by the next call (POLLERR). */
  pollErr(): boolean;

  /** close(): the port is released, unread messages discarded; null when done, else settles when the node answered. */
  release(): Promise<void> | null;

  /** rds-info -k / -r. */
  info(): SocketInfo;
  /** getsockopt(SOL_RDS, RDS_INFO_*) records of the stack that holds the socket (a host node's: it answers). */
  rdsInfo(optname: number, buffer: Uint8Array): Promise<RdsInfoResult>;
  receiveQueue(): MessageInfo[];
}

/** How the package entry gives sockets a host node's backend; null: an ordinary (embedded) socket. @internal */
export type NodeBackendFactory = (opts: RdsSocketOptions) => SocketBackend | null;
