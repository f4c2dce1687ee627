// An attached stack's path and peer events: the paths are the node's, so the events are too. The
// attached stack asks the node for the events it has listeners for (the 'watch' request on socket
// 0, answered by stack-watch.ts) and emits what the node forwards. It asks again whenever the set
// of listened-for events changes (first listener added, last one removed) and on every new link to
// the node, so a process that listens for nothing makes the node send nothing.
import { RdsError, type RdsErrorCode } from '../errors.js';
import type { NodeLink } from './client.js';
import { WATCHABLE_EVENTS } from './stack-watch.js';

/** What the watch needs of the attached stack: its listeners and its emit. */
export interface WatchedStack {
  listenerCount(event: string): number;
  emit(event: string, ev: unknown): boolean;
}

/** The event a node's EVENT frame carries, as the stack emits it (an error rebuilt as an RdsError). */
function eventFrom(meta: Record<string, unknown>): Record<string, unknown> {
  const ev: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(meta)) {
    if (k === 'ev' || k === 'name') continue;
    if (k === 'error' && v !== null && typeof v === 'object') {
      const e = v as { code?: unknown; message?: unknown };
      ev[k] = new RdsError(
        (typeof e.code === 'string' ? e.code : 'EPROTO') as RdsErrorCode,
        typeof e.message === 'string' ? e.message : 'the peer broke the protocol',
      );
    } else ev[k] = v;
  }
  return ev;
}

/** One attached stack's watch on its node's events. @internal */
export class NodeEventWatch {
  private link: NodeLink | null = null;
  /** The events last asked of `link` ('' for none), so an unchanged set is not asked again. */
  private asked = '';

  constructor(private readonly stack: WatchedStack) {}

  /** The events some listener waits for. */
  private wanted(): string[] {
    return WATCHABLE_EVENTS.filter((e) => this.stack.listenerCount(e) > 0);
  }

  /** A new link to the node: it knows nothing of this stack's watch yet. */
  linked(link: NodeLink): void {
    this.link = link;
    this.asked = '';
    link.onStackEvent = (meta) => this.deliver(meta);
    this.changed();
  }

  /** Listeners were added or removed: asks the node for the events now listened for, if they changed. */
  changed(): void {
    const link = this.link;
    if (link === null || link.downError !== null) return;
    const events = this.wanted();
    const key = events.join(',');
    if (key === this.asked) return;
    this.asked = key;
    const ask = (): void => {
      // A node older than this package does not forward events (its welcome says so).
      if (link.nodeEvents && link.downError === null) link.request('watch', 0, { events }).catch(() => {});
    };
    // Written at once when the link is up, so a request made after on() reaches the node after it.
    if (link.up) ask();
    else link.ready.then(ask, () => {});
  }

  private deliver(meta: Record<string, unknown>): void {
    const name = meta.name;
    if (typeof name !== 'string' || !WATCHABLE_EVENTS.includes(name)) return;
    this.stack.emit(name, eventFrom(meta));
    // A once() listener is gone now: stop the node sending what nobody waits for.
    this.changed();
  }
}
