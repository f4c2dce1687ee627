// The backend of a socket living in a host node: this side keeps what the synchronous calls
// answer from (the send budget, received messages, congested destinations, option values) and
// exchanges frames with the node: SEND and CREDIT out, MSG, SENT and events in. RdsSocket checks
// the arguments before anything reaches it, as for a socket of this process's stack.
import {
  RDS_CANCEL_SENT_TO,
  RDS_HEADER_SIZE,
  RDS_TRANS_IB,
  RDS_TRANS_NONE,
  RDS_TRANS_TCP,
  SIOCRDSSETTOS,
  SO_RDS_MSG_RXPATH_LATENCY,
  SOL_RDS,
} from '../constants.js';
import { abortError, flowControlError, RdsError } from '../errors.js';
import type { RdsAddress } from '../core/address.js';
import { Fifo } from '../core/fifo.js';
import { rdmaUnsupported } from '../core/rdma.js';
import type { MrTable, RdmaControl } from '../core/rdma-ops.js';
import type { BackendEvents, CheckedSend, Confirmation, EnqueueResult, SocketBackend } from '../core/socket-backend.js';
import { SocketOptionValues, socketSideOnly, storeOption } from '../core/socket-options.js';
import { packRxTrace } from '../core/rx-trace.js';
import type { MessageInfo, RdsMessage, SocketInfo } from '../core/types.js';
import { C_ABORT, C_CREDIT, encodeFrame, type Frame } from './protocol.js';
import { readMsgFrame, WIRE_SEND_ABOVE, writeCount, writeSend, writeSendWire } from './hot-frames.js';
import type { AttachedStack } from './attached-stack.js';
import type { NodeLink } from './client.js';
import { UnansweredCalls } from './attached-refusals.js';
import { attachedRdsInfo } from './attached-info.js';
import type { RdsInfoResult } from '../core/info-result.js';

const TRANSPORT_NAMES: Record<number, string> = { [RDS_TRANS_TCP]: 'tcp', [RDS_TRANS_IB]: 'ib' };

/**
 * The send budget (SO_SNDBUF) counts bytes sent and not yet acknowledged by the peer (or failed
 * or cancelled), as the kernel counts it, and so does the node's budget for the whole process;
 * received messages wait here once the node has read them from its socket (at most SO_RCVBUF
 * bytes per socket; the rest stays queued in the node, where it counts against SO_RCVBUF and sets
 * congestion as usual). Option values are kept here and sent on to the node (attached-refusals.ts).
 * @internal
 */
export class NodeBackend implements SocketBackend {
  readonly options = new SocketOptionValues();
  readonly rdmaCapable = false;
  bound: RdsAddress | null = null;
  transportType: number = RDS_TRANS_NONE;
  private events: BackendEvents | null = null;
  private readonly link: NodeLink;
  private sid = 0;
  private calls: UnansweredCalls | null = null;
  private closed = false;
  private dead: RdsError | null = null;
  private readonly rx = new Fifo<RdsMessage>();
  private credit = 0;
  private creditQueued = false;
  private creditMsgs = 0;
  private sndBytes = 0;
  private full = false;
  private readonly cong = new Set<string>();
  private readonly confirms = new Map<number, (e: Error) => void>();
  /** Congestion maps the node received since this socket opened. */
  private congMaps = 0;
  /** SIOCRDSSETTOS's TOS, and whether bind() was asked of the node (after which the node is told at once). */
  private tos = 0;
  private bindAsked = false;

  constructor(readonly stack: AttachedStack) {
    this.link = stack.currentLink();
  }

  open(events: BackendEvents): void {
    this.events = events;
    this.sid = this.link.addSocket(this);
    this.calls = new UnansweredCalls(
      this.link,
      this.sid,
      (level, name, value) => {
        if (!this.closed) storeOption(this.options, level, name, value);
      },
      (e) => this.nodeGone(e),
    );
    this.calls.open();
  }

  get nodePath(): string {
    return this.link.path;
  }

