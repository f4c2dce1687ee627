import { isIPv4 } from 'node:net';
import { EventEmitter } from 'eventemitter3';
import {
  POLLIN,
  POLLOUT,
  POLLRDNORM,
  POLLWRBAND,
  POLLWRNORM,
  RDS_CANCEL_SENT_TO,
  RDS_CONG_MONITOR,
  RDS_MAX_MSG_SIZE,
  RDS_RECVERR,
  RDS_TRANS_IB,
  RDS_TRANS_NONE,
  RDS_TRANS_TCP,
  RMEM_DEFAULT,
  SOCK_MIN_RCVBUF,
  SOCK_MIN_SNDBUF,
  SOL_RDS,
  SOL_SOCKET,
  SO_RCVBUF,
  SO_RDS_TRANSPORT,
  SO_SNDBUF,
  SO_TIMESTAMP,
  SO_TIMESTAMP_NEW,
  WMEM_DEFAULT,
  MSG_CMSG_COMPAT,
  MSG_DONTWAIT,
  MSG_ZEROCOPY,
  RDS_MAX_ZCOOKIES,
  SO_ZEROCOPY,
  SO_SNDTIMEO,
  SO_SNDTIMEO_NEW,
} from '../constants.js';
import { abortError, abortReason, combineSignals, flowControlError, RdsError } from '../errors.js';
import {
  checkedAddress,
  isHostLocalAddress,
  nonUnicastReason,
  parseEndpoint,
  validatePort,
  type RdsAddress,
} from './address.js';
import { defer } from './defer.js';
import { Fifo } from './fifo.js';
import { RdsSendList, type RdsOutgoing } from './message.js';
import type { RdsConnection } from './connection.js';
import { RdsStack, type MessageInfo, type RdsMessage, type Receipt, type SocketInfo } from './stack.js';
import type { RdsTransport } from './transport.js';
import { RDS_CTR } from './stats.js';
import { RX_MSG_OVERHEAD } from './rx-limit.js';
import type { PeerEvent, PeerState } from './peer-state.js';
import { SendTimeout } from './send-timeout.js';
import { budgetReport } from './send-report.js';
import { RX_DISCARDED } from './rx-ack.js';
import { hostHooks } from './host-hooks.js';

export type RdsData = Buffer | Uint8Array | readonly (Buffer | Uint8Array)[];

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
}

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

interface Queued {
  msg: RdsMessage;
  receipt: Receipt | null;
}

export interface RdsSocketEvents {
  readable: () => void;
  writable: () => void;
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

const TRANSPORT_BY_NAME: Record<string, number> = { tcp: RDS_TRANS_TCP, ib: RDS_TRANS_IB };

type Waiter = { wake: () => void };

/**
 * An RDS socket: socket(PF_RDS, SOCK_SEQPACKET, 0). One socket sends to and receives from every
 * peer; the connections underneath belong to the stack and are shared by all its sockets.
 */
// Not `implements BoundSocket, SendOwner`: those are internal interfaces, left out of the
// published declarations (stripInternal); the stack and paths check the shape where they take a socket.
export class RdsSocket extends EventEmitter<RdsSocketEvents> {
  readonly stack!: RdsStack;
  /** @internal */ private transportType: number = RDS_TRANS_NONE;
  /** @internal */ private transport: RdsTransport | null = null;
  /** @internal */ private bound: RdsAddress | null = null;
  /** @internal */ private binding = false;
  /** @internal */ private closed = false;
  /** @internal */ private peer: RdsAddress | null = null;

  /** Budgets as the application set them (the kernel stores twice these and uses half). @internal */
  private sndbuf = WMEM_DEFAULT / 2;
  /** @internal */ private rcvbuf = RMEM_DEFAULT / 2;
  /** @internal */ private sndBytes = 0;
  /** @internal */ private rcvBytes = 0;
  /** What the unread messages cost against the hard receive limits (see RxLimiter). */
  private rxMem = 0;
  /** @internal */ private congested = false;
  /** @internal */ private timestamps = false;
  /** @internal */ private recvErr = false;
  /** @internal */ private congMonitor = false;
  /** SO_ZEROCOPY: MSG_ZEROCOPY sends reference the caller's buffers instead of copying them. @internal */
  private zerocopy = false;
  /** Cookies of zero-copy messages whose buffers are free again, not yet reported by recvmsg. @internal */
  private zcookies: number[] = [];
  /** @internal */ private congMask = 0n;
  /** @internal */ private congNotify = 0n;
  /** @internal */ private lastPollCongGen = 0;

  /** @internal */ private readonly rxQueue = new Fifo<Queued>();
  /** @internal */ private lastConn: RdsConnection | null = null;
  /** The last destination address exactly as the caller gave it, and its canonical form. @internal */
  private lastDestGiven: string | null = null;
  /** @internal */ private lastDestCanon = '';
  /** An address already known to be of the bound address's family. @internal */
  private sameFamilyAs = '';
  /** @internal */ private readonly pending = new RdsSendList();
  /** SO_SNDTIMEO over `pending`. */
  private readonly sendTimeout = new SendTimeout(this.pending, (n) =>
    this.stack.counters.add(RDS_CTR.send_cancelled, n),
  );
  /** Reachability of lastConn's peer, read on every send (cheap) to report a peer already down. */
  private lastPeer: PeerState | null = null;
  /** Peers this socket reported 'peer-down' for and not yet 'peer-up'. */
  private downPeers: Set<string> | null = null;
  /** Messages whose send({ confirm }) is still waiting (some acknowledged as queued, not yet read). */
  private readonly confirming = new Set<RdsOutgoing>();
  /** @internal */ private readonly waiters = new Set<Waiter>();
  /** @internal */ private readableQueued = false;

