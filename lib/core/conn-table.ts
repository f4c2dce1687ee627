import { RdsError } from '../errors.js';
import { RdsConnection } from './connection.js';
import type { RdsConnPath } from './path.js';
import { ConnReclaimer } from './ext/reclaim.js';
import type { RdsStack } from './stack.js';
import { RDS_CTR } from './stats.js';
import type { RdsTransport } from './transport.js';

/**
 * The connection table of a stack (the kernel's rds_conn_hash, connection.c): one RdsConnection
 * per (local address, peer address, transport, TOS), made on first use and shared by every
 * socket, forgotten once idle (reclaim.ts). The TOS is the transport's map of a socket's
 * (RdsTransport.tosMap): 0 for every TCP socket, so TCP has one connection per address pair.
 */
export class ConnTable {
  private readonly conns = new Map<string, RdsConnection>();
  private readonly reclaimer: ConnReclaimer;

  /** `forgotten` runs after an idle connection has left the table. */
  constructor(
    private readonly stack: RdsStack,
    private readonly forgotten: (c: RdsConnection) => void,
  ) {
    this.reclaimer = new ConnReclaimer(stack.options.peerIdleTimeoutMs, this.conns, (c) => this.forget(c));
  }

  /** The connection (laddr, faddr, transport, tos), made on first use. */
  get(laddr: string, faddr: string, transport: RdsTransport, tos = 0): RdsConnection {
    const key = RdsConnection.key(laddr, faddr, transport.name, tos);
    let c = this.conns.get(key);
    if (c === undefined) {
      const paths = transport.mpathCapable ? this.stack.maxPaths : 1;
      c = new RdsConnection(this.stack, laddr, faddr, transport, paths, tos);
      this.conns.set(key, c);
      this.reclaimer.connCreated(c);
    }
    return c;
  }

  /** The connection if there is one; never makes one. */
  find(laddr: string, faddr: string, transport: RdsTransport, tos = 0): RdsConnection | undefined {
    return this.conns.get(RdsConnection.key(laddr, faddr, transport.name, tos));
  }

  values(): IterableIterator<RdsConnection> {
    return this.conns.values();
  }

  /** Some connection has `address` as its peer, or (with `orLocal`) as its local address. */
  refersTo(address: string, orLocal = false): boolean {
    for (const c of this.conns.values()) if (c.faddr === address || (orLocal && c.laddr === address)) return true;
    return false;
  }

  /** Forgets every idle connection now, as the periodic sweep does; returns how many. */
  sweep(): number {
    return this.reclaimer.sweep();
  }

  setRef(ref: boolean): void {
    for (const c of this.conns.values()) for (const p of c.madePaths()) p.setRef(ref);
  }

  /**
   * The stack is closing, its sockets closed: acknowledge everything (unread messages were
   * discarded with their sockets) before the carriers end, then stop every timer.
   */
  close(): void {
    for (const c of this.conns.values()) for (const p of c.madePaths()) p.acks.finalAck();
    for (const c of this.conns.values()) for (const p of c.madePaths()) p.dispose();
    this.reclaimer.stop();
  }

  private forget(c: RdsConnection): void {
    this.conns.delete(c.key);
    this.stack.counters.add(RDS_CTR.conn_reclaimed);
    this.forgotten(c);
  }

  /** The path `index` (as connections() shows it) of the connection to `peer`; throws ENOENT if none. */
  path(peer: string, index: number, localAddress?: string): RdsConnPath {
    for (const c of this.values()) {
      if (c.faddr !== peer || (localAddress !== undefined && c.laddr !== localAddress) || c.isLoopback) continue;
      const p = c.path(index);
      if (p !== undefined) return p;
    }
    throw new RdsError(
      'ENOENT',
      `no path ${index} to ${peer}${localAddress ? ` from ${localAddress}` : ''} (see stack.connections())`,
    );
  }
}
