// The receive side of an RDS socket (the kernel's recv.c as seen from the socket): the receive
// queue, recvmsg/recv/the iterator, the port's congestion bit (rds_recv_rcvbuf_delta), the hard
// receive limits, congestion monitoring and poll().
import { POLLIN, POLLOUT, POLLRDNORM, POLLWRBAND, POLLWRNORM, RDS_MAX_ZCOOKIES } from '../constants.js';
import { abortReason, combineSignals, RdsError } from '../errors.js';
import type { RdsConnection } from './connection.js';
import type { MessageInfo, RdsMessage, Receipt } from './stack.js';
import { RDS_CTR } from './stats.js';
import { RX_MSG_OVERHEAD, type RxSocketLimit } from './rx-limit.js';
import { SocketSend } from './socket-send.js';
import type { WaitOptions } from './socket-types.js';

/** The receive side of RdsSocket; see RdsSocket. */
export abstract class SocketRecv extends SocketSend {
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

  /** BoundSocket: exthdr RDMA, the peer's op on our region `rkey` is done (rds_rdma_unuse). @internal */
  rdmaUsed(rkey: number): void {
    this.mrs?.used(rkey);
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

  /** rds_recv_rcvbuf_delta: set the port's congestion bit above SO_RCVBUF, clear it below half. @internal */
  protected rcvDelta(delta: number): void {
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

  /** The unread messages' cost, charged to this socket and to the stack's limiter. @internal */
  protected rxCharge(delta: number): void {
    this.rxMem += delta;
    this.stack.rxLimit.charge(delta);
  }

  /** BoundSocket: unread messages past `limit` (factor x SO_RCVBUF, at least minBytes; see RxLimiter). @internal */
  rxOverLimit(limit: RxSocketLimit): boolean {
    return this.rxMem > Math.max(this.rcvbuf * limit.factor, limit.minBytes);
  }

  /** recvmsg(2), non-blocking: the next message, or null when none is queued. */
  recvmsg(): RdsMessage | null {
    this.checkOpen('recvmsg()');
    // RDMA notifications first, as the kernel's rds_notify_queue_get (one per call here).
    if (this.rdmaNotes.length > 0) {
      const note = this.rdmaNotes.shift()!;
      return { data: Buffer.alloc(0), address: '', port: 0, rdmaStatus: note };
    }
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
  protected takeZcookies(): number[] {
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
  [Symbol.asyncIterator](): AsyncGenerator<RdsMessage, void, undefined> {
    // messages() itself, not a generator delegating to it (yield* costs a promise per message).
    return this.messages();
  }

  /** Like the async iterator, with an AbortSignal that ends the loop by throwing ETIMEDOUT (AbortSignal.timeout) or ECANCELED, its reason as `cause`. */
  async *messages(opts: { signal?: AbortSignal } = {}): AsyncGenerator<RdsMessage, void, undefined> {
    for (;;) {
      if (this.closed) return;
      let m: RdsMessage | null;
      try {
        // A message already queued is taken at once: no recv() promise per message of a burst.
        m = opts?.signal?.aborted === true ? null : this.recvmsg();
        if (m === null) m = await this.recv(opts);
      } catch (e) {
        if (e instanceof RdsError && e.code === 'EBADF' && this.closed) return;
        throw e;
      }
      yield m;
    }
  }

  // ---- poll ----

  /** poll(2) bits as the kernel reports them (spec §6.6). */
  poll(): number {
    let mask = 0;
    if (this.closed) return 0x20; // POLLNVAL
    if (this.rxQueue.length > 0 || this.congNotify !== 0n || this.zcookies.length > 0 || this.rdmaNotes.length > 0)
      mask |= POLLIN | POLLRDNORM;
    if (!this.congMonitor && this.lastPollCongGen !== this.stack.congGeneration) {
      this.lastPollCongGen = this.stack.congGeneration;
      mask |= POLLIN | POLLRDNORM | POLLWRBAND;
    }
    if (this.sndBytes < this.sndbuf) mask |= POLLOUT | POLLWRNORM;
    return mask;
  }
}
