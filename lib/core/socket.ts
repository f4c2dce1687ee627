import { isIPv4 } from 'node:net';
import { RDS_TRANS_IB, RDS_TRANS_TCP } from '../constants.js';
import { RdsError } from '../errors.js';
import { isHostLocalAddress, nonUnicastReason, parseEndpoint, type RdsAddress } from './address.js';
import { RdsStack, type SocketInfo } from './stack.js';
import type { RdsTransport } from './transport.js';
import { RX_DISCARDED } from './rx-ack.js';
import { hostHooks } from './host-hooks.js';

import { SocketOptions, intValue } from './socket-options.js';
import type { RdsSocketOptions } from './socket-types.js';

export type {
  RdsData,
  RdsSocketEvents,
  RdsSocketOptions,
  SendmsgOptions,
  SendOptions,
  WaitOptions,
} from './socket-types.js';

const TRANSPORT_BY_NAME: Record<string, number> = { tcp: RDS_TRANS_TCP, ib: RDS_TRANS_IB };

/**
 * An RDS socket: socket(PF_RDS, SOCK_SEQPACKET, 0). One socket sends to and receives from every
 * peer; the connections underneath belong to the stack and are shared by all its sockets.
 */
// Not `implements BoundSocket, SendOwner`: those are internal interfaces, left out of the
// published declarations (stripInternal); the stack and paths check the shape where they take a socket.
export class RdsSocket extends SocketOptions {
  readonly stack!: RdsStack;

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
      port = ep.port === 0 ? this.stack.binds.ephemeralPort(ep.address) : ep.port;
      this.stack.binds.reserve(ep.address, port, this);
      try {
        this.transport = await this.chooseTransport(ep.address);
        this.transportType = this.transport.transType;
      } catch (e) {
        this.stack.binds.unbind(ep.address, port, this);
        throw e;
      }
    } finally {
      this.binding = false;
    }
    if (this.closed) {
      this.stack.binds.unbind(ep.address, port, this);
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
    for (const t of this.stack.transports.selectable()) {
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
      this.stack.binds.unbind(this.bound.address, this.bound.port, this);
    }
    // Unread messages are discarded, as by the kernel; an rds-socket sender hears it (its
    // confirmations reject with ECONNRESET), an older one counts them as taken.
    for (const q of this.rxQueue.drain()) if (q.receipt !== null) q.receipt.owner.consumed(q.receipt, RX_DISCARDED);
    this.rcvBytes = 0;
    this.rxCharge(-this.rxMem);
    this.zcookies = [];
    this.rdmaNotes = [];
    // The socket's memory regions go with it (rds_rdma_drop_keys).
    this.mrs?.clear();
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