  constructor(opts: RdsSocketOptions = {}) {
    super();
    if (opts === null || typeof opts !== 'object') throw new RdsError('EINVAL', 'options must be an object');
    // Host node seam (lib/host): a socket of an attached stack, or of the default stack while a
    // host node answers, is an AttachedSocket (a subclass) talking to that node.
    if (new.target === RdsSocket && hostHooks.socket !== null) {
      const attached = hostHooks.socket(opts);
      // biome-ignore lint/correctness/noConstructorReturn: `new RdsSocket()` must stay the way to get a socket, attached or not.
      if (attached !== null) return attached;
    }
    this.stack = opts.stack ?? RdsStack.default();
    if (!(this.stack instanceof RdsStack)) throw new RdsError('EINVAL', 'options.stack must be an RdsStack');
    if (opts.transport !== undefined) {
      const t = TRANSPORT_BY_NAME[opts.transport as string];
      if (t === undefined)
        throw new RdsError('EINVAL', `transport must be 'tcp' or 'ib', got ${String(opts.transport)}`);
      this.setTransport(t);
    }
    this.lastPollCongGen = this.stack.congGeneration;
    if (opts.sendTimeout !== undefined) this.sendTimeout.set(intValue(opts.sendTimeout, 'sendTimeout'));
    this.stack.socketOpened();
  }

  /** @internal */ get boundAddress(): string {
    return this.bound?.address ?? '';
  }

  /** @internal */ get boundPort(): number {
    return this.bound?.port ?? 0;
  }

  /** @internal */ private static nextInode = 1;
  /** @internal */ private readonly inode = RdsSocket.nextInode++;

  /** BoundSocket: what rds-info -k shows. @internal */
  info(): SocketInfo {
    return {
      boundAddress: this.bound?.address ?? '0.0.0.0',
      boundPort: this.bound?.port ?? 0,
      connectedAddress: this.peer?.address ?? '0.0.0.0',
      connectedPort: this.peer?.port ?? 0,
      sndbuf: this.sndbuf,
      rcvbuf: this.rcvbuf,
      inode: this.inode,
      transport: this.transport?.name ?? 'none',
    };
  }

  /** BoundSocket: what rds-info -r shows. @internal */
  receiveQueue(): MessageInfo[] {
    const out: MessageInfo[] = [];
    for (const q of this.rxQueue) {
      out.push({
        localAddress: this.boundAddress,
        localPort: this.boundPort,
        peerAddress: q.msg.address,
        peerPort: q.msg.port,
        seq: q.receipt?.seq ?? 0,
        bytes: q.msg.data.length,
      });
    }
    return out;
  }

  /** True after close(). */
  get isClosed(): boolean {
    return this.closed;
  }

  /** @internal */ private checkOpen(what: string): void {
    if (this.closed) throw new RdsError('EBADF', `${what} on a closed socket; make a new RdsSocket`);
  }

  /** @internal */ private setTransport(type: number): void {
    if (this.transport !== null || this.bound !== null || this.binding) {
      throw new RdsError('EOPNOTSUPP', 'SO_RDS_TRANSPORT can only be set once, before bind()');
    }
    const t = this.stack.transportByType(type);
    if (t === undefined || !t.userSelectable) {
      const name = type === RDS_TRANS_IB ? 'InfiniBand (ib)' : `type ${type}`;
      throw new RdsError('ENOPROTOOPT', `the ${name} transport is not available in this stack`);
    }
    this.transport = t;
    this.transportType = type;
  }

  // ---- bind / connect / address ----

  /** bind(2). Port 0 picks an ephemeral port. Resolves once the address is reachable by peers. */
  async bind(addr: { address: string; port?: number }): Promise<void> {
    this.checkOpen('bind()');
    if (this.bound !== null || this.binding)
      throw new RdsError('EINVAL', 'socket is already bound; an RDS socket binds once');
    const ep = parseEndpoint({ port: 0, ...addr }, 'bind address');
    const why = nonUnicastReason(ep.address);
    if (why !== null) throw new RdsError('EINVAL', `cannot bind to ${ep.address}: it ${why}`);
    if (ep.port === 1)
      throw new RdsError('EINVAL', 'port 1 is reserved for the multipath handshake; choose another port');
    if (this.peer !== null && isIPv4(this.peer.address) !== isIPv4(ep.address)) {
      throw new RdsError('EINVAL', 'the default destination set with connect() is of the other address family');
    }
    this.binding = true;
    let port = 0;
    try {
      if (!(await isHostLocalAddress(ep.address))) {
        throw new RdsError(
          'EADDRNOTAVAIL',
          `${ep.address} is not an address of this host; bind to one of its interface addresses or 127.x.x.x`,
        );
      }
      port = ep.port === 0 ? this.stack.ephemeralPort(ep.address) : ep.port;
      this.stack.bindReserve(ep.address, port, this);
      try {
        this.transport = await this.chooseTransport(ep.address);
        this.transportType = this.transport.transType;
      } catch (e) {
        this.stack.unbind(ep.address, port, this);
        throw e;
      }
    } finally {
      this.binding = false;
    }
    if (this.closed) {
      this.stack.unbind(ep.address, port, this);
      throw new RdsError('EBADF', 'socket was closed while bind() was in progress');
    }
    this.bound = { address: ep.address, port };
  }

