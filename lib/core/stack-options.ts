import { RdsError } from '../errors.js';
import type { RdsStackOptions } from './stack.js';

/**
 * Every option `new RdsStack()` takes. Typed as a record of RdsStackOptions' keys, so adding an
 * option to the interface without listing it here fails to compile (and never gets refused).
 */
const KNOWN: Record<keyof RdsStackOptions, true> = {
  tcpPort: true, reconnectMinDelayMs: true, reconnectMaxDelayMs: true, pingEnable: true, transports: true,
  rdsAcks: true, maxUnackedPackets: true, maxUnackedBytes: true, ackDelayMaxMs: true, heartbeatIntervalMs: true,
  heartbeatMissedLimit: true, handshakeTimeoutMs: true, allowPeers: true, maxConnections: true,
  maxUnidentifiedConnections: true, headerTimeoutMs: true, control: true, npaths: true, failoverGraceMs: true,
  frameTimeoutMs: true, maxPartialFrameBytes: true, recvHardLimitFactor: true, maxRecvQueueBytes: true, maxOwnQueued: true,
  peerDownMs: true, peerIdleTimeoutMs: true,
};

export const STACK_OPTION_NAMES: readonly string[] = Object.keys(KNOWN);

/**
 * Refuses what JavaScript callers can pass and TypeScript would have caught: a non-object, or an
 * option name the stack does not know (a typo like heartbeatInterval would otherwise be ignored).
 */
export function checkStackOptions(opts: unknown): void {
  if (opts === null || typeof opts !== 'object' || Array.isArray(opts)) {
    throw new RdsError('EINVAL', 'RdsStack options must be an object');
  }
  for (const name of Object.keys(opts)) {
    if (Object.prototype.hasOwnProperty.call(KNOWN, name)) continue;
    const lower = name.toLowerCase();
    const near = STACK_OPTION_NAMES.find((k) => k.toLowerCase() === lower || k.toLowerCase().startsWith(lower) || lower.startsWith(k.toLowerCase()));
    throw new RdsError('EINVAL', `unknown RdsStack option ${JSON.stringify(name)}${near ? `; did you mean ${near}?` : ''} (known: ${STACK_OPTION_NAMES.join(', ')})`);
  }
}

/**
 * RDS_SOCKET_CONTROL in the environment opens the rds-info control endpoint on the default stack
 * without code changes: "1" (or "true", "yes") for the usual place, an absolute path for that
 * path, "0" / "" / unset for none.
 */
export function controlFromEnv(env: NodeJS.ProcessEnv = process.env): boolean | string {
  const v = (env.RDS_SOCKET_CONTROL ?? '').trim();
  if (v === '' || v === '0' || /^(false|no|off)$/i.test(v)) return false;
  if (v.startsWith('/')) return v;
  return true;
}

/**
 * An 'error' no listener takes: eventemitter3 would drop it silently. Node's EventEmitter throws;
 * a stack's errors come from listeners and background work (where a throw would crash the
 * process from a callback), so it is made visible as a process warning instead, once per message.
 */
const warned = new Set<string>();
export function warnUnhandledError(err: unknown): void {
  const text = err instanceof Error ? err.message : String(err);
  if (warned.has(text)) return;
  warned.add(text);
  process.emitWarning(`unhandled 'error' event on an RdsStack: ${text} (listen with stack.on('error', ...) to handle it)`,
    { type: 'RdsStackWarning', code: 'RDS_SOCKET_UNHANDLED_ERROR' });
}