  get nonTcpTransport(): string | null {
    return this.transportType === RDS_TRANS_NONE || this.transportType === RDS_TRANS_TCP ? null : 'ib';
  }

  get transportName(): string | null {
    return TRANSPORT_NAMES[this.transportType] ?? null;
  }

  failure(): RdsError | null {
    return this.dead;
  }

  takeRefusal(): RdsError | null {
    return this.calls!.takeRefusal();
  }

  connected(_peer: RdsAddress): void {}

  setTransport(type: number): void {
    this.transportType = type;
  }

  /** The maps of the node's transports (TcpTransport, IbTransport): TCP keeps 0, IB the TOS. */
  tosMap(tos: number): number | null {
    if (this.transportType === RDS_TRANS_TCP) return 0;
    return this.transportType === RDS_TRANS_IB ? tos : null;
  }

  /** The node's socket takes the TOS with bind(), or at once once bind() was asked (its transport is chosen). */
  tosSet(tos: number): void {
    this.tos = tos;
    if (this.bindAsked) this.calls!.ioctl(SIOCRDSSETTOS, tos);
  }

  async bind(ep: RdsAddress): Promise<void> {
    this.bindAsked = true;
    const r = (await this.link.request('bind', this.sid, {
      address: ep.address,
      port: ep.port,
      ...(this.transportType !== RDS_TRANS_NONE ? { transport: this.transportType } : {}),
      ...(this.tos !== 0 ? { tos: this.tos } : {}),
    })) as { address: string; port: number; transport: number };
    if (this.closed) return;
    this.bound = { address: r.address, port: r.port };
    this.transportType = r.transport;
  }

  // ---- send ----

  rdmaControl(): RdmaControl {
    throw this.rdmaRefusal('sendmsg() with RDMA');
  }

  /** EOPNOTSUPP: the node runs in another process and cannot register this one's memory. */
  rdmaRefusal(what: string): RdsError {
    if (this.transportType === RDS_TRANS_TCP) return rdmaUnsupported({ name: 'tcp', transType: RDS_TRANS_TCP }, what);
    return new RdsError(
      'EOPNOTSUPP',
      `${what}: this socket is attached to an rds-socket node in another process, which cannot register this process's memory`,
    );
  }

  regions(): MrTable | null {
    return null;
  }

  enqueue(m: CheckedSend): EnqueueResult {
    const { address, port } = m;
    // Checked only while some destination is congested: no key built per message otherwise.
    if (this.cong.size > 0 && this.cong.has(`${address}:${port}`)) return 'ENOBUFS';
    const link = this.link;
    if (this.sndBytes >= this.options.sndbuf) {
      this.full = true;
      return 'EAGAIN';
    }
    if (link.budgetFull) {
      this.full = true;
      link.waitForBudget(this);
      return 'EAGAIN';
    }
    const id = m.confirm ? link.newId() : 0;
    // Copied now into the frame, as sendmsg(2) copies; zero-copy: a large payload is written from
    // the caller's buffers, which it leaves alone until the completion.
    // A node of protocol 4 takes the message as the wire will carry it (header, then payload), and
    // queues those bytes after its checks instead of encoding the message again. Only a large one:
    // the node keeps only large frames by reference, a small one it copies into its frame slab
    // anyway, where writing the header here would only add work (docs/performance.md measured it).
    if (link.downError === null) {
      if (link.wireSends && m.len + RDS_HEADER_SIZE > WIRE_SEND_ABOVE)
        writeSendWire(
          link.writer,
          this.sid,
          id,
          address,
          port,
          this.bound!.port,
          m.flags,
          id !== 0,
          m.zcopyCookie,
          m.payload,
          !m.zcopy,
        );
      else writeSend(link.writer, this.sid, id, address, port, m.flags, id !== 0, m.zcopyCookie, m.payload, !m.zcopy);
    }
    this.sndBytes += m.len;
    link.sndBytes += m.len;
    return id === 0 ? m.len : this.confirmation(id, m.len);
  }

