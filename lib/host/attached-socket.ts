import { isIPv4 } from 'node:net';
import {
  POLLERR,
  POLLIN,
  POLLOUT,
  POLLRDNORM,
  POLLWRBAND,
  POLLWRNORM,
  RDS_CANCEL_SENT_TO,
  RDS_FREE_MR,
  RDS_GET_MR,
  RDS_GET_MR_FOR_DEST,
  RDS_TRANS_TCP,
  RDS_MAX_MSG_SIZE,
  RDS_TRANS_NONE,
  SO_RDS_TRANSPORT,
  SO_SNDBUF,
  SO_SNDTIMEO,
  SO_ZEROCOPY,
  SOL_RDS,
  SOL_SOCKET,
} from '../constants.js';
import { abortError, abortReason, combineSignals, flowControlError, RdsError } from '../errors.js';
import { parseEndpoint, type RdsAddress } from '../core/address.js';
import { defer } from '../core/defer.js';
import { refuseMaskedAtomic, refuseRdmaControl, rdmaUnsupported } from '../core/rdma.js';
import { Fifo } from '../core/fifo.js';
import {
  RdsSocket,
  type RdsData,
  type RdsSocketOptions,
  type SendmsgOptions,
  type SendOptions,
  type WaitOptions,
} from '../core/socket.js';
import type { RdsMessage } from '../core/stack.js';
import { C_ABORT, C_CREDIT, encodeFrame, type Frame } from './protocol.js';
import { readMsg, writeCount, writeSend } from './hot-frames.js';
import type { AttachedStack, NodeLink } from './client.js';
import { AttachedWaiters } from './attached-waiters.js';
import { rdsIoctl } from '../core/tos.js';
import { attachedInfoRefusal, attachedRdsInfo } from './attached-info.js';
import { isInfoOption } from '../core/info-sockopt.js';
import type { RdsInfoResult } from '../core/info-result.js';
import { readOption, UnansweredCalls } from './attached-refusals.js';
import {
  bindEndpoint,
  dataParts,
  transportByName,
  destination,
  sendFlags,
  transportOption,
  untilDoneOrAborted,
} from './attached-checks.js';

/**
 * A socket living in a host node. The API is RdsSocket's; calls go over the node's control
 * socket. Synchronous calls (sendmsg, recvmsg, poll, getsockopt, setsockopt) answer from state
 * kept here: arguments are checked here with the same errors, the send budget (SO_SNDBUF)
 * counts bytes sent and not yet acknowledged by the peer (or failed or cancelled), as the kernel
 * counts it, and so does the node's budget for the whole process; received messages wait here
 * once the node has read them from its socket (at most SO_RCVBUF bytes per socket; the rest stays
 * queued in the node, where it counts against SO_RCVBUF and sets congestion as usual).
 */
export class AttachedSocket extends RdsSocket {
  readonly #link: NodeLink;
  readonly #sid: number;
  readonly #calls: UnansweredCalls;
  #bound: RdsAddress | null = null;
  #binding = false;
  #closed = false;
  #dead: RdsError | null = null;
  #transport: number | null = null;
  readonly #rx = new Fifo<RdsMessage>();
  #credit = 0;
  #creditQueued = false;
  #creditMsgs = 0;
  #sndBytes = 0;
  #full = false;
  readonly #waiters = new AttachedWaiters(() => (this.#closed ? 'closed' : this.#dead));
  readonly #cong = new Set<string>();
  readonly #confirms = new Map<number, (e: Error) => void>();
  #readableQueued = false;
  /** SO_ZEROCOPY, read only for a send with options (made once, not per message). */
  readonly #zeroCopyOn = (): boolean => super.getsockopt(SOL_SOCKET, SO_ZEROCOPY) === 1;
  /** Congestion maps the node received since this socket opened, and as of the last poll(). */
  #congMaps = 0;
  #polledCongMaps = 0;

  constructor(stack: AttachedStack, opts: RdsSocketOptions) {
    super({ stack, ...(opts.sendTimeout !== undefined ? { sendTimeout: opts.sendTimeout } : {}) });
    if (opts.transport !== undefined) this.#transport = transportByName(opts.transport);
    this.#link = stack.currentLink();
    this.#sid = this.#link.addSocket(this);
    this.#calls = new UnansweredCalls(
      this.#link,
      this.#sid,
      (level, name, value) => {
        if (!this.#closed) super.setsockopt(level, name, value);
      },
      (e) => this.nodeGone(e),
    );
    this.#calls.open();
    if (opts.sendTimeout !== undefined) this.#calls.setsockopt(SOL_SOCKET, SO_SNDTIMEO, opts.sendTimeout, 0);
  }

