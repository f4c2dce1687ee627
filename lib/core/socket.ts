import { EventEmitter } from 'eventemitter3';
import {
  MSG_DONTWAIT,
  MSG_PEEK,
  type RDS_TRANS_IB,
  type RDS_TRANS_TCP,
  type RDS_CANCEL_SENT_TO,
  type RDS_CONG_MONITOR,
  type RDS_FREE_MR,
  type RDS_GET_MR,
  type RDS_GET_MR_FOR_DEST,
  type RDS_RECVERR,
  type SO_RCVBUF,
  type SO_RDS_MSG_RXPATH_LATENCY,
  type SO_RDS_TRANSPORT,
  SO_SNDBUF,
  SO_SNDTIMEO,
  type SO_TIMESTAMP,
  type SO_TIMESTAMP_NEW,
  type SO_ZEROCOPY,
  SOL_RDS,
  SOL_SOCKET,
} from '../constants.js';
import { abortReason, combineSignals, flowControlError, RdsError } from '../errors.js';
import type { RdsAddress } from './address.js';
import { defer } from './defer.js';
import type { FreeMrOptions, GetMrOptions } from './rdma.js';
import {
  bindEndpoint,
  chooseBackend,
  connectEndpoint,
  constructorOptions,
  freeMr,
  getMr,
  rdsAction,
} from './socket-actions.js';
import type { BackendEvents, Confirmation, NodeBackendFactory, SocketBackend } from './socket-backend.js';
import type { RdsInfoResult } from './info-result.js';
import { infoGetsockopt, infoNeedsAwait, isInfoOption } from './info-sockopt.js';
import { readOption, setValued } from './socket-options.js';
import { SocketTos } from './tos.js';
import { SendChecks } from './socket-send-checks.js';
import { received, recvFlags } from './socket-recv-flags.js';
import type {
  RdsData,
  RdsSocketEvents,
  RdsSocketOptions,
  RecvmsgOptions,
  RecvOptions,
  SendmsgOptions,
  SendOptions,
  WaitOptions,
} from './socket-types.js';
import { SocketWaiters } from './socket-waiters.js';
import { flushSocket, sendWaiting, socketMessages } from './socket-blocking.js';
import { PollBits } from './socket-poll.js';
import type { RdsStack } from './stack.js';
import type { MessageInfo, RdsMessage, SocketInfo } from './types.js';

/**
 * An RDS socket: socket(PF_RDS, SOCK_SEQPACKET, 0). One socket sends to and receives from every
 * peer; the connections underneath belong to the stack and are shared by all its sockets.
 *
 * One class for every socket: it checks arguments, waits and polls; what carries it is its
 * backend (socket-backend.ts), this process's stack or a host node the process is attached to.
 */
export class RdsSocket extends EventEmitter<RdsSocketEvents> {
  readonly stack: RdsStack;
  /** @internal */ readonly backend: SocketBackend;
  /** @internal */ private closed = false;
  /** @internal */ private binding = false;
  /** rs_tos (the socket's connections are keyed by it) and whether it has sent. @internal */
  private readonly tos = new SocketTos();
  /** connect()'s default destination. @internal */
  private peer: RdsAddress | null = null;
  /** @internal */ private readonly checks: SendChecks;
  /** @internal */ readonly waiters = new SocketWaiters((op) =>
    this.closed ? new RdsError('EBADF', `${op} interrupted: the socket was closed`) : this.backend.failure(),
  );
  /** @internal */ private readableQueued = false;
  /** @internal */ private readonly pollBits: PollBits;
  /** How sockets get a host node's backend: registered by the package entry (lib/index.ts). @internal */
  private static nodeBackends: NodeBackendFactory | null = null;

  /** @internal */ static useNodeBackends(factory: NodeBackendFactory): void {
    RdsSocket.nodeBackends = factory;
  }

