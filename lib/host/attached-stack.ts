// The stack of a process whose sockets live in a host node (RdsStack.attach()). It is an RdsStack
// (sockets take it as their stack, `instanceof RdsStack` holds) but it holds no transports,
// connections, bind table or counters: the node does. So it answers what can cross the process
// boundary by asking the node (report(), over the attach protocol's 'info' request), and every
// synchronous view of the node's tables (stats(), connections(), peers(), counters, ...) throws
// EOPNOTSUPP naming the call that works, instead of answering from the empty local tables it
// inherits (which read as "no traffic", the quiet lie this replaces). Why not a snapshot the node
// pushes: a sync read would then answer with data of unknown age, and the caller could not tell
// a stale figure from a current one; an await costs one round trip on a local Unix socket.
import type { EventEmitter } from 'eventemitter3';
import type { HostNodeHandle, ServeOptions } from '../core/ext/host-hooks.js';
import type { PathPolicy } from '../core/ext/path-policy.js';
import type { PeerInfo } from '../core/ext/peer-state.js';
import type { RailSpec } from '../core/ext/rail.js';
import type { StackInfo } from '../core/info.js';
import type { ResolvedStackOptions } from '../core/options.js';
import { RdsStack } from '../core/stack.js';
import { type RdsCounterName, RdsStats } from '../core/stats.js';
import type { ConnectionInfo, RdsStackEvents, StackReport } from '../core/types.js';
import { RdsError } from '../errors.js';
import { NodeEventWatch, type WatchedStack } from './attached-events.js';
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

  /** The node's path and peer events this stack's listeners wait for. */
  private readonly watch = new NodeEventWatch(this as unknown as WatchedStack);
  /** The node's options, from the latest welcome. */
  private knownOptions: ResolvedStackOptions | null = null;

  constructor(readonly nodePath: string) {
    super({ transports: [] });
    this.counters = new NodeCounters(nodePath);
    // `options` is a field of RdsStack (its own options, fixed at construction); here it is the
    // node's, which arrive with the welcome: a getter, since they are not known yet.
    Object.defineProperty(this, 'options', { get: () => this.nodeOptions(), enumerable: true });
  }

  /** The node's stack options as its welcome gave them (they are fixed for the node's life). */
  private nodeOptions(): ResolvedStackOptions {
    const l = this.link;
    if (l?.nodeOptions != null) this.knownOptions = l.nodeOptions;
    if (this.knownOptions !== null) return this.knownOptions;
    if (l?.up)
      throw new RdsError(
        'EOPNOTSUPP',
        `the node at ${this.nodePath} does not send its options (an rds-socketd older than this package)`,
      );
    throw new RdsError(
      'ENOTCONN',
      `an attached stack's options are its node's, known once it is attached: await stack.attached() first (${this.nodePath})`,
    );
  }

  /** The live link, or a new one once the old is down (re-attaching to a node that came back). @internal */
  currentLink(): NodeLink {
    if (this.link === null || this.link.downError !== null) {
      this.link = new NodeLink(this.nodePath);
      this.watch.linked(this.link);
    }
    return this.link;
  }

  // Listeners for the node's events: the first one for an event asks the node to forward it, the
  // last one removed stops it (eventemitter3 has no 'newListener' event to hook instead).
  override on<T extends EventEmitter.EventNames<RdsStackEvents>>(
    event: T,
    fn: EventEmitter.EventListener<RdsStackEvents, T>,
    context?: unknown,
  ): this {
    super.on(event, fn, context);
    this.listenersChanged(true);
    return this;
  }

  override addListener<T extends EventEmitter.EventNames<RdsStackEvents>>(
    event: T,
    fn: EventEmitter.EventListener<RdsStackEvents, T>,
    context?: unknown,
  ): this {
    return this.on(event, fn, context);
  }

  override once<T extends EventEmitter.EventNames<RdsStackEvents>>(
    event: T,
    fn: EventEmitter.EventListener<RdsStackEvents, T>,
    context?: unknown,
  ): this {
    super.once(event, fn, context);
    this.listenersChanged(true);
    return this;
  }

  override removeListener<T extends EventEmitter.EventNames<RdsStackEvents>>(
    event: T,
    fn?: EventEmitter.EventListener<RdsStackEvents, T>,
    context?: unknown,
    once?: boolean,
  ): this {
    super.removeListener(event, fn, context, once);
    this.listenersChanged(false);
    return this;
  }

  override off<T extends EventEmitter.EventNames<RdsStackEvents>>(
    event: T,
    fn?: EventEmitter.EventListener<RdsStackEvents, T>,
    context?: unknown,
    once?: boolean,
  ): this {
    return this.removeListener(event, fn, context, once);
  }

  override removeAllListeners(event?: EventEmitter.EventNames<RdsStackEvents>): this {
    super.removeAllListeners(event);
    this.listenersChanged(false);
    return this;
  }

  /**
   * The set of listened-for events may have changed. A listener added while no link is up
   * attaches (again, after the node went away): it is a call on the stack, like report().
   */
  private listenersChanged(added: boolean): void {
    // undefined while RdsStack's constructor runs (the field is set after it); a closed stack no longer asks.
    if (this.watch === undefined || this.closing) return;
    if (added) this.currentLink();
    this.watch.changed();
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