  /** @internal */ private async chooseTransport(address: string): Promise<RdsTransport> {
    if (this.transport !== null) {
      try {
        await this.transport.laddrCheck(address);
      } catch (e) {
        // With SO_RDS_TRANSPORT preset the kernel answers ENOPROTOOPT; keep our reason.
        if (e instanceof RdsError && e.code !== 'EADDRINUSE') {
          throw new RdsError(
            'ENOPROTOOPT',
            `${address} cannot be used with the ${this.transport.name} transport: ${e.message}`,
            { cause: e },
          );
        }
        throw e;
      }
      return this.transport;
    }
    let last: unknown = null;
    for (const t of this.stack.selectableTransports()) {
      try {
        await t.laddrCheck(address);
        return t;
      } catch (e) {
        if (e instanceof RdsError && e.code === 'EADDRINUSE') throw e;
        last = e;
      }
    }
    if (last instanceof RdsError) throw last;
    throw new RdsError('EADDRNOTAVAIL', `no transport can use ${address}`, { cause: last });
  }

  /** connect(2): sets the default destination; no network activity. */
  connect(addr: { address: string; port: number }): void {
    this.checkOpen('connect()');
    const ep = parseEndpoint(addr, 'destination');
    if (/^(0\.0\.0\.0|::)$/.test(ep.address))
      throw new RdsError('EDESTADDRREQ', 'destination address is unspecified; give a peer address');
    const why = nonUnicastReason(ep.address);
    if (why !== null) throw new RdsError('EINVAL', `cannot send to ${ep.address}: it ${why}`);
    this.peer = ep;
  }

  /** getsockname(2). */
  address(): RdsAddress {
    if (this.bound === null) throw new RdsError('EINVAL', 'socket is not bound; call bind() first');
    return { ...this.bound };
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
    return this.enqueue(data, dest, opts).len;
  }

  /** @internal */ private enqueue(
    data: RdsData,
    dest: { address: string; port: number } | undefined | null,
    opts: SendmsgOptions | undefined,
  ): RdsOutgoing {
    this.checkOpen('sendmsg()');
    const zcopy = opts === undefined || opts === null ? false : this.zeroCopyRequested(opts);
    let len: number;
    let payload: Uint8Array | readonly Uint8Array[];
    if (data instanceof Uint8Array) {
      payload = data;
      len = data.length;
    } else {
      const g = gather(data);
      // Zero-copy keeps the caller's buffers but not their array: like the kernel's copy of the
      // iovec, a copy made now, so reusing the array after the call cannot change the message.
      payload = g.parts.length === 1 ? g.parts[0]! : zcopy ? g.parts.slice() : g.parts;
      len = g.len;
    }
    let address: string | null = null;
    let port = 0;
    if (dest !== undefined && dest !== null) {
      address = this.destinationAddress(dest);
      port = validatePort((dest as { port?: unknown }).port, 'destination');
    }
    if (this.bound === null) {
      // ENOTCONN, as for a socket never bound (the kernel's rds_sendmsg answer to an unbound
      // socket): until bind() resolves the socket has no address to send from.
      if (this.binding) throw new RdsError('ENOTCONN', 'bind() has not finished; await it before sending');
      throw new RdsError('ENOTCONN', 'socket is not bound; call bind() before sending (RDS has no auto-bind)');
    }
    if (address === null) {
      if (this.peer === null)
        throw new RdsError('ENOTCONN', 'no destination; pass { address, port } or call connect() first');
      ({ address, port } = this.peer);
    }
    if (address !== this.sameFamilyAs && isIPv4(address) !== isIPv4(this.bound.address)) {
      throw new RdsError('EOPNOTSUPP', `cannot send from ${this.bound.address} to ${address}: address families differ`);
    }
    this.sameFamilyAs = address;
    if (len > RDS_MAX_MSG_SIZE)
      throw new RdsError('EMSGSIZE', `message of ${len} bytes exceeds RDS_MAX_MSG_SIZE (${RDS_MAX_MSG_SIZE})`);
    if (len > this.sndbuf) {
      throw new RdsError(
        'EMSGSIZE',
        `message of ${len} bytes exceeds the send buffer (${this.sndbuf} bytes); raise SO_SNDBUF`,
      );
    }
    // Senders talk to the same few peers: keep the last connection rather than rebuild its key.
    let conn = this.lastConn;
    if (conn === null || conn.faddr !== address || conn.reclaimed) {
      conn = this.stack.connForSend(this.bound.address, address, this.transport!);
      this.lastConn = conn;
      this.lastPeer = this.stack.peerEntry(address);
    }
    if (conn.peerCong.test(port)) {
      this.stack.counters.add(RDS_CTR.cong_send_error);
      if (this.congMonitor) this.congMask |= 1n << BigInt(port % 64);
      // Re-test once: an update may have arrived between the test and recording the mask.
      if (conn.peerCong.test(port)) {
        throw flowControlError(
          'ENOBUFS',
          `destination ${address}:${port} is congested; retry after it clears (send() waits, RDS_CONG_MONITOR notifies)`,
        );
      }
    }
    if (this.sndBytes >= this.sndbuf) {
      this.full = true;
      this.stack.counters.add(RDS_CTR.send_queue_full);
      throw this.sendBufferFull();
    }
    const path = conn.pathFor(this.bound.port);
    const msg = zcopy
      ? path.queueZeroCopy(payload, len, this.bound.port, port, this, opts!.zcopyCookie!)
      : path.queue(payload, len, this.bound.port, port, this);
    this.sndBytes += len;
    this.pending.add(msg);
    if (this.sendTimeout.ms > 0) this.sendTimeout.queued(msg);
    if (this.lastPeer!.state !== 'up') this.sendingToUnreachable(address);
    return msg;
  }

