import { randomInt } from 'node:crypto';
import { RdsError } from '../errors.js';
import type { BoundSocket } from './types.js';

/**
 * The bind table (the kernel's bind.c): which socket holds each (address, port) of a stack. An
 * address is here while any socket is bound to it, which is what makes it local: traffic to it
 * takes the loopback transport.
 */
export class BindTable {
  private readonly byAddress = new Map<string, Map<number, BoundSocket>>();

  /** The socket bound to (address, port), if any. */
  get(address: string, port: number): BoundSocket | undefined {
    return this.byAddress.get(address)?.get(port);
  }

  isBound(address: string, port: number): boolean {
    return this.byAddress.get(address)?.has(port) === true;
  }

  /** Some socket is bound to `address`. */
  hasAddress(address: string): boolean {
    return this.byAddress.has(address);
  }

  /** Reserves (address, port) for a socket; throws EADDRINUSE if taken. */
  reserve(address: string, port: number, sock: BoundSocket): void {
    let ports = this.byAddress.get(address);
    if (ports?.has(port)) {
      throw new RdsError(
        'EADDRINUSE',
        `${address}:${port} is already bound by another RDS socket in this stack; choose another port or 0 for an ephemeral one`,
      );
    }
    if (ports === undefined) {
      ports = new Map();
      this.byAddress.set(address, ports);
    }
    ports.set(port, sock);
  }

  /** Picks a free port the way the kernel does: random start >= 2, probing upward. */
  ephemeralPort(address: string): number {
    const start = randomInt(2, 65536);
    for (let i = 0; i < 65534; i++) {
      const p = 2 + ((start - 2 + i) % 65534);
      if (!this.isBound(address, p)) return p;
    }
    throw new RdsError('EADDRINUSE', `no free RDS port left on ${address}`);
  }

  /** Releases (address, port) if `sock` holds it. */
  unbind(address: string, port: number, sock: BoundSocket): void {
    const ports = this.byAddress.get(address);
    if (ports?.get(port) !== sock) return;
    ports.delete(port);
    if (ports.size === 0) this.byAddress.delete(address);
  }

  /** The sockets bound to `address` (every port). */
  at(address: string): Iterable<BoundSocket> {
    return this.byAddress.get(address)?.values() ?? [];
  }

  /** Every bound socket. */
  all(): BoundSocket[] {
    return [...this.byAddress.values()].flatMap((ports) => [...ports.values()]);
  }
}
