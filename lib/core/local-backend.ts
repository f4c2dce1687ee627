// The backend of a socket living in this process's stack (the kernel's struct rds_sock and the
// socket's side of send.c): bind with its transport choice, the send budget and the send list,
// confirmations, peer reachability reports, RDS_CANCEL_SENT_TO, close. The receive side (the
// receive queue, the port's congestion bit, notifications) is its part LocalRx (local-rx.ts).
// It is what the stack and the paths see of the socket (BoundSocket, SendOwner); RdsSocket
// (socket.ts) checks the arguments before anything reaches it.
import { EventEmitter } from 'eventemitter3';
import {
  RDS_RDMA_CANCELED,
  RDS_TRANS_IB,
  RDS_TRANS_NONE,
  RDS_TRANS_TCP,
  SO_SNDTIMEO,
  SO_SNDTIMEO_NEW,
  SOL_SOCKET,
} from '../constants.js';
import { RdsError } from '../errors.js';
import { isHostLocalAddress, type RdsAddress } from './address.js';
import type { RdsConnection } from './connection.js';
import { defer } from './defer.js';
import type { RdsInfoResult } from './info-result.js';
import { infoGetsockopt } from './info-sockopt.js';
import { confirmationOf } from './ext/local-confirm.js';
import { LocalRx } from './local-rx.js';
import { RdsSendList, type RdsOutgoing } from './message.js';
import type { PeerEvent, PeerState } from './ext/peer-state.js';
import { rdmaUnsupported } from './rdma.js';
import { MrTable, mapRegion, prepareRdmaControl, type RdmaControl } from './rdma-ops.js';
import type { RxSocketLimit } from './ext/rx-limit.js';
import { sendBufferFull } from './ext/send-report.js';
import { SendTimeout } from './send-timeout.js';
import type { BackendEvents, CheckedSend, EnqueueResult, SocketBackend } from './socket-backend.js';
import { SocketOptionValues } from './socket-options.js';
import type { SendmsgOptions } from './socket-types.js';
import type { RdsStack } from './stack.js';
import { RDS_CTR } from './stats.js';
import type { RdsTransport } from './transport.js';
import type { MessageInfo, RdsMessage, Receipt, SocketInfo } from './types.js';

/**
 * What a host node hears of a socket it runs for an attached process. 'send-done': a message
 * left the send list (acknowledged or cancelled): the node gives the process its budget back
 * only then, as SO_SNDBUF counts in the kernel. 'receipt': the receipt of the message take() just
 * returned; with a listener the sender is told it was read only when the listener says so
 * (the node does, once the attached application has read it), without one at once.
 * @internal
 */
export interface LocalBackendEvents {
  'send-done': () => void;
  receipt: (r: Receipt) => void;
}

let nextInode = 1;

/** @internal */
export class LocalBackend extends EventEmitter<LocalBackendEvents> implements SocketBackend {
  readonly options = new SocketOptionValues();
  readonly nodePath = undefined;
  /** @internal */ events: BackendEvents | null = null;
  transportType: number = RDS_TRANS_NONE;
  transport: RdsTransport | null = null;
  bound: RdsAddress | null = null;
  /** connect()'s destination, for rds-info. */
  private peer: RdsAddress | null = null;
  closed = false;
  private readonly inode = nextInode++;
  /** The receive side. */
  readonly rx: LocalRx;
  private sndBytes = 0;
  /** The budget was exhausted (EAGAIN given or about to be): 'writable' follows at half. */
  private full = false;
  /** RDS_GET_MR regions, once the socket registered one (RDMA transports only). */
  private mrs: MrTable | null = null;
  private lastConn: RdsConnection | null = null;
  /** Reachability of lastConn's peer, read on every send (cheap) to report a peer already down. */
  private lastPeer: PeerState | null = null;
  /** Peers this socket reported 'peer-down' for and not yet 'peer-up'. */
  private downPeers: Set<string> | null = null;
  private readonly pending = new RdsSendList();
  /** SO_SNDTIMEO over `pending`. */
  private readonly sendTimeout: SendTimeout;
  /** Messages whose send({ confirm }) is still waiting (some acknowledged as queued, not yet read). */
  private readonly confirming = new Set<RdsOutgoing>();

  constructor(readonly stack: RdsStack) {
    super();
    this.sendTimeout = new SendTimeout(this.pending, (n) => this.stack.counters.add(RDS_CTR.send_cancelled, n));
    this.rx = new LocalRx(this);
  }

  open(events: BackendEvents): void {
    this.events = events;
  }

  get boundAddress(): string {
    return this.bound?.address ?? '';
  }

  get boundPort(): number {
    return this.bound?.port ?? 0;
  }

  get nonTcpTransport(): string | null {
    return this.transport !== null && this.transportType !== RDS_TRANS_TCP ? this.transport.name : null;
  }

  get transportName(): string | null {
    return this.transport?.name ?? null;
  }

  get rdmaCapable(): boolean {
    return this.transport?.rdma !== undefined;
  }

  failure(): RdsError | null {
    return null;
  }

  takeRefusal(): RdsError | null {
    return null;
  }