  /**
   * EAGAIN, saying who holds the budget. Non-blocking senders get it at message rates and mostly
   * test only `code`: the report walks the send list, so it is made when the message is first
   * read, not when the error is thrown.
   */
  private sendBufferFull(): RdsError {
    const head = `EAGAIN: send buffer full (${this.sndBytes} of ${this.sndbuf} bytes unacknowledged)`;
    const err = flowControlError('EAGAIN', '');
    let text: string | null = null;
    Object.defineProperty(err, 'message', {
      configurable: true,
      enumerable: false,
      get: () => (text ??= `${head}: ${budgetReport(this.pending, (a) => this.stack.peerUnreachableMs(a))}`),
      set: (v: string) => {
        text = v;
      },
    });
    return err;
  }

  /** A message was queued to a peer that is not up: if it is already down, this socket hears of it too. */
  private sendingToUnreachable(address: string): void {
    let peer = this.lastPeer!;
    if (peer.forgotten) peer = this.lastPeer = this.stack.peerEntry(address);
    if (peer.state !== 'down' || this.downPeers?.has(address)) return;
    (this.downPeers ??= new Set()).add(address);
    const ev: PeerEvent = { address, unreachableMs: peer.unreachableMs(), unreachableSince: peer.since };
    // Not from inside sendmsg(): a listener may send again.
    defer(() => {
      if (!this.closed) this.emit('peer-down', ev);
    });
  }

  /** Whether a message to `address` is queued or unacknowledged. */
  private hasTrafficTo(address: string): boolean {
    for (let m = this.pending.first; m !== null; m = m.sockNext) if (m.daddr === address) return true;
    return false;
  }

  /** BoundSocket: the stack declared a peer down. @internal */
  peerDown(ev: PeerEvent): void {
    if (this.closed || this.downPeers?.has(ev.address) || !this.hasTrafficTo(ev.address)) return;
    (this.downPeers ??= new Set()).add(ev.address);
    this.emit('peer-down', ev);
  }

  /** BoundSocket: a peer that was down has a path UP again. @internal */
  peerUp(ev: PeerEvent): void {
    if (this.closed) return;
    const told = this.downPeers?.delete(ev.address) === true;
    if (told || this.hasTrafficTo(ev.address)) this.emit('peer-up', ev);
  }

  /** sendmsg flags and the zero-copy cookie, checked as rds_sendmsg checks them; true for zero-copy. @internal */
  private zeroCopyRequested(opts: SendmsgOptions): boolean {
    if (opts === null || typeof opts !== 'object') throw new RdsError('EINVAL', 'sendmsg options must be an object');
    const flags = opts.flags ?? 0;
    if (typeof flags !== 'number' || !Number.isInteger(flags))
      throw new RdsError('EINVAL', `flags must be an integer, got ${String(flags)}`);
    if ((flags & ~(MSG_DONTWAIT | MSG_CMSG_COMPAT | MSG_ZEROCOPY)) !== 0) {
      throw new RdsError(
        'EOPNOTSUPP',
        `unsupported sendmsg flags 0x${(flags >>> 0).toString(16)}; RDS takes MSG_DONTWAIT and MSG_ZEROCOPY`,
      );
    }
    // As in the kernel, MSG_ZEROCOPY means zero-copy only on a socket that opted in with SO_ZEROCOPY.
    const zcopy = (flags & MSG_ZEROCOPY) !== 0 && this.zerocopy;
    if (zcopy && this.transport !== null && this.transportType !== RDS_TRANS_TCP) {
      throw new RdsError('EOPNOTSUPP', `MSG_ZEROCOPY works on TCP sockets only; this one uses ${this.transport.name}`);
    }
    const cookie = opts.zcopyCookie;
    if (cookie === undefined) {
      if (zcopy) throw new RdsError('EINVAL', 'MSG_ZEROCOPY needs a zcopyCookie (a u32) to report the completion with');
      return false;
    }
    if (!zcopy) {
      throw new RdsError(
        'EINVAL',
        this.zerocopy
          ? 'zcopyCookie is only for MSG_ZEROCOPY sends; add MSG_ZEROCOPY to flags'
          : 'zcopyCookie needs zero-copy: set SO_ZEROCOPY on the socket and pass MSG_ZEROCOPY',
      );
    }
    if (typeof cookie !== 'number' || !Number.isInteger(cookie) || cookie < 0 || cookie > 0xffffffff) {
      throw new RdsError('EINVAL', `zcopyCookie must be an integer in [0, 2^32), got ${String(cookie)}`);
    }
    return true;
  }