  /** send({ confirm }): the node answers request `id` once the peer has the message. */
  private confirmation(id: number, len: number): Confirmation {
    const answer = this.link.expect(id);
    return {
      len,
      wait: (signal) =>
        new Promise<number>((resolve, reject) => {
          const done = (err?: Error): void => {
            signal?.removeEventListener('abort', onAbort);
            this.confirms.delete(id);
            if (err) reject(err);
            else resolve(len);
          };
          const onAbort = (): void => {
            this.link.forget(id);
            this.link.write(encodeFrame(C_ABORT, this.sid, id, null));
            done(abortError(signal!, 'send()'));
          };
          this.confirms.set(id, done);
          signal?.addEventListener('abort', onAbort, { once: true });
          answer.then(
            () => done(),
            (e: Error) => done(e),
          );
        }),
    };
  }

  fullError(): RdsError {
    const sndbuf = this.options.sndbuf;
    if (this.sndBytes >= sndbuf)
      return flowControlError(
        'EAGAIN',
        `send buffer full (${this.sndBytes} of ${sndbuf} bytes sent and not yet acknowledged by the peer)`,
      );
    const link = this.link;
    return flowControlError(
      'EAGAIN',
      `the host node's budget for this process is in use (${link.sndBytes} of ${link.sendBudget} bytes sent by all its sockets and not yet acknowledged; the node's serve({ maxClientSendBytes }) or rds-socketd --client-send-budget raises it)`,
    );
  }

  /** Room to send: in this socket's SO_SNDBUF and in the node's budget for this process. */
  hasRoom(waiting: boolean): boolean {
    if (this.link.budgetFull) {
      if (waiting) this.link.waitForBudget(this);
      return false;
    }
    return this.sndBytes < this.options.sndbuf;
  }

  /** The node tells of congestion clearing ('uncong'), which wakes every wait. */
  readonly watchCongestion = (): (() => void) => noop;

  flushed(): Promise<unknown> {
    if (this.closed) throw new RdsError('EBADF', 'flush() on a closed socket; make a new RdsSocket');
    // The node answers once what was sent before this call has left its backlog and been flushed.
    return this.link.request('flush', this.sid);
  }

  cancelSentTo(ep: RdsAddress): void {
    this.calls!.setsockopt(SOL_RDS, RDS_CANCEL_SENT_TO, { address: ep.address, port: ep.port }, undefined);
  }

  optionSet(level: number, name: number, value: unknown, before: number | undefined): void {
    if (socketSideOnly(level, name)) return;
    // The points as checked here, as the 4 bytes of a struct rds_rx_trace_so packed into a number
    // (the node takes numbers; server-client.ts unpacks it).
    if (level === SOL_RDS && name === SO_RDS_MSG_RXPATH_LATENCY) value = packRxTrace(this.options.rxTrace);
    this.calls!.setsockopt(level, name, value, before);
  }

  // ---- receive ----

  take(): RdsMessage | null {
    const m = this.rx.shift();
    if (m === undefined) return null;
    this.giveCredit(m.data.length);
    return m;
  }

  /** MSG_PEEK: the message stays here (no credit: the node hears of it once it is taken). */
  peek(): RdsMessage | null {
    const m = this.rx.peek();
    if (m === undefined) return null;
    // A notification (no sender) is consumed even by MSG_PEEK, as rds_recvmsg consumes it.
    if (m.address === '') return this.take();
    const copy = { ...m };
    // Completions riding on the message are consumed by the peek (rds_recvmsg_zcookie).
    if (m.zcopyCompletions !== undefined) m.zcopyCompletions = undefined;
    return copy;
  }

