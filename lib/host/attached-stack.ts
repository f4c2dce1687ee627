// The stack of a process whose sockets live in a host node (RdsStack.attach()). It is an RdsStack
// (sockets take it as their stack, `instanceof RdsStack` holds) but it holds no transports,
// connections, bind table or counters: the node does. So it answers what can cross the process
// boundary by asking the node (report(), over the attach protocol's 'info' request), and every
// synchronous view of the node's tables (stats(), connections(), peers(), counters, ...) throws
// EOPNOTSUPP naming the call that works, instead of answering from the empty local tables it
// inherits (which read as "no traffic", the quiet lie this replaces). Why not a snapshot the node
// pushes: a sync read would then answer with data of unknown age, and the caller could not tell
// a stale figure from a current one; an await costs one round trip on a local Unix socket.
import type { HostNodeHandle, ServeOptions } from '../core/ext/host-hooks.js';
import type { PathPolicy } from '../core/ext/path-policy.js';
import type { PeerInfo } from '../core/ext/peer-state.js';
import type { RailSpec } from '../core/ext/rail.js';
import type { StackInfo } from '../core/info.js';
import { RdsStack } from '../core/stack.js';
import { type RdsCounterName, RdsStats } from '../core/stats.js';
import type { ConnectionInfo, StackReport } from '../core/types.js';
import { RdsError } from '../errors.js';
import { attachedReport } from './attached-info.js';
import { NodeLink } from './client.js';
import { defaultNodePath, findNode } from './paths.js';

/** The error of a synchronous view an attached stack cannot give: what lives where, and what to call instead. */
function inTheNode(nodePath: string, what: string, instead: string): RdsError {
  return new RdsError('EOPNOTSUPP', `an attached stack's ${what} live in rds-socketd (${nodePath}): ${instead}`);
}

/** An attached stack's counters: they are the node's, read with await stack.report(). */
class NodeCounters extends RdsStats {
  constructor(private readonly nodePath: string) {
    super();
  }

  override get(name: RdsCounterName): number {
    throw inTheNode(this.nodePath, 'counters', `use (await stack.report()).counters.${name}`);
  }

  override snapshot(): Record<RdsCounterName, number> {
    throw inTheNode(this.nodePath, 'counters', 'use (await stack.report()).counters');
  }

  override reset(): void {
    throw inTheNode(this.nodePath, 'counters', `reset them with rds-ctl --socket ${this.nodePath} reset-stats`);
  }
}

/**
 * A stack whose sockets live in a host node (RdsStack.attach()). It holds no transports or
 * connections of its own: bind tables, connections and counters are the node's, read with
 * `await stack.report()`; the synchronous views throw EOPNOTSUPP (see the top of this file).
 */
export class AttachedStack extends RdsStack {
  private link: NodeLink | null = null;
  /** The node's counters: read them with await report(); get() and snapshot() throw EOPNOTSUPP. */
  override readonly counters: RdsStats;

  constructor(readonly nodePath: string) {
    super({ transports: [] });
    this.counters = new NodeCounters(nodePath);
  }

  /** The live link, or a new one once the old is down (re-attaching to a node that came back). @internal */
  currentLink(): NodeLink {
    if (this.link === null || this.link.downError !== null) this.link = new NodeLink(this.nodePath);
    return this.link;
  }

  /** Resolves once attached; rejects with ENETDOWN when no node answers. */
  async attached(): Promise<this> {
    await this.currentLink().ready;
    return this;
  }

  /** The node's counters, connections and peers, as the node reads them when it answers. */
  override report(): Promise<StackReport> {
    if (this.closing) return Promise.reject(new RdsError('EBADF', 'report() on a closed attached stack'));
    return attachedReport((meta) => this.currentLink().request('info', 0, meta));
  }

  override stats(): { counters: Record<RdsCounterName, number>; connections: ConnectionInfo[] } {
    throw inTheNode(this.nodePath, 'counters and connections', 'use await stack.report()');
  }

  override connections(): ConnectionInfo[] {
    throw inTheNode(this.nodePath, 'connections', 'use (await stack.report()).connections');
  }

  override peers(): PeerInfo[] {
    throw inTheNode(this.nodePath, 'peers', 'use (await stack.report()).peers');
  }

  /** @internal */
  override info(): StackInfo {
    throw inTheNode(
      this.nodePath,
      'sockets, connections and queues',
      `read them with rds-info --socket ${this.nodePath}`,
    );
  }

  override reclaimIdleConnections(): number {
    throw inTheNode(this.nodePath, 'connections', 'the node reclaims its idle ones itself');
  }

  override resetStats(): void {
    throw inTheNode(this.nodePath, 'counters', `reset them with rds-ctl --socket ${this.nodePath} reset-stats`);
  }

  override reconnectPath(peer: string, index: number): void {
    throw inTheNode(this.nodePath, 'paths', `use rds-ctl --socket ${this.nodePath} reconnect ${peer} ${index}`);
  }

  override disconnectPath(peer: string, index: number): void {
    throw inTheNode(this.nodePath, 'paths', `use rds-ctl --socket ${this.nodePath} disconnect ${peer} ${index}`);
  }

  override addRail(_rail: RailSpec): Promise<void> {
    return Promise.reject(inTheNode(this.nodePath, 'rails', 'declare them on the stack that serves the node'));
  }

  override removeRail(_rail: RailSpec): boolean {
    throw inTheNode(this.nodePath, 'rails', 'remove them on the stack that serves the node');
  }

  override listRails(): RailSpec[] {
    throw inTheNode(this.nodePath, 'rails', 'list them on the stack that serves the node');
  }

  override setPathPolicy(_policy: PathPolicy | null, _peer?: string): void {
    throw inTheNode(this.nodePath, 'path policies', 'set them on the stack that serves the node');
  }

  override pathPolicy(_peer: string): PathPolicy {
    throw inTheNode(this.nodePath, 'path policies', 'read them on the stack that serves the node');
  }

  override openControl(): Promise<string> {
    return Promise.reject(
      inTheNode(
        this.nodePath,
        'tables',
        `the node's socket is its control endpoint: rds-info --socket ${this.nodePath}`,
      ),
    );
  }

  override serve(_opts?: ServeOptions): Promise<HostNodeHandle> {
    return Promise.reject(
      new RdsError(
        'EOPNOTSUPP',
        `an attached stack cannot serve: its sockets already live in the node at ${this.nodePath}`,
      ),
    );
  }

  override async close(): Promise<void> {
    if (!this.beginClose()) return;
    const l = this.link;
    if (l !== null) {
      await Promise.all([...l.sockets.values()].map((s) => s.closeSocket()));
      l.end();
    }
  }
}

const defaultAttached = new Map<string, AttachedStack>();

/** The stack default sockets attach through, one per node path. */
export function defaultAttachedStack(path: string): AttachedStack {
  let s = defaultAttached.get(path);
  if (s === undefined || s.closing) {
    s = new AttachedStack(path);
    defaultAttached.set(path, s);
  }
  return s;
}

/** Attaches to `path`, else to the node new RdsSocket() would find (this user's, else the system's). */
export async function attach(path?: string): Promise<AttachedStack> {
  return new AttachedStack(path ?? findNode().path ?? defaultNodePath()).attached();
}