  /**
   * The canonical form of a destination address, checked to be a unicast address. Senders repeat
   * the same destination: the last one given is remembered exactly as given, so the common case
   * is one string comparison.
   * @internal
   */
  private destinationAddress(dest: unknown): string {
    const given = typeof dest === 'object' ? (dest as { address?: unknown }).address : undefined;
    if (given === this.lastDestGiven && this.lastDestGiven !== null) return this.lastDestCanon;
    const to = parseEndpoint(dest, 'destination');
    const why = checkedAddress(to.address).nonUnicast;
    if (why !== null) throw new RdsError('EINVAL', `cannot send to ${to.address}: it ${why}`);
    this.lastDestGiven = given as string;
    this.lastDestCanon = to.address;
    return to.address;
  }

  /**
   * sendmsg(2), blocking: waits for send-buffer room and for an uncongested destination, and with
   * `confirm` until the peer has the message. `timeout` and `signal` cover the whole wait.
   */
  async send(data: RdsData, dest?: { address: string; port: number } | null, opts: SendOptions = {}): Promise<number> {
    const signal = combineSignals(opts?.signal, opts?.timeout);
    let msg: RdsOutgoing;
    for (;;) {
      if (signal?.aborted) throw abortError(signal, 'send()');
      // No room: wait without going through an EAGAIN exception.
      if (!this.closed && this.bound !== null && this.sndBytes >= this.sndbuf) {
        await this.waitFor('room', signal, 'send()');
        continue;
      }
      try {
        msg = this.enqueue(data, dest, opts);
        break;
      } catch (e) {
        if (!(e instanceof RdsError) || (e.code !== 'EAGAIN' && e.code !== 'ENOBUFS')) throw e;
        if (e.code === 'ENOBUFS') this.stack.counters.add(RDS_CTR.cong_send_blocked);
        await this.waitFor(e.code === 'ENOBUFS' ? 'cong' : 'room', signal, 'send()');
      }
    }
    const len = msg.len;
    if (!opts?.confirm || (msg.done && !msg.cancelled)) return len;
    if (msg.done) throw new RdsError('ECANCELED', 'the message was cancelled before the peer had it');
    await new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        if (msg.done) {
          // Acknowledged as queued: it is at the peer and cannot be taken back; stop waiting.
          msg.confirm(abortError(signal!, 'send()'));
          return;
        }
        // Give up on this message exactly as RDS_CANCEL_SENT_TO would: never (re)transmitted.
        this.stack.counters.add(RDS_CTR.send_cancelled);
        msg.complete(abortError(signal!, 'send()'));
      };
      msg.settle = (err) => {
        signal?.removeEventListener('abort', onAbort);
        this.confirming.delete(msg);
        if (err) reject(err);
        else resolve();
      };
      this.confirming.add(msg);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
    return len;
  }

  /** SendOwner: ask the peer for an ack once half the send budget is in flight. @internal */
  wantsAck(): boolean {
    return this.sndBytes * 2 >= this.sndbuf;
  }

  /** SendOwner: a message was acknowledged or cancelled. */
  /** The budget was exhausted (EAGAIN given or about to be): 'writable' follows at half. @internal */
  private full = false;

  /** SendOwner: a zero-copy message's buffers are no longer referenced. @internal */
  zcopyReleased(cookie: number): void {
    if (this.closed) return;
    this.zcookies.push(cookie);
    this.wakeAll();
    this.announceReadable();
  }

  /** @internal */ messageDone(msg: RdsOutgoing): void {
    if (this.sndBytes >= this.sndbuf) this.full = true;
    this.sndBytes -= msg.len;
    this.pending.delete(msg);
    if (this.waiters.size > 0 && (this.sndBytes < this.sndbuf || this.pending.size === 0)) this.wakeAll();
    // Like a stream's low-water mark: announce room once half the budget is free, so a
    // non-blocking sender refills in batches instead of one EAGAIN per acknowledgement.
    if (this.full && this.sndBytes * 2 <= this.sndbuf) {
      this.full = false;
      if (!this.closed) this.emit('writable');
    }
  }

  /**
   * Resolves once every message this socket has queued is acknowledged or cancelled (including by
   * SO_SNDTIMEO). A signal already aborted rejects at once.
   */
  async flush(opts: WaitOptions = {}): Promise<void> {
    const signal = combineSignals(opts?.signal, opts?.timeout);
    while (this.pending.size > 0) {
      this.checkOpen('flush()');
      await this.waitFor('flush', signal, 'flush()');
    }
  }