  connected(peer: RdsAddress): void {
    this.peer = peer;
  }

  setTransport(type: number): void {
    const t = this.stack.transports.byType(type);
    if (t === undefined || !t.userSelectable) {
      const name = type === RDS_TRANS_IB ? 'InfiniBand (ib)' : `type ${type}`;
      throw new RdsError('ENOPROTOOPT', `the ${name} transport is not available in this stack`);
    }
    this.transport = t;
    this.transportType = type;
  }

  tosMap(tos: number): number | null {
    return this.transport?.tosMap?.(tos) ?? null;
  }

  async bind(ep: RdsAddress): Promise<void> {
    let port = 0;
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
    if (this.closed) {
      this.stack.binds.unbind(ep.address, port, this);
      throw new RdsError('EBADF', 'socket was closed while bind() was in progress');
    }
    this.bound = { address: ep.address, port };
  }

  private async chooseTransport(address: string): Promise<RdsTransport> {
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

  // ---- send ----

  rdmaControl(opts: SendmsgOptions, laddr: string): RdmaControl {
    const rdma = this.transport!.rdma!;
    return prepareRdmaControl(opts, this.mrs, this.rx, () => rdma.atomics(laddr));
  }

  rdmaRefusal(what: string): RdsError {
    return rdmaUnsupported(this.transport, what);
  }

  regions(create: boolean): MrTable | null {
    if (create) this.mrs ??= new MrTable(this.transport!.rdma!);
    return this.mrs;
  }

  enqueue(m: CheckedSend): EnqueueResult {
    const bound = this.bound!;
    const { address, port } = m;
    // Senders talk to the same few peers: keep the last connection rather than rebuild its key.
    let conn = this.lastConn;
    if (conn === null || conn.faddr !== address || conn.reclaimed) {
      conn = this.stack.connForSend(bound.address, address, this.transport!, m.tos);
      this.lastConn = conn;
      this.lastPeer = this.stack.peerEntry(address);
    }
    if (conn.peerCong.test(port)) {
      this.stack.counters.add(RDS_CTR.cong_send_error);
      this.rx.congestedSend(port);
      // Re-test once: an update may have arrived between the test and recording the mask.
      if (conn.peerCong.test(port)) return 'ENOBUFS';
    }
    if (this.sndBytes >= this.options.sndbuf) {
      this.full = true;
      this.stack.counters.add(RDS_CTR.send_queue_full);
      return 'EAGAIN';
    }
    const path = conn.pathFor(bound.port);
    const rdmaCtl = m.rdma;
    let exts = rdmaCtl?.exts;
    // rdmaMap: registered only now that nothing can refuse the message, so a refused send leaves
    // no region behind (the kernel registers first and keeps it on later errors).
    if (rdmaCtl?.map) exts = [mapRegion(this.regions(true)!, bound.address, rdmaCtl.map)];
    const msg = m.zcopy
      ? path.tx.queueZeroCopy(m.payload, m.len, bound.port, port, this, m.zcopyCookie!)
      : path.tx.queue(m.payload, m.len, bound.port, port, this, exts, m.wire);
    if (rdmaCtl?.op) msg.rdma = rdmaCtl.op;
    this.sndBytes += m.len;
    this.pending.add(msg);
    if (this.sendTimeout.ms > 0) this.sendTimeout.queued(msg);
    if (this.lastPeer!.state !== 'up') this.sendingToUnreachable(address);
    return m.confirm ? confirmationOf(msg, this.confirming, this.stack.counters) : m.len;
  }

  /** EAGAIN, saying who holds the budget (send-report.ts). */
  fullError(): RdsError {
    return sendBufferFull(this.sndBytes, this.options.sndbuf, this.pending, (a) => this.stack.peerUnreachableMs(a));
  }

  hasRoom(_waiting: boolean): boolean {
    return this.sndBytes < this.options.sndbuf;
  }

  readonly watchCongestion = (wake: () => void): (() => void) => {
    this.stack.counters.add(RDS_CTR.cong_send_blocked);
    this.stack.addCongWaiter(wake);
    return () => this.stack.removeCongWaiter(wake);
  };

  /** A message was queued to a peer that is not up: if it is already down, this socket hears of it too. */
  private sendingToUnreachable(address: string): void {
    let peer = this.lastPeer!;
    if (peer.forgotten) peer = this.lastPeer = this.stack.peerEntry(address);
    if (peer.state !== 'down' || this.downPeers?.has(address)) return;
    (this.downPeers ??= new Set()).add(address);
    const ev: PeerEvent = { address, unreachableMs: peer.unreachableMs(), unreachableSince: peer.since };
    // Not from inside sendmsg(): a listener may send again.
    defer(() => {
      if (!this.closed) this.events!.peer('peer-down', ev);
    });
  }

  /** Whether a message to `address` is queued or unacknowledged. */
  private hasTrafficTo(address: string): boolean {
    for (let m = this.pending.first; m !== null; m = m.sockNext) if (m.daddr === address) return true;
    return false;
  }

  /** BoundSocket: the stack declared a peer down. */
  peerDown(ev: PeerEvent): void {
    if (this.closed || this.downPeers?.has(ev.address) || !this.hasTrafficTo(ev.address)) return;
    (this.downPeers ??= new Set()).add(ev.address);
    this.events!.peer('peer-down', ev);
  }

  /** BoundSocket: a peer that was down has a path UP again. */
  peerUp(ev: PeerEvent): void {
    if (this.closed) return;
    const told = this.downPeers?.delete(ev.address) === true;
    if (told || this.hasTrafficTo(ev.address)) this.events!.peer('peer-up', ev);
  }

  /** SendOwner: ask the peer for an ack once half the send budget is in flight. */
  wantsAck(): boolean {
    return this.sndBytes * 2 >= this.options.sndbuf;
  }

  /** SendOwner: a zero-copy message's buffers are no longer referenced. */
  zcopyReleased(cookie: number): void {
    this.rx.zcopyReleased(cookie);
  }

  /** Bytes queued and not yet acknowledged or cancelled: what SO_SNDBUF counts. */
  get queuedBytes(): number {
    return this.sndBytes;
  }

  /** SendOwner: a message was acknowledged or cancelled. */
  messageDone(msg: RdsOutgoing): void {
    // A cancelled message's RDMA op is reported cancelled (RDS_CANCEL_SENT_TO, SO_SNDTIMEO).
    if (msg.rdma && msg.cancelled) msg.rdma.finish(RDS_RDMA_CANCELED);
    const sndbuf = this.options.sndbuf;
    if (this.sndBytes >= sndbuf) this.full = true;
    this.sndBytes -= msg.len;
    this.pending.delete(msg);
    if (this.sndBytes < sndbuf || this.pending.size === 0) this.events!.wake();
    // Like a stream's low-water mark: announce room once half the budget is free, so a
    // non-blocking sender refills in batches instead of one EAGAIN per acknowledgement.
    if (this.full && this.sndBytes * 2 <= sndbuf) {
      this.full = false;
      if (!this.closed) this.events!.writable();
    }
    this.emit('send-done');
  }

  flushed(): boolean {
    return this.pending.size === 0;
  }

  /** RDS_CANCEL_SENT_TO: drop every queued or unacknowledged message to (address, port). */
  cancelSentTo(ep: RdsAddress): void {
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

  optionSet(level: number, name: number): void {
    if (level === SOL_SOCKET && (name === SO_SNDTIMEO || name === SO_SNDTIMEO_NEW))
      this.sendTimeout.set(this.options.sndtimeo);
    else this.rx.optionSet(level, name);
  }

  // ---- receive (LocalRx) and what the stack asks of a bound socket ----

  take(): RdsMessage | null {
    return this.rx.take();
  }

  peek(): RdsMessage | null {
    return this.rx.peek();
  }

  readable(): boolean {
    return this.rx.readable();
  }

  congGeneration(): number {
    return this.stack.congGeneration;
  }

  pollErr(): boolean {
    return false;
  }

  enqueueIncoming(msg: RdsMessage, receipt: Receipt | null, header?: Buffer): boolean {
    return this.rx.enqueue(msg, receipt, header);
  }

  rxOverLimit(limit: RxSocketLimit): boolean {
    return this.rx.overLimit(limit);
  }

  congestionUpdated(_conn: RdsConnection, mask: bigint): void {
    this.rx.congestionUpdated(mask);
  }

  /** exthdr RDMA, the peer's op on our region `rkey` is done (rds_rdma_unuse). */
  rdmaUsed(rkey: number): void {
    this.mrs?.used(rkey);
  }

  receiveQueue(): MessageInfo[] {
    return this.rx.receiveQueue();
  }

  /** What rds-info -k shows. */
  async rdsInfo(optname: number, buffer: Uint8Array): Promise<RdsInfoResult> {
    return infoGetsockopt(() => this.stack.info(), optname, buffer);
  }

  info(): SocketInfo {
    return {
      boundAddress: this.bound?.address ?? '0.0.0.0',
      boundPort: this.bound?.port ?? 0,
      connectedAddress: this.peer?.address ?? '0.0.0.0',
      connectedPort: this.peer?.port ?? 0,
      sndbuf: this.options.sndbuf,
      rcvbuf: this.options.rcvbuf,
      inode: this.inode,
      transport: this.transport?.name ?? 'none',
    };
  }

  /** BoundSocket: the stack closes its sockets (through the socket, so it knows). */
  close(): Promise<void> {
    return this.events!.close();
  }

  release(): null {
    this.closed = true;
    this.rx.release();
    if (this.bound !== null) this.stack.binds.unbind(this.bound.address, this.bound.port, this);
    // The socket's memory regions go with it (rds_rdma_drop_keys).
    this.mrs?.clear();
    this.sendTimeout.stop();
    this.downPeers = null;
    for (const m of this.pending.toArray())
      m.complete(new RdsError('ECANCELED', 'the socket was closed before the peer had the message'));
    for (const m of [...this.confirming])
      m.confirm(new RdsError('ECANCELED', 'the socket was closed before the peer reported the message read'));
    return null;
  }
}
