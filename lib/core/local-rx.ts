// The receive side of a socket living in this process's stack (the kernel's recv.c as seen from
// the socket): the receive queue, the port's congestion bit (rds_recv_rcvbuf_delta), the hard
// receive limits, congestion monitoring, zero-copy completions and RDMA notifications. A part
// of LocalBackend; only it writes these fields.
import {
  RDS_CONG_MONITOR,
  RDS_MAX_ZCOOKIES,
  SO_RCVBUF,
  SO_RDS_MSG_RXPATH_LATENCY,
  SOL_RDS,
  SOL_SOCKET,
} from '../constants.js';
import { Fifo } from './fifo.js';
import type { LocalBackend } from './local-backend.js';
import type { RdmaNotifyTarget } from './rdma-ops.js';
import { RX_DISCARDED } from './ext/rx-ack.js';
import { RX_MSG_OVERHEAD, type RxSocketLimit } from './ext/rx-limit.js';
import { RDS_CTR } from './stats.js';
import type { MessageInfo, RdsMessage, Receipt } from './types.js';

/**
 * A host node's cut-through receive (lib/host/node-deliver.ts): offered each message that would
 * otherwise be queued while nothing is (no message, notification or completion waits: order is
 * kept), with its RDS header as received. True: it took the message (handed it to its attached
 * process, which now holds it against its own window, and the receipt with it); false: queued.
 * @internal
 */
export type RxHandoff = (msg: RdsMessage, receipt: Receipt | null, header: Buffer) => boolean;

interface Queued {
  msg: RdsMessage;
  receipt: Receipt | null;
}

/** @internal */
export class LocalRx implements RdmaNotifyTarget {
  private readonly queue = new Fifo<Queued>();
  private rcvBytes = 0;
  /** What the unread messages cost against the hard receive limits (see RxLimiter). */
  private rxMem = 0;
  private congested = false;
  /** Cookies of zero-copy messages whose buffers are free again, not yet reported by recvmsg. */
  private zcookies: number[] = [];
  /** RDS_CMSG_RDMA_STATUS notifications not yet returned by recvmsg. */
  private rdmaNotes: { token: bigint; status: number }[] = [];
  private congMask = 0n;
  private congNotify = 0n;
  /** SO_RDS_MSG_RXPATH_LATENCY is on: counted in the stack's RxTraceClock, messages are stamped. */
  private tracing = false;
  /** Set by a host node for the sockets it runs for attached processes; null otherwise. */
  handoff: RxHandoff | null = null;

  constructor(private readonly sock: LocalBackend) {}

  /**
   * The stack delivers a message; `receipt` is told when the application takes it. `header`: its
   * RDS header as received, offered with it to the handoff (none: the message is queued).
   */
  enqueue(msg: RdsMessage, receipt: Receipt | null, header?: Buffer): boolean {
    const s = this.sock;
    if (s.closed) {
      s.stack.counters.add(RDS_CTR.recv_drop_dead_sock);
      return false;
    }
    if (s.options.timestamps) msg.timestamp = performance.timeOrigin + performance.now();
    if (this.tracing) msg.rxStamps = s.stack.rxTrace.stamps();
    s.stack.counters.add(RDS_CTR.recv_queued);
    if (this.handoff !== null && header !== undefined && !this.readable() && this.handoff(msg, receipt, header)) {
      // Taken at once, as take() would have: counted as read from the socket, never queued.
      s.stack.counters.add(RDS_CTR.recv_bytes_freed_fromsock, msg.data.length);
      s.stack.counters.add(RDS_CTR.copy_to_user);
      return true;
    }
    this.queue.push({ msg, receipt });
    this.rcvDelta(msg.data.length);
    this.rxCharge(msg.data.length + RX_MSG_OVERHEAD);
    s.events!.readable();
    return true;
  }

  /** Something can be read (POLLIN). */
  readable(): boolean {
    return this.queue.length > 0 || this.congNotify !== 0n || this.zcookies.length > 0 || this.rdmaNotes.length > 0;
  }

  /** recvmsg(): the next message or notification, or null. */
  take(): RdsMessage | null {
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
    const q = this.queue.shift();
    if (q === undefined) {
      if (this.zcookies.length === 0) return null;
      return { data: Buffer.alloc(0), address: '', port: 0, zcopyCompletions: this.takeZcookies() };
    }
    const msg = q.msg;
    // Like the kernel's cmsg, pending completions ride on the next message read.
    if (this.zcookies.length > 0) msg.zcopyCompletions = this.takeZcookies();
    const counters = this.sock.stack.counters;
    counters.add(RDS_CTR.recv_bytes_freed_fromsock, msg.data.length);
    counters.add(RDS_CTR.copy_to_user);
    this.rcvDelta(-msg.data.length);
    this.rxCharge(-(msg.data.length + RX_MSG_OVERHEAD));
    // A host node holds the receipt until its attached application has read the message.
    if (q.receipt !== null && !this.sock.emit('receipt', q.receipt)) q.receipt.owner.consumed(q.receipt);
    return msg;
  }

