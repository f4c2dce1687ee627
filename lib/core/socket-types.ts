import type { PeerEvent } from './ext/peer-state.js';
import type { SocketBackend } from './socket-backend.js';
import type { RdsStack } from './stack.js';
import type { AtomicArgs, MaskedAtomicArgs, RdmaArgs, RdmaMapArgs } from './rdma.js';

/** A message's bytes: one buffer, or several gathered into one message (as `msg_iov`). */
export type RdsData = Buffer | Uint8Array | readonly (Buffer | Uint8Array)[];

/** The options of `new RdsSocket()`. */
export interface RdsSocketOptions {
  /** SO_RDS_TRANSPORT before bind: 'tcp' or 'ib'. Default: the first that accepts the bound address. */
  transport?: 'tcp' | 'ib';
  /** The node this socket belongs to; default RdsStack.default(). */
  stack?: RdsStack;
  /**
   * SO_SNDTIMEO in ms (0 = never, the default): messages unacknowledged this long are removed
   * with every other message to the same destination port, as RDS_CANCEL_SENT_TO removes them;
   * pending send() confirmations reject with ETIMEDOUT.
   */
  sendTimeout?: number;
  /** What carries the socket, when its maker chose (the host node's sockets). @internal */
  backend?: SocketBackend;
}

/** How long a blocking call (recv, send, flush, the iterator) may wait. */
export interface WaitOptions {
  /**
   * Abort the wait. recv() and messages() then throw the signal's reason (an AbortSignal.timeout()
   * gives ETIMEDOUT); send() and flush() an RdsError named AbortError (ECANCELED), or ETIMEDOUT
   * for an AbortSignal.timeout(). A signal already aborted rejects at once.
   */
  signal?: AbortSignal;
  /**
   * Give up after this many milliseconds: ETIMEDOUT naming the call ("recv() timed out after
   * 100 ms"). 0 to 2147483647 (what a timer takes); anything else is EINVAL.
   */
  timeout?: number;
}

/** What recvmsg(2) takes besides the socket: its flags and the caller's buffer (`msg_iov`). */
export interface RecvmsgOptions {
  /**
   * MSG_PEEK (leave the message queued: the next call returns it again; notifications and
   * zero-copy completions are still consumed, as by the kernel), MSG_TRUNC (`length` is the
   * message's full length even when `buffer` cut it), MSG_DONTWAIT (recv() rejects with EAGAIN
   * instead of waiting; recvmsg() never waits), MSG_WAITALL and MSG_CMSG_COMPAT (accepted,
   * ignored). MSG_OOB, MSG_ERRQUEUE and any other flag are EOPNOTSUPP.
   */
  flags?: number;
  /**
   * Copy the message into this buffer, as recvmsg(2) copies into `msg_iov`: `data` is then a view
   * of its first bytes. A longer message is truncated and the rest dropped (MSG_TRUNC in the
   * returned `flags`). Without it, `data` is the whole message.
   */
  buffer?: Uint8Array;
}

/** recv(): recvmsg(2)'s flags and buffer, and how long it may wait. */
export interface RecvOptions extends WaitOptions, RecvmsgOptions {}