  constructor(opts: RdsSocketOptions = {}) {
    super();
    const { transport, sendTimeout } = constructorOptions(opts);
    const backend = chooseBackend(opts, RdsSocket.nodeBackends);
    this.backend = backend;
    this.stack = backend.stack;
    this.checks = new SendChecks(backend);
    const events: BackendEvents = {
      wake: () => this.waiters.wakeAll(),
      readable: () => this.announceReadable(),
      writable: () => {
        if (!this.closed) this.emit('writable');
      },
      peer: (kind, ev) => {
        if (!this.closed) this.emit(kind, ev);
      },
      close: () => this.close(),
    };
    backend.open(events);
    if (transport !== undefined) backend.setTransport(transport);
    if (sendTimeout !== undefined) setValued(backend, SOL_SOCKET, SO_SNDTIMEO, sendTimeout);
    this.pollBits = new PollBits(backend.congGeneration());
    this.stack.socketOpened();
  }

  /** True after close(). */
  get isClosed(): boolean {
    return this.closed;
  }

  /** The host node's path, for a socket living in one. @internal */
  get nodePath(): string | undefined {
    return this.backend.nodePath;
  }

  /** What rds-info -k shows. @internal */
  info(): SocketInfo {
    return this.backend.info();
  }

  /** What rds-info -r shows. @internal */
  receiveQueue(): MessageInfo[] {
    return this.backend.receiveQueue();
  }

  /** @internal */ checkOpen(what: string): void {
    if (this.closed) throw new RdsError('EBADF', `${what} on a closed socket; make a new RdsSocket`);
    const e = this.backend.failure() ?? this.backend.takeRefusal();
    if (e !== null) throw e;
  }

  /** @internal */ private announceReadable(): void {
    this.waiters.wakeAll();
    if (this.readableQueued) return;
    this.readableQueued = true;
    defer(() => {
      this.readableQueued = false;
      if (!this.closed && this.backend.readable()) this.emit('readable');
    });
  }

  // ---- bind / connect / address ----

  /** bind(2). Port 0 picks an ephemeral port. Resolves once the address is reachable by peers. */
  async bind(addr: { address: string; port?: number }): Promise<void> {
    this.checkOpen('bind()');
    if (this.backend.bound !== null || this.binding)
      throw new RdsError('EINVAL', 'socket is already bound; an RDS socket binds once');
    const ep = bindEndpoint(addr, this.peer);
    this.binding = true;
    try {
      await this.backend.bind(ep);
    } finally {
      this.binding = false;
    }
    if (this.closed) throw new RdsError('EBADF', 'socket was closed while bind() was in progress');
  }

  /** connect(2): sets the default destination; no network activity. */
  connect(addr: { address: string; port: number }): void {
    this.checkOpen('connect()');
    const ep = connectEndpoint(addr, this.backend.bound, this.peer);
    this.peer = ep;
    this.backend.connected(ep);
  }

  /** getsockname(2). */
  address(): RdsAddress {
    const bound = this.backend.bound;
    if (bound === null) throw new RdsError('EINVAL', 'socket is not bound; call bind() first');
    return { ...bound };
  }

  /** getpeername(2): the default destination set by connect(). */
  remoteAddress(): RdsAddress {
    if (this.peer === null) throw new RdsError('ENOTCONN', 'no default destination; call connect() first');
    return { ...this.peer };
  }

  // ---- send ----

  /**
   * sendmsg(2), non-blocking: queues the message and returns its length, or throws
   * EAGAIN (send buffer full; the message names the destination holding most of the budget and
   * how long it has been unreachable), ENOBUFS (destination port congested), EMSGSIZE, ENOTCONN
   * (unbound, or bind() not finished), ... An IPv4-mapped destination is the IPv4 address.
   */
  sendmsg(data: RdsData, dest?: { address: string; port: number } | null, opts?: SendmsgOptions): number {
    return this.enqueue(data, dest, opts, false) as number;
  }

  /**
   * @internal `wire`: the host node's cut-through send, `data` being a view of `wire` after a
   * checked RDS data header (lib/host/send-wire.ts); the backend may queue `wire` as the frame.
   */
  enqueue(
    data: RdsData,
    dest: { address: string; port: number } | undefined | null,
    opts: SendmsgOptions | undefined,
    confirm: boolean,
    wire: Buffer | null = null,
  ): number | Confirmation {
    this.checkOpen('sendmsg()');
    const m = this.checks.check(data, dest, opts, this.peer, this.binding, confirm);
    m.tos = this.tos.tos;
    m.wire = wire;
    const r = this.backend.enqueue(m);
    if (r === 'EAGAIN') throw this.backend.fullError();
    if (r === 'ENOBUFS')
      throw flowControlError(
        'ENOBUFS',
        `destination ${m.address}:${m.port} is congested; retry after it clears (send() waits, RDS_CONG_MONITOR notifies)`,
      );
    this.tos.sent = true;
    return r;
  }

