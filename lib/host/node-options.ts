// The node's stack options as its welcome carries them to an attached stack (AttachedStack.options):
// the options the node's stack was made with are fixed for its life, so the ones sent at attach
// are the ones in force. JSON has no Infinity (maxReconnectAttempts, failoverGraceMs may be it):
// it travels as the string 'Infinity'. The client checks every value as the RdsStack constructor
// would, so a node cannot hand it options no stack could have.
import { type ResolvedStackOptions, resolveStackOptions } from '../core/options.js';
import { ProtocolError } from './protocol-error.js';

/** The options as the welcome's meta carries them. */
export function optionsToWire(options: ResolvedStackOptions): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(options)) out[k] = v === Number.POSITIVE_INFINITY ? 'Infinity' : v;
  return out;
}

/** The options a welcome carried, checked; a ProtocolError when they are not what a stack could have. */
export function optionsFromWire(raw: unknown): ResolvedStackOptions {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw new ProtocolError('the welcome carries options that are not an object');
  const given: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(raw)) given[k] = v === 'Infinity' ? Number.POSITIVE_INFINITY : v;
  try {
    return Object.freeze(resolveStackOptions(given));
  } catch (e) {
    throw new ProtocolError(`the welcome carries options no stack could have (${(e as Error).message})`);
  }
}
