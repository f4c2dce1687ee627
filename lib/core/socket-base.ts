// The state every part of an RDS socket shares (the kernel's struct rds_sock) and the waiting
// and readiness machinery the send and receive sides both use. RdsSocket (socket.ts) is the public
// class; it is built as SocketBase -> SocketSend -> SocketRecv -> SocketOptions -> RdsSocket.
import { EventEmitter } from 'eventemitter3';
import { RDS_TRANS_IB, RDS_TRANS_NONE, RMEM_DEFAULT, WMEM_DEFAULT } from '../constants.js';
import { abortError, RdsError } from '../errors.js';
import type { RdsAddress } from './address.js';
import { defer } from './defer.js';
import { Fifo } from './fifo.js';
import type { RdsStack, RdsMessage, Receipt } from './stack.js';
import type { RdsTransport } from './transport.js';
import type { MrTable } from './rdma-ops.js';
import type { RdsSocketEvents } from './socket-types.js';

/** @internal */
export interface Queued {
  msg: RdsMessage;
  receipt: Receipt | null;
}

/** @internal */
export type Waiter = { wake: () => void };

/** The shared state of an RDS socket; see RdsSocket. */
export abstract class SocketBase extends EventEmitter<RdsSocketEvents> {
  abstract readonly stack: RdsStack;
  /** @internal */ protected transportType: number = RDS_TRANS_NONE;
  /** @internal */ protected transport: RdsTransport | null = null;
  /** @internal */ protected bound: RdsAddress | null = null;
  /** @internal */ protected binding = false;
  /** @internal */ protected closed = false;
  /** @internal */ protected peer: RdsAddress | null = null;

  /** Budgets as the application set them (the kernel stores twice these and uses half). @internal */
  protected sndbuf = WMEM_DEFAULT / 2;
  /** @internal */ protected rcvbuf = RMEM_DEFAULT / 2;
  /** @internal */ protected sndBytes = 0;
  /** @internal */ protected rcvBytes = 0;
  /** What the unread messages cost against the hard receive limits (see RxLimiter). @internal */
  protected rxMem = 0;
  /** @internal */ protected congested = false;
  /** @internal */ protected timestamps = false;
  /** @internal */ protected recvErr = false;
  /** @internal */ protected congMonitor = false;
  /** SO_ZEROCOPY: MSG_ZEROCOPY sends reference the caller's buffers instead of copying them. @internal */
  protected zerocopy = false;
  /** Cookies of zero-copy messages whose buffers are free again, not yet reported by recvmsg. @internal */
  protected zcookies: number[] = [];
  /** RDS_GET_MR regions, once the socket registered one (RDMA transports only). @internal */
  protected mrs: MrTable | null = null;
  /** RDS_CMSG_RDMA_STATUS notifications not yet returned by recvmsg. @internal */
  protected rdmaNotes: { token: bigint; status: number }[] = [];
  /** @internal */ protected congMask = 0n;
  /** @internal */ protected congNotify = 0n;
  /** @internal */ protected lastPollCongGen = 0;

  /** @internal */ protected readonly rxQueue = new Fifo<Queued>();
  /** @internal */ protected readonly waiters = new Set<Waiter>();
  /** @internal */ protected readableQueued = false;

  /** @internal */ get boundAddress(): string {
    return this.bound?.address ?? '';
  }

  /** @internal */ get boundPort(): number {
    return this.bound?.port ?? 0;
  }

  /** True after close(). */
  get isClosed(): boolean {
    return this.closed;
  }

  /** @internal */ protected checkOpen(what: string): void {
    if (this.closed) throw new RdsError('EBADF', `${what} on a closed socket; make a new RdsSocket`);
  }

  /** @internal */ protected setTransport(type: number): void {
    if (this.transport !== null || this.bound !== null || this.binding) {
      throw new RdsError('EOPNOTSUPP', 'SO_RDS_TRANSPORT can only be set once, before bind()');
    }
    const t = this.stack.transports.byType(type);
    if (t === undefined || !t.userSelectable) {
      const name = type === RDS_TRANS_IB ? 'InfiniBand (ib)' : `type ${type}`;
      throw new RdsError('ENOPROTOOPT', `the ${name} transport is not available in this stack`);
    }
    this.transport = t;
    this.transportType = type;
  }

  // ---- waiting ----

  /** @internal */
  protected waitFor(
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
  protected wakeAll(): void {
    if (this.waiters.size === 0) return;
    const ws = [...this.waiters];
    for (const w of ws) w.wake();
  }

  /** @internal */ protected announceReadable(): void {
    if (this.readableQueued) return;
    this.readableQueued = true;
    defer(() => {
      this.readableQueued = false;
      if (!this.closed && (this.rxQueue.length > 0 || this.congNotify !== 0n || this.zcookies.length > 0))
        this.emit('readable');
    });
  }
}