  /**
   * sendmsg(2), blocking: waits for send-buffer room and for an uncongested destination, and with
   * `confirm` until the peer has the message. `timeout` and `signal` cover the whole wait.
   */
  send(data: RdsData, dest?: { address: string; port: number } | null, opts: SendOptions = {}): Promise<number> {
    // A send with room now and nothing to abort it is a sendmsg(): answered without the machinery
    // of waiting (an async function's promises per message are a tenth of a sending application's
    // time), and with `confirm` by the confirmation's own promise.
    if (
      opts?.signal === undefined &&
      opts?.timeout === undefined &&
      !this.closed &&
      this.backend.bound !== null &&
      this.backend.hasRoom(false)
    ) {
      try {
        const r = this.enqueue(data, dest, opts, opts?.confirm === true);
        return typeof r === 'number' ? Promise.resolve(r) : r.wait(undefined);
      } catch (e) {
        if (!(e instanceof RdsError) || (e.code !== 'EAGAIN' && e.code !== 'ENOBUFS')) return Promise.reject(e);
      }
    }
    return sendWaiting(this, data, dest, opts ?? {});
  }

  /**
   * Resolves once every message this socket has queued is acknowledged or cancelled (including by
   * SO_SNDTIMEO). A signal already aborted rejects at once.
   */
  flush(opts: WaitOptions = {}): Promise<void> {
    return flushSocket(this, opts);
  }

  // ---- receive ----

  /**
   * recvmsg(2), non-blocking: the next message, or null when none is queued. `opts`: flags
   * (MSG_PEEK, MSG_TRUNC, ...) and a buffer to copy into; the message then carries `flags`
   * (msg_flags) and `length` (the return value). See RecvmsgOptions.
   */
  recvmsg(opts?: RecvmsgOptions): RdsMessage | null {
    if (this.closed) throw new RdsError('EBADF', 'recvmsg() on a closed socket; make a new RdsSocket');
    const flags = opts === undefined ? 0 : recvFlags(opts, 'recvmsg()');
    const refused = this.backend.takeRefusal();
    if (refused !== null) throw refused;
    const m = flags & MSG_PEEK ? this.backend.peek() : this.backend.take();
    if (m !== null) return received(m, this.backend.options.rxTrace, opts, flags);
    // Messages that arrived before a host node went away are still read first.
    const failed = this.backend.failure();
    if (failed !== null) throw failed;
    return null;
  }

  /**
   * recvmsg(2), blocking: the next message; rejects with EBADF if the socket closes first, with
   * the signal's reason if it is aborted, with ETIMEDOUT after `timeout` (without one: after
   * SO_RCVTIMEO, if set), with EAGAIN at once when nothing is queued and `flags` has MSG_DONTWAIT.
   */
  async recv(opts: RecvOptions = {}): Promise<RdsMessage> {
    const rcvtimeo = opts?.timeout === undefined ? this.backend.options.rcvtimeo : 0;
    const signal = combineSignals(opts?.signal, rcvtimeo > 0 ? rcvtimeo : opts?.timeout);
    const what = rcvtimeo > 0 ? 'recv() with SO_RCVTIMEO' : 'recv()';
    const call = opts?.flags !== undefined || opts?.buffer !== undefined ? opts : undefined;
    const dontwait = call !== undefined && (recvFlags(call, 'recv()') & MSG_DONTWAIT) !== 0;
    for (;;) {
      if (signal?.aborted) throw abortReason(signal, what);
      const m = this.recvmsg(call);
      if (m !== null) return m;
      if (dontwait) throw flowControlError('EAGAIN', 'recv() with MSG_DONTWAIT: no message is queued');
      await this.waiters.wait(signal, what, abortReason);
    }
  }

  /** `for await (const msg of sock)`: ends when the socket is closed. Breaking out leaves it open. */
  [Symbol.asyncIterator](): AsyncGenerator<RdsMessage, void, undefined> {
    // messages() itself, not a generator delegating to it (yield* costs a promise per message).
    return this.messages();
  }