  /** CREDIT: what the application read, told to the node once per turn. */
  private giveCredit(n: number): void {
    if (this.dead !== null) return;
    if (!this.creditQueued) {
      this.creditQueued = true;
      this.link.writer.beforeFlush(() => {
        this.creditQueued = false;
        const c = this.credit;
        const k = this.creditMsgs;
        this.credit = 0;
        this.creditMsgs = 0;
        if (!this.closed && this.link.downError === null) writeCount(this.link.writer, C_CREDIT, this.sid, c, k);
      });
    }
    this.credit += n;
    this.creditMsgs++;
  }

  readable(): boolean {
    return this.rx.length > 0;
  }

  congGeneration(): number {
    return this.congMaps;
  }

  pollErr(): boolean {
    return this.calls!.pending;
  }

  rdsInfo(optname: number, buffer: Uint8Array): Promise<RdsInfoResult> {
    return attachedRdsInfo((meta) => this.link.request('info', this.sid, meta), optname, buffer);
  }

  info(): SocketInfo {
    return {
      boundAddress: this.bound?.address ?? '0.0.0.0',
      boundPort: this.bound?.port ?? 0,
      connectedAddress: '0.0.0.0',
      connectedPort: 0,
      sndbuf: this.options.sndbuf,
      rcvbuf: this.options.rcvbuf,
      inode: 0,
      transport: this.transportName ?? 'none',
    };
  }

  receiveQueue(): MessageInfo[] {
    return [];
  }

  release(): Promise<void> {
    this.closed = true;
    // Resolves once the node has closed its socket (the port is free for any process then); the
    // link stays referenced until it answers, so an awaited close() is not cut short by an exit.
    const answered = this.link.request('close', this.sid);
    // The node discards what this socket still had there: the process's budget has it back.
    this.link.released(this.sndBytes);
    this.sndBytes = 0;
    this.rx.drain();
    return answered.then(
      () => this.closedByNode(),
      (e: unknown) => {
        this.closedByNode();
        // The node going away closed its socket too; any other answer is a refusal, and is the caller's.
        if (e !== this.link.downError) throw e;
      },
    );
  }

  private closedByNode(): void {
    this.link.removeSocket(this.sid);
    const err = new RdsError('ECANCELED', 'the socket was closed before the peer reported the message read');
    for (const done of [...this.confirms.values()]) done(err);
  }

  // ---- from the node ----

  /** MSG: a received message. */
  fromNode(f: Frame): void {
    if (this.closed) return;
    this.rx.push(readMsgFrame(f));
    this.events!.readable();
  }

  /** SENT: `bytes` of this socket's messages left the node. */
  handed(bytes: number): void {
    if (this.closed) return; // close() gave the budget back already
    this.sndBytes -= bytes;
    this.link.released(bytes);
    this.budgetFreed();
  }

  /** The node's budget for this process has room again. */
  budgetFreed(): void {
    this.events!.wake();
    // 'writable' once half the budget is free after EAGAIN, as for a socket of this process's stack.
    if (this.full && this.sndBytes * 2 <= this.options.sndbuf && !this.link.budgetFull) {
      this.full = false;
      if (!this.closed) this.events!.writable();
    }
  }

  /** EVENT: congestion of a destination, or a peer's reachability. */
  event(meta: Record<string, unknown>): void {
    if (this.closed) return;
    const ev = meta.ev;
    if (ev === 'cong') this.cong.add(`${String(meta.a)}:${String(meta.p)}`);
    else if (ev === 'uncong') {
      this.cong.delete(`${String(meta.a)}:${String(meta.p)}`);
      this.events!.wake();
    } else if (ev === 'peer-down' || ev === 'peer-up') {
      const { ev: _, ...rest } = meta;
      this.events!.peer(ev, rest as never);
    }
  }

  /** The attached stack closes its sockets (through the socket, so it knows). */
  closeSocket(): Promise<void> {
    return this.events!.close();
  }

  congMapReceived(): void {
    this.congMaps++;
  }

  nodeGone(err: RdsError): void {
    if (this.closed || this.dead !== null) return;
    this.dead = err;
    for (const done of [...this.confirms.values()]) done(err);
    this.events!.wake();
  }
}

const noop = (): void => {};