  /** The node's path. */
  get nodePath(): string {
    return this.#link.path;
  }

  #check(what: string): void {
    if (this.#closed) throw new RdsError('EBADF', `${what} on a closed socket; make a new RdsSocket`);
    if (this.#dead !== null) throw this.#dead;
    this.#calls.throwPending();
  }

  override get isClosed(): boolean {
    return this.#closed;
  }

  #sndbuf(): number {
    return super.getsockopt(SOL_SOCKET, SO_SNDBUF) / 2;
  }

  override async bind(addr: { address: string; port?: number }): Promise<void> {
    this.#check('bind()');
    if (this.#bound !== null || this.#binding)
      throw new RdsError('EINVAL', 'socket is already bound; an RDS socket binds once');
    const ep = bindEndpoint(addr);
    this.#binding = true;
    let r: { address: string; port: number; transport: number };
    try {
      r = (await this.#link.request('bind', this.#sid, {
        address: ep.address,
        port: ep.port,
        ...(this.#transport !== null ? { transport: this.#transport } : {}),
      })) as typeof r;
    } finally {
      this.#binding = false;
    }
    if (this.#closed) throw new RdsError('EBADF', 'socket was closed while bind() was in progress');
    this.#bound = { address: r.address, port: r.port };
    this.#transport = r.transport;
  }

  override connect(addr: { address: string; port: number }): void {
    this.#check('connect()');
    super.connect(addr);
  }

  override address(): RdsAddress {
    if (this.#bound === null) throw new RdsError('EINVAL', 'socket is not bound; call bind() first');
    return { ...this.#bound };
  }

  override sendmsg(data: RdsData, dest?: { address: string; port: number } | null, opts?: SendmsgOptions): number {
    return this.#enqueue(data, dest, opts, 0);
  }

  /** Checks and queues one message to the node; `id` non-zero asks for its confirmation. */
  #enqueue(
    data: RdsData,
    dest: { address: string; port: number } | null | undefined,
    opts: SendmsgOptions | undefined,
    id: number,
  ): number {
    this.#check('sendmsg()');
    if (opts !== undefined && opts !== null && opts.atomic !== undefined) refuseMaskedAtomic(opts.atomic);
    const { zcopy, flags } = sendFlags(opts, this.#zeroCopyOn, this.#transport);
    const { parts, len } = dataParts(data);
    let { address, port } = destination(dest);
    if (this.#bound === null) {
      if (this.#binding) throw new RdsError('ENOTCONN', 'bind() has not finished; await it before sending');
      throw new RdsError('ENOTCONN', 'socket is not bound; call bind() before sending (RDS has no auto-bind)');
    }
    if (
      opts !== undefined &&
      opts !== null &&
      opts.atomic !== undefined &&
      opts.rdma === undefined &&
      opts.rdmaDest === undefined &&
      opts.rdmaMap === undefined
    )
      throw this.rdmaRefusal('sendmsg() with atomic (RDS_CMSG_ATOMIC_*)');
    if (
      opts !== undefined &&
      opts !== null &&
      (opts.rdma !== undefined || opts.rdmaDest !== undefined || opts.rdmaMap !== undefined)
    )
      refuseRdmaControl(opts, (what) => this.rdmaRefusal(what));
    if (address === '') {
      let peer: RdsAddress;
      try {
        peer = super.remoteAddress();
      } catch {
        throw new RdsError('ENOTCONN', 'no destination; pass { address, port } or call connect() first');
      }
      ({ address, port } = peer);
    }
    // The family is checked once per destination in a row (the bound address never changes).
    if (address !== this.sameFamilyAs && isIPv4(address) !== isIPv4(this.#bound.address)) {
      throw new RdsError(
        'EOPNOTSUPP',
        `cannot send from ${this.#bound.address} to ${address}: address families differ`,
      );
    }
    this.sameFamilyAs = address;
    if (len > RDS_MAX_MSG_SIZE)
      throw new RdsError('EMSGSIZE', `message of ${len} bytes exceeds RDS_MAX_MSG_SIZE (${RDS_MAX_MSG_SIZE})`);
    const sndbuf = this.#sndbuf();
    if (len > sndbuf)
      throw new RdsError(
        'EMSGSIZE',
        `message of ${len} bytes exceeds the send buffer (${sndbuf} bytes); raise SO_SNDBUF`,
      );
    // Checked only while some destination is congested: no key built per message otherwise.
    if (this.#cong.size > 0 && this.#cong.has(`${address}:${port}`)) {
      throw flowControlError(
        'ENOBUFS',
        `destination ${address}:${port} is congested; retry after it clears (send() waits, RDS_CONG_MONITOR notifies)`,
      );
    }
    if (this.#sndBytes >= sndbuf) {
      this.#full = true;
      throw flowControlError(
        'EAGAIN',
        `send buffer full (${this.#sndBytes} of ${sndbuf} bytes sent and not yet acknowledged by the peer)`,
      );
    }
    const link = this.#link;
    if (link.budgetFull) {
      this.#full = true;
      link.waitForBudget(this);
      throw flowControlError(
        'EAGAIN',
        `the host node's budget for this process is in use (${link.sndBytes} of ${link.sendBudget} bytes sent by all its sockets and not yet acknowledged; the node's serve({ maxClientSendBytes }) or rds-socketd --client-send-budget raises it)`,
      );
    }
    // Copied now into the frame, as sendmsg(2) copies; zero-copy: a large payload is written from
    // the caller's buffers, which it leaves alone until the completion.
    if (link.downError === null)
      writeSend(
        link.writer,
        this.#sid,
        id,
        address,
        port,
        flags,
        id !== 0,
        zcopy ? opts!.zcopyCookie : undefined,
        parts,
        !zcopy,
      );
    this.#sndBytes += len;
    link.sndBytes += len;
    return len;
  }

  override send(data: RdsData, dest?: { address: string; port: number } | null, opts?: SendOptions): Promise<number> {
    // A plain send with room now is a sendmsg(): answered without the machinery of waiting (an
    // async function's promises per message are a tenth of a sending application's time).
    if (
      opts?.signal === undefined &&
      opts?.timeout === undefined &&
      opts?.confirm !== true &&
      !this.#closed &&
      this.#dead === null &&
      this.#bound !== null &&
      this.#room()
    ) {
      try {
        return Promise.resolve(this.#enqueue(data, dest, opts, 0));
      } catch (e) {
        if (!(e instanceof RdsError) || (e.code !== 'EAGAIN' && e.code !== 'ENOBUFS')) return Promise.reject(e);
      }
    }
    return this.#sendWaiting(data, dest, opts ?? {});
  }

  /** send() that may wait: for room, an uncongested destination, or the peer's confirmation. */
  async #sendWaiting(
    data: RdsData,
    dest: { address: string; port: number } | null | undefined,
    opts: SendOptions,
  ): Promise<number> {
    const signal = combineSignals(opts?.signal, opts?.timeout);
    const confirm = opts?.confirm === true;
    for (;;) {
      if (signal?.aborted) throw abortError(signal, 'send()');
      if (!this.#closed && this.#dead === null && this.#bound !== null && !this.#room()) {
        if (this.#link.budgetFull) this.#link.waitForBudget(this);
        await this.#waiters.wait(signal, 'send()', abortError);
        continue;
      }
      const id = confirm ? this.#link.newId() : 0;
      let len: number;
      try {
        len = this.#enqueue(data, dest, opts, id);
      } catch (e) {
        if (!(e instanceof RdsError) || (e.code !== 'EAGAIN' && e.code !== 'ENOBUFS')) throw e;
        await this.#waiters.wait(signal, 'send()', abortError);
        continue;
      }
      if (!confirm) return len;
      const answer = this.#link.expect(id);
      await new Promise<void>((resolve, reject) => {
        const done = (err?: Error): void => {
          signal?.removeEventListener('abort', onAbort);
          this.#confirms.delete(id);
          if (err) reject(err);
          else resolve();
        };
        const onAbort = (): void => {
          this.#link.forget(id);
          this.#link.write(encodeFrame(C_ABORT, this.#sid, id, null));
          done(abortError(signal!, 'send()'));
        };
        this.#confirms.set(id, done);
        signal?.addEventListener('abort', onAbort, { once: true });
        answer.then(
          () => done(),
          (e: Error) => done(e),
        );
      });
      return len;
    }
  }

  override async flush(opts: WaitOptions = {}): Promise<void> {
    const signal = combineSignals(opts?.signal, opts?.timeout);
    this.#check('flush()');
    // The node answers once what was sent before this call has left its backlog and been flushed.
    const done = this.#link.request('flush', this.#sid);
    if (signal === undefined) {
      await done;
      return;
    }
    await untilDoneOrAborted(done, signal, 'flush()');
  }

  override recvmsg(): RdsMessage | null {
    if (this.#closed) throw new RdsError('EBADF', 'recvmsg() on a closed socket; make a new RdsSocket');
    this.#calls.throwPending();
    const m = this.#rx.shift();
    if (m === undefined) {
      if (this.#dead !== null) throw this.#dead;
      return null;
    }
    this.#giveCredit(m.data.length);
    return m;
  }

  #giveCredit(n: number): void {
    if (this.#dead !== null) return;
    if (!this.#creditQueued) {
      this.#creditQueued = true;
      this.#link.writer.beforeFlush(() => {
        this.#creditQueued = false;
        const c = this.#credit;
        const k = this.#creditMsgs;
        this.#credit = 0;
        this.#creditMsgs = 0;
        if (!this.#closed && this.#link.downError === null) writeCount(this.#link.writer, C_CREDIT, this.#sid, c, k);
      });
    }
    this.#credit += n;
    this.#creditMsgs++;
  }

  override async recv(opts: WaitOptions = {}): Promise<RdsMessage> {
    const signal = combineSignals(opts?.signal, opts?.timeout);
    for (;;) {
      if (signal?.aborted) throw abortReason(signal, 'recv()');
      const m = this.recvmsg();
      if (m !== null) return m;
      await this.#waiters.wait(signal, 'recv()', abortReason);
    }
  }

  override async *messages(opts: { signal?: AbortSignal } = {}): AsyncGenerator<RdsMessage, void, undefined> {
    for (;;) {
      if (this.#closed) return;
      let m: RdsMessage | null;
      try {
        // A message already queued is taken at once: no recv() promise per message of a burst.
        m = opts?.signal?.aborted === true ? null : this.recvmsg();
        if (m === null) m = await this.recv(opts);
      } catch (e) {
        if (e instanceof RdsError && e.code === 'EBADF' && this.#closed) return;
        throw e;
      }
      yield m;
    }
  }

  override [Symbol.asyncIterator](): AsyncGenerator<RdsMessage, void, undefined> {
    // messages() itself, not a generator delegating to it (yield* costs a promise per message).
    return this.messages();
  }

  override poll(): number {
    if (this.#closed) return 0x20;
    let mask = 0;
    if (this.#rx.length > 0) mask |= POLLIN | POLLRDNORM;
    // As an embedded socket (and the kernel's rds_poll): once after each congestion map the node
    // received, unless RDS_CONG_MONITOR asks for the maps as messages instead.
    if (!this.congMonitor && this.#polledCongMaps !== this.#congMaps) {
      this.#polledCongMaps = this.#congMaps;
      mask |= POLLIN | POLLRDNORM | POLLWRBAND;
    }
    if (this.#room()) mask |= POLLOUT | POLLWRNORM;
    // A refusal from the node waits for the next call (as a pending socket error: sk_err).
    if (this.#calls.pending) mask |= POLLERR;
    return mask;
  }

  /** Room to send: in this socket's SO_SNDBUF and in the node's budget for this process. */
  #room(): boolean {
    return this.#sndBytes < this.#sndbuf() && !this.#link.budgetFull;
  }

  protected override isBound(): boolean {
    return this.#bound !== null;
  }

  /** EOPNOTSUPP: the node runs in another process and cannot register this one's memory. */
  protected override rdmaRefusal(what: string): RdsError {
    if (this.#transport === RDS_TRANS_TCP) return rdmaUnsupported({ name: 'tcp', transType: RDS_TRANS_TCP }, what);
    return new RdsError(
      'EOPNOTSUPP',
      `${what}: this socket is attached to an rds-socket node in another process, which cannot register this process's memory`,
    );
  }

  override setsockopt(level: number, optname: number, value: unknown): void {
    this.#check('setsockopt()');
    // RDMA: answered here (the node cannot register this process's memory), never forwarded.
    if (level === SOL_RDS && (optname === RDS_GET_MR || optname === RDS_GET_MR_FOR_DEST || optname === RDS_FREE_MR))
      return super.setsockopt(level, optname, value as number);
    if (level === SOL_RDS && optname === RDS_CANCEL_SENT_TO) {
      if (this.#bound === null) throw new RdsError('ENOTCONN', 'RDS_CANCEL_SENT_TO needs a bound socket');
      const ep = parseEndpoint(value, 'RDS_CANCEL_SENT_TO value');
      this.#calls.setsockopt(level, optname, { address: ep.address, port: ep.port }, undefined);
      return;
    }
    if (level === SOL_RDS && optname === SO_RDS_TRANSPORT) {
      this.#transport = transportOption(value, this.#transport !== null || this.#bound !== null || this.#binding);
      return;
    }
    const before = readOption(() => super.getsockopt(level, optname));
    super.setsockopt(level, optname, value as number);
    this.#calls.setsockopt(level, optname, value, before);
    if (level === SOL_SOCKET && optname === SO_SNDBUF) this.#waiters.wakeAll();
  }

  override getsockopt(level: number, optname: number, buffer?: Uint8Array): number & RdsInfoResult {
    this.#check('getsockopt()');
    if (level === SOL_RDS && isInfoOption(optname)) throw attachedInfoRefusal(optname, buffer);
    if (level === SOL_RDS && optname === SO_RDS_TRANSPORT)
      return (this.#transport ?? RDS_TRANS_NONE) as number & RdsInfoResult;
    return super.getsockopt(level, optname) as number & RdsInfoResult;
  }

  override ioctl(request: number, arg?: number): number {
    this.#check('ioctl()');
    return rdsIoctl(request, arg, this.#transport ?? RDS_TRANS_NONE, this.sameFamilyAs !== '');
  }

  override async rdsInfo(optname: number, buffer: Uint8Array): Promise<RdsInfoResult> {
    this.#check('rdsInfo()');
    return attachedRdsInfo((meta) => this.#link.request('info', this.#sid, meta), optname, buffer);
  }

  override async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Resolves once the node has closed its socket (the port is free for any process then); the
    // link stays referenced until it answers, so an awaited close() is not cut short by an exit.
    const answered = this.#link.request('close', this.#sid);
    // The node discards what this socket still had there: the process's budget has it back.
    this.#link.released(this.#sndBytes);
    this.#sndBytes = 0;
    this.#rx.drain();
    this.stack.socketClosed();
    this.emit('close');
    try {
      await answered;
    } catch (e) {
      // The node going away closed its socket too; any other answer is a refusal, and is the caller's.
      if (e !== this.#link.downError) throw e;
    } finally {
      this.#link.removeSocket(this.#sid);
      // Pending calls are rejected only now, in the turn close() settles in, as an in-process
      // socket's are: `const p = s.recv(); await s.close(); await p.catch(...)` must not leave a
      // rejection unhandled for the node's round trip (Node ends a process on one).
      const err = new RdsError('ECANCELED', 'the socket was closed before the peer reported the message read');
      for (const done of [...this.#confirms.values()]) done(err);
      this.#waiters.wakeAll();
    }
  }

  // ---- from the node ----

  /** @internal */ fromNode(f: Frame): void {
    if (this.#closed) return;
    this.#rx.push(readMsg(f.raw, f.metaStart, f.metaEnd, f.data));
    this.#waiters.wakeAll();
    if (!this.#readableQueued) {
      this.#readableQueued = true;
      defer(() => {
        this.#readableQueued = false;
        if (!this.#closed && this.#rx.length > 0) this.emit('readable');
      });
    }
  }

  /** @internal */ handed(bytes: number): void {
    if (this.#closed) return; // close() gave the budget back already
    this.#sndBytes -= bytes;
    this.#link.released(bytes);
    this.#waiters.wakeAll();
    this.#maybeWritable();
  }

  /** The node's budget for this process has room again. @internal */
  budgetFreed(): void {
    this.#waiters.wakeAll();
    this.#maybeWritable();
  }

  /** 'writable' once half the budget is free after EAGAIN, as an embedded socket emits it. */
  #maybeWritable(): void {
    if (this.#full && this.#sndBytes * 2 <= this.#sndbuf() && !this.#link.budgetFull) {
      this.#full = false;
      if (!this.#closed) this.emit('writable');
    }
  }

  /** @internal */ event(meta: Record<string, unknown>): void {
    if (this.#closed) return;
    const ev = meta.ev;
    if (ev === 'cong') this.#cong.add(`${String(meta.a)}:${String(meta.p)}`);
    else if (ev === 'uncong') {
      this.#cong.delete(`${String(meta.a)}:${String(meta.p)}`);
      this.#waiters.wakeAll();
    } else if (ev === 'peer-down' || ev === 'peer-up') {
      const { ev: _, ...rest } = meta;
      this.emit(ev, rest as never);
    }
  }

  /** @internal */ congMapReceived(): void {
    this.#congMaps++;
  }

  /** @internal */ nodeGone(err: RdsError): void {
    if (this.#closed || this.#dead !== null) return;
    this.#dead = err;
    for (const done of [...this.#confirms.values()]) done(err);
    this.#waiters.wakeAll();
  }
}
