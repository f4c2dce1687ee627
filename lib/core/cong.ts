import { CongMap } from './cong-map.js';
import type { RdsConnection } from './connection.js';
import type { BoundSocket } from './types.js';

/**
 * The congestion maps of a stack (the kernel's cong.c): one per address, ours for local
 * addresses and the peers' copies otherwise, with the senders waiting for a map to clear a port.
 */
export class CongTable {
  private readonly maps = new Map<string, CongMap>();
  /** Sockets waiting for a congestion map (send() blocked on ENOBUFS). */
  private readonly waiters = new Set<() => void>();
  /** Bumped on every received map: poll() reports POLLWRBAND once after each. */
  generation = 0;

  /** The map of an address, made on first use. */
  map(address: string): CongMap {
    let m = this.maps.get(address);
    if (m === undefined) {
      m = new CongMap();
      this.maps.set(address, m);
    }
    return m;
  }

  /** Forgets a peer's copy (its last connection went). */
  forget(address: string): void {
    this.maps.delete(address);
  }

  /**
   * A local port's bit flipped: every connection from that address sends the full map (on path 0,
   * or another path that is up while path 0 is not: RdsConnection.queueCongUpdate), loopback ones
   * included (as the kernel queues it on every connection of the map: its loopback transport
   * turns the update into a received one, which poll() reports). Loopback senders read this map
   * directly: wake any that wait on it now.
   */
  localChanged(laddr: string, conns: Iterable<RdsConnection>): void {
    for (const c of conns) {
      if (c.laddr !== laddr) continue;
      c.queueCongUpdate();
      // A loopback connection the other direction's traffic made may never have been used: it
      // comes up at once, for nothing, and its coming up delivers the map.
      if (c.isLoopback) c.path(0)!.connectIfDown();
    }
    this.wake();
  }

  /** A peer's map arrived on `conn`: tell the sockets bound to its local address, wake waiters. */
  received(conn: RdsConnection, cleared: bigint, sockets: Iterable<BoundSocket>): void {
    this.generation++;
    // TCP notifies monitors with every port (the kernel passes an all-ones mask for TCP).
    const mask = conn.transport.exactCongMask === true ? cleared : 0xffffffffffffffffn;
    for (const s of sockets) s.congestionUpdated(conn, mask);
    this.wake();
  }

  addWaiter(fn: () => void): void {
    this.waiters.add(fn);
  }

  removeWaiter(fn: () => void): void {
    this.waiters.delete(fn);
  }

  private wake(): void {
    const fns = [...this.waiters];
    this.waiters.clear();
    for (const fn of fns) fn();
  }
}
