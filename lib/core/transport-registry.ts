import { RdsError } from '../errors.js';
import { recvIncoming } from './recv.js';
import { corePath } from './transport-path.js';
import type { RdsStack } from './stack.js';
import type { RdsTransport, TransportHost } from './transport.js';

/**
 * The transports of one stack (the kernel's transport.c: rds_trans_register, rds_trans_get,
 * rds_trans_get_preferred): registered once, each handed the stack's TransportHost; looked up by
 * name or SO_RDS_TRANSPORT type; held or released together with the event loop, closed together.
 */
export class TransportRegistry {
  private readonly byName = new Map<string, RdsTransport>();

  constructor(private readonly host: TransportHost) {}

  register(t: RdsTransport): void {
    if (this.byName.has(t.name)) throw new RdsError('EINVAL', `transport ${t.name} is already registered`);
    this.byName.set(t.name, t);
    t.attach(this.host);
  }

  get(name: string): RdsTransport | undefined {
    return this.byName.get(name);
  }

  byType(type: number): RdsTransport | undefined {
    for (const t of this.byName.values()) if (t.transType === type) return t;
    return undefined;
  }

  /** Transports a socket may bind with, in the kernel's preference order (IB before TCP). */
  selectable(): RdsTransport[] {
    return [...this.byName.values()].filter((t) => t.userSelectable).sort((a, b) => a.transType - b.transType);
  }

  setRef(ref: boolean): void {
    for (const t of this.byName.values()) t.setRef(ref);
  }

  /** Closes every transport, holding the event loop while their carriers close gracefully (bounded by their linger). */
  async close(): Promise<void> {
    this.setRef(true);
    await Promise.all([...this.byName.values()].map((t) => t.close()));
  }
}

/**
 * The TransportHost a stack hands its transports: a view of its own methods and state, so a
 * transport depends on that small interface, never on the class.
 */
export function transportHostOf(stack: RdsStack): TransportHost {
  return {
    get options() {
      return stack.options;
    },
    // Read on every frame: a plain value (made after the counters, before the constructor runs).
    counters: stack.counters,
    get closing() {
      return stack.closing;
    },
    get referenced() {
      return stack.referenced;
    },
    peerAllowed: (address) => stack.peerAllowed(address),
    isLocalAddress: (address) => stack.binds.hasAddress(address),
    isBound: (address, port) => stack.binds.isBound(address, port),
    connFor: (laddr, faddr, transport, tos) => stack.connFor(laddr, faddr, transport, tos),
    findConn: (laddr, faddr, transport, tos) => stack.findConn(laddr, faddr, transport, tos),
    recvIncoming: (cp, header, payload, localReceipt) =>
      recvIncoming(stack, corePath(cp), header, payload, localReceipt),
    reportProtocolError: (cp, error) => stack.pathEvents.protocolError(corePath(cp), error),
    get rails() {
      return stack.rails;
    },
    emit: (event, ...args) => stack.emit(event, ...args),
  };
}