  /** Like the async iterator, with an AbortSignal that ends the loop by throwing ETIMEDOUT (AbortSignal.timeout) or ECANCELED, its reason as `cause`. */
  messages(opts: { signal?: AbortSignal } = {}): AsyncGenerator<RdsMessage, void, undefined> {
    return socketMessages(this, opts);
  }

  /** poll(2) bits as the kernel reports them (spec §6.6). */
  poll(): number {
    return this.closed ? 0x20 /* POLLNVAL */ : this.pollBits.mask(this.backend);
  }

  // ---- options ----

  /** SO_SNDBUF, SO_RCVBUF (bytes), SO_TIMESTAMP, SO_TIMESTAMP_NEW, SO_ZEROCOPY (0/1 or a boolean). */
  setsockopt(
    level: typeof SOL_SOCKET,
    optname: typeof SO_SNDBUF | typeof SO_RCVBUF | typeof SO_TIMESTAMP | typeof SO_TIMESTAMP_NEW | typeof SO_ZEROCOPY,
    value: number | boolean,
  ): void;
  /** RDS_CANCEL_SENT_TO: drops every queued or unacknowledged message to this destination. */
  setsockopt(level: typeof SOL_RDS, optname: typeof RDS_CANCEL_SENT_TO, value: { address: string; port: number }): void;
  /** RDS_RECVERR, RDS_CONG_MONITOR (0/1 or a boolean). */
  setsockopt(
    level: typeof SOL_RDS,
    optname: typeof RDS_RECVERR | typeof RDS_CONG_MONITOR,
    value: number | boolean,
  ): void;
  /**
   * SO_RDS_MSG_RXPATH_LATENCY: a 4-byte struct rds_rx_trace_so (u8 rx_traces, u8 rx_trace_pos[3])
   * or the trace points (0, 1, 2; at most 3); [] turns it off. Messages then carry `rxTrace`.
   */
  setsockopt(
    level: typeof SOL_RDS,
    optname: typeof SO_RDS_MSG_RXPATH_LATENCY,
    value: Uint8Array | readonly number[],
  ): void;
  /** SO_RDS_TRANSPORT before bind: RDS_TRANS_TCP or RDS_TRANS_IB. */
  setsockopt(
    level: typeof SOL_RDS,
    optname: typeof SO_RDS_TRANSPORT,
    value: typeof RDS_TRANS_TCP | typeof RDS_TRANS_IB,
  ): void;
  /**
   * RDS_GET_MR ({ buffer, flags }), RDS_GET_MR_FOR_DEST ({ buffer, flags, dest }): getMr(); the
   * cookie is written to value.cookie, as the kernel writes it to cookie_addr.
   */
  setsockopt(
    level: typeof SOL_RDS,
    optname: typeof RDS_GET_MR | typeof RDS_GET_MR_FOR_DEST,
    value: { buffer: Uint8Array; cookie?: bigint } & GetMrOptions,
  ): void;
  /** RDS_FREE_MR ({ cookie, flags }): freeMr(); flags 0 or RDS_RDMA_INVALIDATE. */
  setsockopt(level: typeof SOL_RDS, optname: typeof RDS_FREE_MR, value: { cookie: bigint; flags?: number }): void;
  /** An option given by a computed number; checked at run time (ENOPROTOOPT, EINVAL). */
  setsockopt(level: number, optname: number, value: number | boolean): void;
  setsockopt(level: number, optname: number, value: unknown): void {
    this.checkOpen('setsockopt()');
    if (level === SOL_RDS && rdsAction(this, this.backend, this.binding, optname, value)) return;
    setValued(this.backend, level, optname, value);
    if (level === SOL_SOCKET && optname === SO_SNDBUF) this.waiters.wakeAll();
  }

