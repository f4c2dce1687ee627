// The stack's events about its paths and peers ('state', 'drop', 'failover', 'protocol-error',
// 'peer-down', 'peer-up'), and the peer reachability table the path states feed. The kernel has
// no events (it has counters and rds-info): these are rds-socket's. Paths, failover and the
// transports report here (stack.pathEvents); the events are emitted on the stack.
import { RDS_CTR } from '../stats.js';
import { defer } from '../defer.js';
import type { ConnState, RdsConnPath } from '../path.js';
import type { RdsStack } from '../stack.js';
import { type PeerEvent, PeerTable } from './peer-state.js';

/** @internal */
export class PathEvents {
  /** Reachability per peer address, fed by stateChanged (see peer-state.ts). */
  readonly peers: PeerTable;

  constructor(
    private readonly stack: RdsStack,
    peerDownMs: number,
    /** Some connection still refers to the address (a peer none does needs no entry). */
    private readonly referredTo: (address: string) => boolean,
  ) {
    this.peers = new PeerTable(peerDownMs, {
      peerDown: (ev) => this.peerWentDown(ev),
      peerUp: (ev) => this.peerCameUp(ev),
    });
  }

  /**
   * Calls listeners from inside a path's state change ('state', 'drop', 'failover',
   * 'protocol-error', 'peer-down': they run before the change goes on, so they see it happen).
   * A listener that throws must not leave the change half done (a path still UP on a dead
   * carrier would never reconnect): its exception becomes the stack's 'error' event, on the
   * next microtask (a process warning when nobody listens), and the change completes.
   */
  private fromInside(call: () => void): void {
    try {
      call();
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e));
      defer(() => this.stack.emit('error', err));
    }
  }

  /** A path moved (the path has told its connection): a 'state' event, and the peer's reachability. */
  stateChanged(cp: RdsConnPath, from: ConnState, to: ConnState): void {
    this.fromInside(() => this.stack.emit('state', { ...pathOf(cp), from, to }));
    this.peers.pathChanged(cp.conn.faddr, from, to);
  }

  /** Why a path went down, for operators: a 'drop' event (the 'state' events follow). */
  dropped(cp: RdsConnPath, reason: string): void {
    this.fromInside(() => this.stack.emit('drop', { ...pathOf(cp), reason }));
  }

  /** A path's messages moved to a live one: a 'failover' event. */
  failedOver(cp: RdsConnPath, to: RdsConnPath, moved: number): void {
    this.fromInside(() => this.stack.emit('failover', { ...pathOf(cp), to: to.index, moved }));
  }

  /** The peer broke the protocol on `cp`: counted, and a 'protocol-error' event. */
  protocolError(cp: RdsConnPath, error: Error): void {
    this.stack.counters.add(RDS_CTR.recv_drop_protocol_error);
    this.fromInside(() => this.stack.emit('protocol-error', { ...pathOf(cp), error }));
  }

  private peerWentDown(ev: PeerEvent): void {
    this.fromInside(() => this.stack.emit('peer-down', ev));
    for (const s of this.stack.binds.all()) s.peerDown?.(ev);
    // A peer no connection refers to any more (one reclaimed meanwhile) needs no entry.
    if (!this.referredTo(ev.address)) this.peers.forget(ev.address);
  }

  private peerCameUp(ev: PeerEvent): void {
    // Reported after the transition that caused it has finished (it happens inside a path's
    // state change): listeners may send, close or reconnect without re-entering it.
    defer(() => {
      if (this.stack.closing) return;
      this.stack.emit('peer-up', ev);
      for (const s of this.stack.binds.all()) s.peerUp?.(ev);
    });
  }
}

/** Which path an event is about, as every path event names it. */
function pathOf(cp: RdsConnPath): { localAddress: string; peerAddress: string; transport: string; path: number } {
  return { localAddress: cp.conn.laddr, peerAddress: cp.conn.faddr, transport: cp.conn.transport.name, path: cp.index };
}
