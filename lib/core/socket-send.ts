// The send side of an RDS socket (the kernel's send.c as seen from the socket): sendmsg, send,
// flush, the send budget, send({ confirm }) confirmations, zero-copy completions, peer reachability
// reports and RDS_CANCEL_SENT_TO.
import { isIPv4 } from 'node:net';
import { RDS_MAX_MSG_SIZE, RDS_RDMA_CANCELED, RDS_TRANS_TCP } from '../constants.js';
import { abortError, combineSignals, flowControlError, RdsError } from '../errors.js';
import { checkedAddress, parseEndpoint, validatePort } from './address.js';
import { defer } from './defer.js';
import { zeroCopyRequested } from './send-flags.js';
import { checkAtomicArgs, refuseMaskedAtomic, refuseRdmaControl, rdmaUnsupported } from './rdma.js';
import { MrTable, mapRegion, prepareRdmaControl, type RdmaControl } from './rdma-ops.js';
import { RdsSendList, type RdsOutgoing } from './message.js';
import type { RdsConnection } from './connection.js';
import { RDS_CTR } from './stats.js';
import type { PeerEvent, PeerState } from './peer-state.js';
import { SendTimeout } from './send-timeout.js';
import { budgetReport } from './send-report.js';
import { SocketBase } from './socket-base.js';
import type { RdsData, SendmsgOptions, SendOptions, WaitOptions } from './socket-types.js';

/** The send side of RdsSocket; see RdsSocket. */
export abstract class SocketSend extends SocketBase {
  /** @internal */ protected lastConn: RdsConnection | null = null;
  /** The last destination address exactly as the caller gave it, and its canonical form. @internal */
  protected lastDestGiven: string | null = null;
  /** @internal */ protected lastDestCanon = '';
  /** An address already known to be of the bound address's family. @internal */
  protected sameFamilyAs = '';
  /** @internal */ protected readonly pending = new RdsSendList();
  /** SO_SNDTIMEO over `pending`. @internal */
  protected readonly sendTimeout = new SendTimeout(this.pending, (n) =>
    this.stack.counters.add(RDS_CTR.send_cancelled, n),
  );
  /** Reachability of lastConn's peer, read on every send (cheap) to report a peer already down. @internal */
  protected lastPeer: PeerState | null = null;
  /** Peers this socket reported 'peer-down' for and not yet 'peer-up'. @internal */
  protected downPeers: Set<string> | null = null;
  /** Messages whose send({ confirm }) is still waiting (some acknowledged as queued, not yet read). @internal */
  protected readonly confirming = new Set<RdsOutgoing>();

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

  /** @internal */ protected enqueue(
    data: RdsData,
    dest: { address: string; port: number } | undefined | null,
    opts: SendmsgOptions | undefined,
  ): RdsOutgoing {
    this.checkOpen('sendmsg()');
    // Masked atomics are answered before anything else: rds-socket never offers them.
    if (opts !== undefined && opts !== null && opts.atomic !== undefined) refuseMaskedAtomic(opts.atomic);
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
    let rdmaCtl: RdmaControl | null = null;
    if (
      opts !== undefined &&
      opts !== null &&
      (opts.rdma !== undefined ||
        opts.rdmaDest !== undefined ||
        opts.atomic !== undefined ||
        opts.rdmaMap !== undefined)
    ) {
      const rdma = this.transport?.rdma;
      if (rdma === undefined) {
        if (
          opts.atomic !== undefined &&
          opts.rdma === undefined &&
          opts.rdmaDest === undefined &&
          opts.rdmaMap === undefined
        ) {
          checkAtomicArgs(opts.atomic);
          throw rdmaUnsupported(this.transport, 'sendmsg() with atomic (RDS_CMSG_ATOMIC_*)');
        }
        refuseRdmaControl(opts, (what) => rdmaUnsupported(this.transport, what));
      }
      const laddr = this.bound.address;
      rdmaCtl = prepareRdmaControl(opts, this.mrs, this, () => rdma.atomics(laddr));
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
    let exts = rdmaCtl?.exts;
    // rdmaMap: registered only now that nothing can refuse the message, so a refused send leaves
    // no region behind (the kernel registers first and keeps it on later errors).
    if (rdmaCtl?.map) {
      this.mrs ??= new MrTable(this.transport!.rdma!);
      exts = [mapRegion(this.mrs, this.bound.address, rdmaCtl.map)];
    }
    const msg = zcopy
      ? path.tx.queueZeroCopy(payload, len, this.bound.port, port, this, opts!.zcopyCookie!)
      : path.tx.queue(payload, len, this.bound.port, port, this, exts);
    if (rdmaCtl?.op) msg.rdma = rdmaCtl.op;
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
   * @internal
   */
  protected sendBufferFull(): RdsError {
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

  /** A message was queued to a peer that is not up: if it is already down, this socket hears of it too. @internal */
  protected sendingToUnreachable(address: string): void {
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

  /** Whether a message to `address` is queued or unacknowledged. @internal */
  protected hasTrafficTo(address: string): boolean {
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
  protected zeroCopyRequested(opts: SendmsgOptions): boolean {
    const nonTcp = this.transport !== null && this.transportType !== RDS_TRANS_TCP ? this.transport.name : null;
    return zeroCopyRequested(opts, this.zerocopy, nonTcp);
  }

  /**
   * The canonical form of a destination address, checked to be a unicast address. Senders repeat
   * the same destination: the last one given is remembered exactly as given, so the common case
   * is one string comparison.
   * @internal
   */
  protected destinationAddress(dest: unknown): string {
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
      msg.onConfirm((err) => {
        signal?.removeEventListener('abort', onAbort);
        this.confirming.delete(msg);
        if (err) reject(err);
        else resolve();
      });
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
  protected full = false;

  /** SendOwner: a zero-copy message's buffers are no longer referenced. @internal */
  zcopyReleased(cookie: number): void {
    if (this.closed) return;
    this.zcookies.push(cookie);
    this.wakeAll();
    this.announceReadable();
  }

  /** RdmaNotifyTarget: RDS_RECVERR reports failed RDMA ops without notify. @internal */
  get reportsFailures(): boolean {
    return this.recvErr;
  }

  /** RdmaNotifyTarget: an RDMA op's status, for recvmsg (RDS_CMSG_RDMA_STATUS). @internal */
  rdmaDone(token: bigint, status: number): void {
    if (this.closed) return;
    this.rdmaNotes.push({ token, status });
    this.wakeAll();
    this.announceReadable();
  }

  /**
   * The host node's hook: a message left this socket's queue (acknowledged or cancelled). The node
   * gives an attached process its send budget back only then, as SO_SNDBUF counts in the kernel.
   * @internal
   */
  onSendDone: (() => void) | null = null;

  /** Bytes queued and not yet acknowledged or cancelled: what SO_SNDBUF counts. @internal */
  get queuedBytes(): number {
    return this.sndBytes;
  }

  /** @internal */ messageDone(msg: RdsOutgoing): void {
    // A cancelled message's RDMA op is reported cancelled (RDS_CANCEL_SENT_TO, SO_SNDTIMEO).
    if (msg.rdma && msg.cancelled) msg.rdma.finish(RDS_RDMA_CANCELED);
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
    this.onSendDone?.();
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
  protected cancelSentTo(value: unknown): void {
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