  /** RDS_CANCEL_SENT_TO: drop every queued or unacknowledged message to (address, port). @internal */
  private cancelSentTo(value: unknown): void {
    if (this.bound === null) throw new RdsError('ENOTCONN', 'RDS_CANCEL_SENT_TO needs a bound socket');
    const ep = parseEndpoint(value, 'RDS_CANCEL_SENT_TO value');
    let n = 0;
    for (const m of this.pending.toArray()) {
      if (m.daddr === ep.address && m.dport === ep.port) {
        m.complete(new RdsError('ECANCELED', `cancelled by RDS_CANCEL_SENT_TO ${ep.address}:${ep.port}`));
        n++;
      }
    }
    // Already at the peer (acknowledged as queued, not yet read): nothing to remove, stop waiting.
    for (const m of [...this.confirming]) {
      if (m.done && m.daddr === ep.address && m.dport === ep.port) {
        m.confirm(new RdsError('ECANCELED', `confirmation abandoned by RDS_CANCEL_SENT_TO ${ep.address}:${ep.port}`));
      }
    }
    this.stack.counters.add(RDS_CTR.send_cancelled, n);
  }

  // ---- receive ----

  /** BoundSocket: the stack delivers a message; `receipt` is told when the application takes it. @internal */
  enqueueIncoming(msg: RdsMessage, receipt: Receipt | null): boolean {
    if (this.closed) {
      this.stack.counters.add(RDS_CTR.recv_drop_dead_sock);
      return false;
    }
    if (this.timestamps) msg.timestamp = performance.timeOrigin + performance.now();
    this.rxQueue.push({ msg, receipt });
    this.stack.counters.add(RDS_CTR.recv_queued);
    this.rcvDelta(msg.data.length);
    this.rxCharge(msg.data.length + RX_MSG_OVERHEAD);
    this.wakeAll();
    this.announceReadable();
    return true;
  }

  /** BoundSocket: a congestion map from `conn` arrived; `mask` says which port groups cleared. @internal */
  congestionUpdated(_conn: RdsConnection, mask: bigint): void {
    if (this.congMonitor) {
      const hit = this.congMask & mask;
      if (hit !== 0n) {
        this.congNotify |= hit;
        this.congMask &= ~hit;
        this.wakeAll();
        this.announceReadable();
      }
    }
  }

  /** @internal */ private announceReadable(): void {
    if (this.readableQueued) return;
    this.readableQueued = true;
    defer(() => {
      this.readableQueued = false;
      if (!this.closed && (this.rxQueue.length > 0 || this.congNotify !== 0n || this.zcookies.length > 0))
        this.emit('readable');
    });
  }

  /** rds_recv_rcvbuf_delta: set the port's congestion bit above SO_RCVBUF, clear it below half. @internal */
  private rcvDelta(delta: number): void {
    this.rcvBytes += delta;
    if (this.bound === null) return;
    if (!this.congested && this.rcvBytes > this.rcvbuf) {
      this.congested = true;
      if (this.stack.congMap(this.bound.address).set(this.bound.port)) this.stack.localCongChanged(this.bound.address);
    } else if (this.congested && this.rcvBytes < this.rcvbuf / 2) {
      this.congested = false;
      if (this.stack.congMap(this.bound.address).clear(this.bound.port))
        this.stack.localCongChanged(this.bound.address);
    }
  }

  private rxCharge(delta: number): void {
    this.rxMem += delta;
    this.stack.rxLimit.charge(delta);
  }

  /** BoundSocket: unread messages past `factor` x SO_RCVBUF (see RxLimiter). @internal */
  rxOverLimit(factor: number, minBytes = 0): boolean {
    return this.rxMem > Math.max(this.rcvbuf * factor, minBytes);
  }

  /** recvmsg(2), non-blocking: the next message, or null when none is queued. */
  recvmsg(): RdsMessage | null {
    this.checkOpen('recvmsg()');
    if (this.congNotify !== 0n) {
      const mask = this.congNotify;
      this.congNotify = 0n;
      return { data: Buffer.alloc(0), address: '', port: 0, congestionUpdate: mask };
    }
    const q = this.rxQueue.shift();
    if (q === undefined) {
      if (this.zcookies.length === 0) return null;
      return { data: Buffer.alloc(0), address: '', port: 0, zcopyCompletions: this.takeZcookies() };
    }
    const msg = q.msg;
    // Like the kernel's cmsg, pending completions ride on the next message read.
    if (this.zcookies.length > 0) msg.zcopyCompletions = this.takeZcookies();
    this.stack.counters.add(RDS_CTR.recv_bytes_freed_fromsock, msg.data.length);
    this.stack.counters.add(RDS_CTR.copy_to_user);
    this.rcvDelta(-msg.data.length);
    this.rxCharge(-(msg.data.length + RX_MSG_OVERHEAD));
    if (q.receipt !== null) {
      if (this.holdReceipt !== null) this.holdReceipt(q.receipt);
      else q.receipt.owner.consumed(q.receipt);
    }
    return msg;
  }

  /**
   * Host node seam (lib/host): when set, recvmsg() hands each message's receipt here instead of
   * telling the sender it was read; the host node does that once the attached application has.
   * @internal
   */
  holdReceipt: ((r: Receipt) => void) | null = null;

  /** Up to RDS_MAX_ZCOOKIES completions, oldest first. @internal */
  private takeZcookies(): number[] {
    if (this.zcookies.length <= RDS_MAX_ZCOOKIES) {
      const all = this.zcookies;
      this.zcookies = [];
      return all;
    }
    return this.zcookies.splice(0, RDS_MAX_ZCOOKIES);
  }