  /** SO_SNDBUF, SO_RCVBUF: twice the value set, as Linux reports; SO_TIMESTAMP, SO_ZEROCOPY: 0 or 1. */
  getsockopt(
    level: typeof SOL_SOCKET,
    optname: typeof SO_SNDBUF | typeof SO_RCVBUF | typeof SO_TIMESTAMP | typeof SO_TIMESTAMP_NEW | typeof SO_ZEROCOPY,
  ): number;
  /** RDS_RECVERR, RDS_CONG_MONITOR: 0 or 1; SO_RDS_TRANSPORT: RDS_TRANS_TCP, RDS_TRANS_IB or RDS_TRANS_NONE. */
  getsockopt(
    level: typeof SOL_RDS,
    optname: typeof RDS_RECVERR | typeof RDS_CONG_MONITOR | typeof SO_RDS_TRANSPORT,
  ): number;
  /** An option given by a computed number; checked at run time (ENOPROTOOPT). */
  getsockopt(level: number, optname: number): number;
  /** RDS_INFO_* / RDS6_INFO_*: the kernel's records into `buffer`, all or none (ENOSPC: error.length needed). */
  getsockopt(level: typeof SOL_RDS, optname: number, buffer: Uint8Array): RdsInfoResult;
  getsockopt(level: number, optname: number, buffer?: Uint8Array): number | RdsInfoResult {
    this.checkOpen('getsockopt()');
    if (level === SOL_RDS && isInfoOption(optname)) {
      if (this.backend.nodePath !== undefined) throw infoNeedsAwait(optname);
      return infoGetsockopt(() => this.stack.info(), optname, buffer);
    }
    return readOption(this.backend.options, level, optname, this.backend.transportType);
  }

  /** getsockopt(SOL_RDS, RDS_INFO_*, buffer) that also works on a socket attached to a host node (the node answers). */
  rdsInfo(optname: number, buffer: Uint8Array): Promise<RdsInfoResult> {
    this.checkOpen('rdsInfo()');
    return this.backend.rdsInfo(optname, buffer);
  }

  /** ioctl(2): SIOCRDSSETTOS (arg: the TOS; once, before the first send), SIOCRDSGETTOS (the TOS kept); see tos.ts. */
  ioctl(request: number, arg?: number): number {
    this.checkOpen('ioctl()');
    const b = this.backend;
    return this.tos.ioctl(request, arg, (t) => b.tosMap(t), b.tosSet && ((t) => b.tosSet!(t)));
  }

  /**
   * freeMr(), a USE_ONCE region's first use by the peer, or close()) for the peer's RDMA ops and
   * returns its cookie: (offset << 32) + rkey, the region registered zero-based from the start of
   * the buffer's first page as the kernel registers it (offset: where the buffer starts in that
   * page). Flags: RDS_RDMA_USE_ONCE, RDS_RDMA_INVALIDATE, RDS_RDMA_READWRITE (remote write, and
   * remote atomics where the device has them). IB sockets only: throws ENOTCONN on an unbound
   * socket (the transport registers the memory) and EOPNOTSUPP on TCP, as the kernel's RDS/TCP does.
   */
  getMr(buffer: Uint8Array, opts?: GetMrOptions): bigint {
    this.checkOpen('getMr()');
    return getMr(this.backend, buffer, opts);
  }

  /**
   * Cookie 0n is the kernel's flush of regions freed but not yet invalidated: over IB nothing is
   * left to flush and it succeeds. A cookie this socket did not register is EINVAL, as in the
   * kernel; on a transport without RDMA (TCP) every cookie, 0n included, is EINVAL.
   */
  freeMr(cookie: bigint, opts?: FreeMrOptions): void {
    this.checkOpen('freeMr()');
    freeMr(this.backend, cookie, opts);
  }

  // ---- close ----

  /**
   * close(2): releases the port, discards received messages, cancels every message not yet
   * acknowledged (as the kernel does), and ends pending send()/recv() and iterators.
   * Connections stay up: they belong to the stack.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const answered = this.backend.release();
    if (answered === null) this.waiters.wakeAll();
    this.stack.socketClosed();
    this.emit('close');
    if (answered === null) return;
    // A host node answers once it has closed its socket (the port is free for any process then).
    // Pending calls are rejected only now, in the turn close() settles in, as an in-process
    // socket's are: `const p = s.recv(); await s.close(); await p.catch(...)` must not leave a
    // rejection unhandled for the node's round trip (Node ends a process on one).
    try {
      await answered;
    } finally {
      this.waiters.wakeAll();
    }
  }
}
