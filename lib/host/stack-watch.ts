// The host node's side of an attached stack's events: the served stack's path and peer events
// ('state', 'drop', ...), forwarded to a client that asked for them (the 'watch' request on
// socket 0) as EVENT frames on socket 0. A client asks only for the events it has listeners for
// (attached-events.ts), so a node with many attached processes that do not listen sends nothing.
// The bound on what a client can make the node hold is its connection's write backlog (a client
// that does not read its control socket is dropped, server-client.ts), and a watch holds at most
// one listener per event name.
import type { RdsStack } from '../core/stack.js';
import { RdsError } from '../errors.js';
import { wireError } from './client-state.js';

/** The stack events an attached stack may watch: its paths and peers, as the node sees them. */
export const WATCHABLE_EVENTS = ['state', 'drop', 'failover', 'protocol-error', 'peer-down', 'peer-up', 'rail-refused'];

/** The longest string of an event forwarded (a reason, an error's message); longer ones are cut. */
const MAX_EVENT_TEXT = 1024;

/** `ev` as an EVENT frame's meta carries it: strings cut to MAX_EVENT_TEXT, an Error as { code, message }. */
function wireEvent(name: string, ev: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ev: 'stack', name };
  for (const [k, v] of Object.entries(ev)) {
    if (v instanceof Error) {
      const e = wireError(v);
      out[k] = { code: e.code, message: e.message.slice(0, MAX_EVENT_TEXT) };
    } else out[k] = typeof v === 'string' ? v.slice(0, MAX_EVENT_TEXT) : v;
  }
  return out;
}

/** One client's watch on the node's stack. @internal */
export class StackWatch {
  private readonly listening = new Map<string, (ev: Record<string, unknown>) => void>();

  constructor(
    private readonly stack: RdsStack,
    /** Writes one EVENT frame on socket 0 to the client. */
    private readonly send: (meta: Record<string, unknown>) => void,
  ) {}

  /** Watches exactly `names` from now on (an empty list ends the watch). Throws EINVAL on a name it does not forward. */
  set(names: unknown): void {
    if (!Array.isArray(names) || names.length > WATCHABLE_EVENTS.length)
      throw new RdsError('EINVAL', `watch takes a list of at most ${WATCHABLE_EVENTS.length} event names`);
    for (const n of names)
      if (typeof n !== 'string' || !WATCHABLE_EVENTS.includes(n))
        throw new RdsError('EINVAL', `cannot watch ${JSON.stringify(n)}: only ${WATCHABLE_EVENTS.join(', ')}`);
    const want = new Set(names as string[]);
    for (const [name, fn] of this.listening)
      if (!want.has(name)) {
        this.stack.off(name as 'state', fn as never);
        this.listening.delete(name);
      }
    for (const name of want) {
      if (this.listening.has(name)) continue;
      const fn = (ev: Record<string, unknown>) => this.send(wireEvent(name, ev));
      this.listening.set(name, fn);
      this.stack.on(name as 'state', fn as never);
    }
  }

  /** The client is gone: the stack forgets its listeners. */
  close(): void {
    this.set([]);
  }
}