  /**
   * recvmsg(2), blocking: the next message; rejects with EBADF if the socket closes first, with
   * the signal's reason if it is aborted, with ETIMEDOUT after `timeout`.
   */
  async recv(opts: WaitOptions = {}): Promise<RdsMessage> {
    const signal = combineSignals(opts?.signal, opts?.timeout);
    for (;;) {
      if (signal?.aborted) throw abortReason(signal, 'recv()');
      const m = this.recvmsg();
      if (m !== null) return m;
      await this.waitFor('data', signal, 'recv()', abortReason);
    }
  }

  /** `for await (const msg of sock)`: ends when the socket is closed. Breaking out leaves it open. */
  async *[Symbol.asyncIterator](): AsyncGenerator<RdsMessage, void, undefined> {
    yield* this.messages();
  }

  /** Like the async iterator, with an AbortSignal that ends the loop by throwing ETIMEDOUT (AbortSignal.timeout) or ECANCELED, its reason as `cause`. */
  async *messages(opts: { signal?: AbortSignal } = {}): AsyncGenerator<RdsMessage, void, undefined> {
    for (;;) {
      if (this.closed) return;
      let m: RdsMessage;
      try {
        m = await this.recv(opts);
      } catch (e) {
        if (e instanceof RdsError && e.code === 'EBADF' && this.closed) return;
        throw e;
      }
      yield m;
    }
  }

  // ---- waiting ----