/** What sendmsg(2) takes besides data and destination: its flags and control messages. */
export interface SendmsgOptions {
  /**
   * MSG_DONTWAIT (implied: sendmsg never waits) and MSG_ZEROCOPY. With MSG_ZEROCOPY on a socket
   * that has SO_ZEROCOPY set, the payload is not copied: the caller must leave its buffers
   * untouched until recvmsg() reports `zcopyCookie` in `zcopyCompletions`. TCP sockets only.
   */
  flags?: number;
  /** RDS_CMSG_ZCOPY_COOKIE: a u32 naming this message in completions; required with MSG_ZEROCOPY. */
  zcopyCookie?: number;
  /**
   * RDS_CMSG_RDMA_ARGS: an RDMA READ or WRITE on the peer's memory (its cookie), posted before the
   * message. Needs an RDMA transport: TCP sockets refuse it with EOPNOTSUPP, as the kernel's do.
   */
  rdma?: RdmaArgs;
  /**
   * RDS_CMSG_RDMA_DEST: expose one of this socket's memory regions (a getMr() cookie) to the peer
   * with this message. A cookie that names no region of this socket is EINVAL; not with `rdma`,
   * `atomic` or `rdmaMap`.
   */
  rdmaDest?: bigint;
  /**
   * RDS_CMSG_RDMA_MAP: register `buffer` as getMr(buffer, { flags }) does (same checks and codes)
   * and expose it with this message as `rdmaDest` would: the peer finds the cookie as
   * `msg.rdmaDest`, and sendmsg writes it to `rdmaMap.cookie` (free it with freeMr(), or let
   * RDS_RDMA_USE_ONCE or close() release it). The region is registered only when the message is
   * queued: a refused send (EAGAIN, ENOBUFS, EMSGSIZE, no destination, ...) leaves nothing
   * registered and writes no cookie (the kernel registers first and keeps the region on such
   * errors). EOPNOTSUPP over TCP; EINVAL with `rdmaDest`, `rdma` or `atomic`.
   */
  rdmaMap?: RdmaMapArgs;
  /**
   * RDS_CMSG_ATOMIC_FADD / RDS_CMSG_ATOMIC_CSWP (unmasked): a 64-bit atomic on a word of the
   * peer's region, posted before the message like `rdma`. IB between rds-socket nodes, where the
   * device has atomics (else EOPNOTSUPP, as over TCP); not with `rdma`, `rdmaDest` or `rdmaMap`
   * (EINVAL). The masked forms ('masked-fadd', 'masked-cswp') are always EOPNOTSUPP.
   */
  atomic?: AtomicArgs | MaskedAtomicArgs;
}

export interface SendOptions extends WaitOptions, SendmsgOptions {
  /**
   * Resolve only once the peer has the message. With an rds-socket peer: once the receiving
   * application has read it (recvmsg, recv, the iterator); being acknowledged as queued
   * (`ackDelayMaxMs`, flow control) does not count. Rejects with ECONNREFUSED when no socket is
   * bound at the destination port (the message is dropped, as the kernel drops it), ECONNRESET
   * when the receiving socket was closed with it unread or the receiving node restarted before
   * reading it. With a kernel peer the guarantee is the kernel's: TCP has acknowledged it, which
   * says nothing about the receiving application. Older rds-socket peers (no
   * RDSSOCK_CAP_CONFIRM) confirm on their acknowledgement, "queued" included. Over loopback it
   * resolves once the receiving socket has it queued. If the signal or timeout fires first, a
   * message not yet acknowledged is removed as RDS_CANCEL_SENT_TO would remove it (ETIMEDOUT /
   * ECANCELED).
   */
  confirm?: boolean;
}

/** The events of an RdsSocket (eventemitter3). A socket reports failures by throwing or rejecting the call that met them, never with 'error'. */
export interface RdsSocketEvents {
  /** A message (or a notification) can be read: recvmsg() will not return null. */
  readable: () => void;
  /** After an EAGAIN, half the send budget (SO_SNDBUF) is free again. */
  writable: () => void;
  /** The socket was closed. */
  close: () => void;
  /** @deprecated Never emitted: a socket reports failures by throwing or rejecting the call. Kept so existing listeners still type-check. */
  error: (err: Error) => void;
  /**
   * A peer this socket has messages queued or unacknowledged to (or sends to later) has had no
   * path UP for the stack's peerDownMs. The messages stay queued (RDS retries forever): cancel
   * them with RDS_CANCEL_SENT_TO, or let SO_SNDTIMEO do it.
   */
  'peer-down': (ev: PeerEvent) => void;
  /** A peer this socket was told was down (or has messages for) is reachable again. */
  'peer-up': (ev: PeerEvent) => void;
}