  /** MSG_PEEK: a copy of the next message, left queued; notifications and completions are consumed (see SocketBackend.peek). */
  peek(): RdsMessage | null {
    const q = this.rdmaNotes.length > 0 || this.congNotify !== 0n ? undefined : this.queue.peek();
    if (q === undefined) return this.take();
    const msg = { ...q.msg };
    if (this.zcookies.length > 0) msg.zcopyCompletions = this.takeZcookies();
    return msg;
  }

  /** Up to RDS_MAX_ZCOOKIES completions, oldest first. */
  private takeZcookies(): number[] {
    if (this.zcookies.length <= RDS_MAX_ZCOOKIES) {
      const all = this.zcookies;
      this.zcookies = [];
      return all;
    }
    return this.zcookies.splice(0, RDS_MAX_ZCOOKIES);
  }

  /** rds_recv_rcvbuf_delta: set the port's congestion bit above SO_RCVBUF, clear it below half. */
  private rcvDelta(delta: number): void {
    this.rcvBytes += delta;
    const { bound, stack, options } = this.sock;
    if (bound === null) return;
    if (!this.congested && this.rcvBytes > options.rcvbuf) {
      this.congested = true;
      if (stack.congMap(bound.address).set(bound.port)) stack.localCongChanged(bound.address);
    } else if (this.congested && this.rcvBytes < options.rcvbuf / 2) {
      this.congested = false;
      if (stack.congMap(bound.address).clear(bound.port)) stack.localCongChanged(bound.address);
    }
  }

  /** The unread messages' cost, charged to this socket and to the stack's limiter. */
  private rxCharge(delta: number): void {
    this.rxMem += delta;
    this.sock.stack.rxLimit.charge(delta);
  }

  /** Unread messages past `limit` (factor x SO_RCVBUF, at least minBytes; see RxLimiter). */
  overLimit(limit: RxSocketLimit): boolean {
    return this.rxMem > Math.max(this.sock.options.rcvbuf * limit.factor, limit.minBytes);
  }

  /** A send met a congested port: with RDS_CONG_MONITOR its group is watched. */
  congestedSend(port: number): void {
    if (this.sock.options.congMonitor) this.congMask |= 1n << BigInt(port % 64);
  }

  /** A congestion map arrived; `mask` says which port groups cleared. */
  congestionUpdated(mask: bigint): void {
    if (!this.sock.options.congMonitor) return;
    const hit = this.congMask & mask;
    if (hit !== 0n) {
      this.congNotify |= hit;
      this.congMask &= ~hit;
      this.sock.events!.readable();
    }
  }

  /** A zero-copy message's buffers are no longer referenced. */
  zcopyReleased(cookie: number): void {
    if (this.sock.closed) return;
    this.zcookies.push(cookie);
    this.sock.events!.readable();
  }

  /** RdmaNotifyTarget: RDS_RECVERR reports failed RDMA ops without notify. */
  get reportsFailures(): boolean {
    return this.sock.options.recvErr;
  }

  /** RdmaNotifyTarget: an RDMA op's status, for recvmsg (RDS_CMSG_RDMA_STATUS). */
  rdmaDone(token: bigint, status: number): void {
    if (this.sock.closed) return;
    this.rdmaNotes.push({ token, status });
    this.sock.events!.readable();
  }

  /** An option the receive side follows was set. */
  optionSet(level: number, name: number): void {
    if (level === SOL_RDS && name === SO_RDS_MSG_RXPATH_LATENCY) this.trace(this.sock.options.rxTrace.length > 0);
    else if (level === SOL_SOCKET && name === SO_RCVBUF) this.rcvDelta(0);
    else if (level === SOL_RDS && name === RDS_CONG_MONITOR && !this.sock.options.congMonitor) {
      this.congMask = 0n;
      this.congNotify = 0n;
    }
  }

  /** Stamps messages, or stops, and tells the stack whether any of its sockets traces. */
  private trace(on: boolean): void {
    if (on === this.tracing) return;
    this.tracing = on;
    this.sock.stack.rxTrace.sockets += on ? 1 : -1;
  }

  /** What rds-info -r shows. */
  receiveQueue(): MessageInfo[] {
    const out: MessageInfo[] = [];
    for (const q of this.queue) {
      out.push({
        localAddress: this.sock.boundAddress,
        localPort: this.sock.boundPort,
        peerAddress: q.msg.address,
        peerPort: q.msg.port,
        seq: q.receipt?.seq ?? 0,
        bytes: q.msg.data.length,
      });
    }
    return out;
  }

  /** close(): the port's congestion bit goes, unread messages are discarded. */
  release(): void {
    const { bound, stack } = this.sock;
    if (bound !== null && this.congested) {
      if (stack.congMap(bound.address).clear(bound.port)) stack.localCongChanged(bound.address);
      this.congested = false;
    }
    // Unread messages are discarded, as by the kernel; an rds-socket sender hears it (its
    // confirmations reject with ECONNRESET), an older one counts them as taken.
    for (const q of this.queue.drain()) if (q.receipt !== null) q.receipt.owner.consumed(q.receipt, RX_DISCARDED);
    this.rcvBytes = 0;
    this.rxCharge(-this.rxMem);
    this.zcookies = [];
    this.rdmaNotes = [];
    this.trace(false);
  }
}