  /** @internal */
  private waitFor(
    what: 'data' | 'room' | 'cong' | 'flush',
    signal: AbortSignal | undefined,
    op: string,
    reasonOf: (signal: AbortSignal, op: string) => unknown = abortError,
  ): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.closed) {
        reject(new RdsError('EBADF', `${op} interrupted: the socket was closed`));
        return;
      }
      // An 'abort' listener added to a signal that already fired is never called.
      if (signal?.aborted) {
        reject(reasonOf(signal, op));
        return;
      }
      let settled = false;
      const finish = (err?: unknown): void => {
        if (settled) return;
        settled = true;
        this.waiters.delete(w);
        this.stack.removeCongWaiter(w.wake);
        signal?.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve();
      };
      const w: Waiter = {
        wake: () => finish(this.closed ? new RdsError('EBADF', `${op} interrupted: the socket was closed`) : undefined),
      };
      const onAbort = (): void => finish(reasonOf(signal!, op) as Error);
      this.waiters.add(w);
      if (what === 'cong') this.stack.addCongWaiter(w.wake);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Waiters re-check their condition on waking, so waking all of them is always correct. @internal */
  private wakeAll(): void {
    if (this.waiters.size === 0) return;
    const ws = [...this.waiters];
    for (const w of ws) w.wake();
  }

  // ---- poll ----

  /** poll(2) bits as the kernel reports them (spec §6.6). */
  poll(): number {
    let mask = 0;
    if (this.closed) return 0x20; // POLLNVAL
    if (this.rxQueue.length > 0 || this.congNotify !== 0n || this.zcookies.length > 0) mask |= POLLIN | POLLRDNORM;
    if (!this.congMonitor && this.lastPollCongGen !== this.stack.congGeneration) {
      this.lastPollCongGen = this.stack.congGeneration;
      mask |= POLLIN | POLLRDNORM | POLLWRBAND;
    }
    if (this.sndBytes < this.sndbuf) mask |= POLLOUT | POLLWRNORM;
    return mask;
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
  /** SO_RDS_TRANSPORT before bind: RDS_TRANS_TCP or RDS_TRANS_IB. */
  setsockopt(
    level: typeof SOL_RDS,
    optname: typeof SO_RDS_TRANSPORT,
    value: typeof RDS_TRANS_TCP | typeof RDS_TRANS_IB,
  ): void;
  /** An option given by a computed number; checked at run time (ENOPROTOOPT, EINVAL). */
  setsockopt(level: number, optname: number, value: number | boolean): void;
  setsockopt(level: number, optname: number, value: unknown): void {
    this.checkOpen('setsockopt()');
    if (level === SOL_SOCKET) {
      switch (optname) {
        case SO_SNDBUF: {
          const v = intValue(value, 'SO_SNDBUF');
          if (v < 0) throw new RdsError('EINVAL', 'SO_SNDBUF must not be negative');
          this.sndbuf = Math.max(v, SOCK_MIN_SNDBUF / 2);
          if (this.sndBytes < this.sndbuf) this.wakeAll();
          return;
        }
        case SO_RCVBUF: {
          const v = intValue(value, 'SO_RCVBUF');
          if (v < 0) throw new RdsError('EINVAL', 'SO_RCVBUF must not be negative');
          this.rcvbuf = Math.max(v, SOCK_MIN_RCVBUF / 2);
          this.rcvDelta(0);
          return;
        }
        case SO_TIMESTAMP:
        case SO_TIMESTAMP_NEW:
          this.timestamps = boolValue(value, 'SO_TIMESTAMP');
          return;
        case SO_ZEROCOPY: {
          const v = intValue(value, 'SO_ZEROCOPY');
          if (v !== 0 && v !== 1) throw new RdsError('EINVAL', `SO_ZEROCOPY takes 0 or 1, got ${v}`);
          this.zerocopy = v === 1;
          return;
        }
        case SO_SNDTIMEO:
        case SO_SNDTIMEO_NEW:
          this.sendTimeout.set(intValue(value, 'SO_SNDTIMEO'));
          return;
        default:
          throw new RdsError(
            'ENOPROTOOPT',
            `unknown SOL_SOCKET option ${optname} (supported: SO_SNDBUF, SO_RCVBUF, SO_TIMESTAMP, SO_ZEROCOPY, SO_SNDTIMEO)`,
          );
      }
    }
    if (level !== SOL_RDS)
      throw new RdsError('ENOPROTOOPT', `unknown option level ${level}; use SOL_RDS (276) or SOL_SOCKET (1)`);
    switch (optname) {
      case RDS_CANCEL_SENT_TO:
        this.cancelSentTo(value);
        return;
      case RDS_RECVERR:
        this.recvErr = boolValue(value, 'RDS_RECVERR');
        return;
      case RDS_CONG_MONITOR:
        this.congMonitor = boolValue(value, 'RDS_CONG_MONITOR');
        if (!this.congMonitor) {
          this.congMask = 0n;
          this.congNotify = 0n;
        }
        return;
      case SO_RDS_TRANSPORT: {
        const v = intValue(value, 'SO_RDS_TRANSPORT');
        if (this.transport !== null || this.bound !== null || this.binding) {
          throw new RdsError('EOPNOTSUPP', 'SO_RDS_TRANSPORT can only be set once, before bind()');
        }
        if (v < 0 || v >= 3)
          throw new RdsError('EINVAL', `SO_RDS_TRANSPORT must be RDS_TRANS_IB (0) or RDS_TRANS_TCP (2), got ${v}`);
        this.setTransport(v);
        return;
      }
      default:
        throw new RdsError('ENOPROTOOPT', `unknown SOL_RDS option ${optname}`);
    }
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
  getsockopt(level: number, optname: number): number {
    this.checkOpen('getsockopt()');
    if (level === SOL_SOCKET) {
      switch (optname) {
        // Linux reports twice the value set (the kernel's bookkeeping overhead allowance).
        case SO_SNDBUF:
          return this.sndbuf * 2;
        case SO_RCVBUF:
          return this.rcvbuf * 2;
        case SO_TIMESTAMP:
        case SO_TIMESTAMP_NEW:
          return this.timestamps ? 1 : 0;
        case SO_ZEROCOPY:
          return this.zerocopy ? 1 : 0;
        case SO_SNDTIMEO:
        case SO_SNDTIMEO_NEW:
          return this.sendTimeout.ms;
        default:
          throw new RdsError('ENOPROTOOPT', `unknown SOL_SOCKET option ${optname}`);
      }
    }
    if (level !== SOL_RDS) throw new RdsError('ENOPROTOOPT', `unknown option level ${level}`);
    switch (optname) {
      case RDS_RECVERR:
        return this.recvErr ? 1 : 0;
      case RDS_CONG_MONITOR:
        return this.congMonitor ? 1 : 0;
      case SO_RDS_TRANSPORT:
        return this.transportType;
      default:
        throw new RdsError('ENOPROTOOPT', `SOL_RDS option ${optname} cannot be read`);
    }
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
    if (this.bound !== null) {
      if (this.congested) {
        const map = this.stack.congMap(this.bound.address);
        if (map.clear(this.bound.port)) this.stack.localCongChanged(this.bound.address);
        this.congested = false;
      }
      this.stack.unbind(this.bound.address, this.bound.port, this);
    }
    // Unread messages are discarded, as by the kernel; an rds-socket sender hears it (its
    // confirmations reject with ECONNRESET), an older one counts them as taken.
    for (const q of this.rxQueue.drain()) if (q.receipt !== null) q.receipt.owner.consumed(q.receipt, RX_DISCARDED);
    this.rcvBytes = 0;
    this.rxCharge(-this.rxMem);
    this.zcookies = [];
    this.sendTimeout.stop();
    this.downPeers = null;
    for (const m of this.pending.toArray())
      m.complete(new RdsError('ECANCELED', 'the socket was closed before the peer had the message'));
    for (const m of [...this.confirming])
      m.confirm(new RdsError('ECANCELED', 'the socket was closed before the peer reported the message read'));
    this.wakeAll();
    this.stack.socketClosed();
    this.emit('close');
  }
}

function gather(data: RdsData): { parts: Uint8Array[]; len: number } {
  if (data instanceof Uint8Array) return { parts: [data], len: data.length };
  if (Array.isArray(data)) {
    let len = 0;
    for (const p of data) {
      if (!(p instanceof Uint8Array))
        throw new RdsError('EINVAL', 'every element of a data array must be a Buffer or Uint8Array');
      len += p.length;
    }
    return { parts: data as Uint8Array[], len };
  }
  throw new RdsError('EINVAL', 'data must be a Buffer, a Uint8Array or an array of them');
}

function intValue(v: unknown, name: string): number {
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (typeof v !== 'number' || !Number.isInteger(v))
    throw new RdsError('EINVAL', `${name} takes an integer, got ${typeof v === 'number' ? v : typeof v}`);
  return v;
}

function boolValue(v: unknown, name: string): boolean {
  return intValue(v, name) !== 0;
}
