import { RDS_CONN_CONNECTING, RDS_CONN_DOWN } from '../constants.js';
import type { TransportPath } from './transport-path.js';

/**
 * The type of a transport's per-path state (its carrier object): a transport makes one kind and
 * gets its own type back from cp.carrier(kind), with no cast at any use. A path holds one carrier
 * object at a time, made on first use (see RdsConnPath.carrier).
 */
export class CarrierKind<C> {
  constructor(
    readonly name: string,
    readonly make: (cp: TransportPath) => C,
  ) {}
}

/**
 * The life cycle every transport shares for the handle of a path's current carrier (a TCP socket,
 * an rdma_cm id): which one is current, whether an event still belongs to it, and what its loss
 * means for the path. An event from a replaced carrier is ignored, so no callback of an old
 * carrier reaches the core after connPathShutdown (see RdsTransport).
 */
export class CarrierSlot<H> {
  private cur: H | null = null;

  constructor(private readonly cp: TransportPath) {}

  /** The current carrier's handle, or null. */
  get current(): H | null {
    return this.cur;
  }

  /** Whether `h` is still the current carrier. */
  is(h: H): boolean {
    return this.cur === h;
  }

  /** `h` becomes the current carrier; returns the one it replaces. */
  set(h: H): H | null {
    const old = this.cur;
    this.cur = h;
    return old;
  }

  /** No carrier any more; returns the one there was. */
  clear(): H | null {
    const old = this.cur;
    this.cur = null;
    return old;
  }

  /**
   * `h` failed or closed: the one decision every transport shares. Ignored unless `h` is still
   * current. A carrier that never came up (the path is CONNECTING, or DOWN) is forgotten and
   * `release` frees what it held; then the path learns it (RdsConnPath.carrierLost: a failed
   * connect, or a drop, whose connPathShutdown releases a live carrier). True if `h` was current.
   */
  lost(h: H, reason: string, release?: (h: H) => void): boolean {
    if (this.cur !== h) return false;
    const st = this.cp.state;
    if (st === RDS_CONN_CONNECTING || st === RDS_CONN_DOWN) {
      this.cur = null;
      release?.(h);
    }
    this.cp.carrierLost(reason);
    return true;
  }

  /** `fn` wrapped to run only while `h` is the current carrier. */
  guard<A extends unknown[]>(h: H, fn: (...args: A) => void): (...args: A) => void {
    return (...args: A): void => {
      if (this.cur === h) fn(...args);
    };
  }
}
