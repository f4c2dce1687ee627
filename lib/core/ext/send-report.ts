import { flowControlError, type RdsError } from '../../errors.js';
import type { RdsSendList } from '../message.js';

/**
 * EAGAIN, saying who holds the budget. Non-blocking senders get it at message rates and mostly
 * test only `code`: the report walks the send list, so it is made when the message is first
 * read, not when the error is thrown.
 */
export function sendBufferFull(
  bytes: number,
  sndbuf: number,
  pending: RdsSendList,
  unreachableMs: (address: string) => number,
): RdsError {
  const head = `EAGAIN: send buffer full (${bytes} of ${sndbuf} bytes unacknowledged)`;
  const err = flowControlError('EAGAIN', '');
  let text: string | null = null;
  Object.defineProperty(err, 'message', {
    configurable: true,
    enumerable: false,
    get: () => (text ??= `${head}: ${budgetReport(pending, unreachableMs)}`),
    set: (v: string) => {
      text = v;
    },
  });
  return err;
}

/**
 * For the EAGAIN message: the destination (address and port) holding most of a socket's send
 * budget, how much, and what to do about it. Walks the socket's send list, so it runs only when
 * an error message is actually read.
 */
export function budgetReport(pending: RdsSendList, unreachableMs: (address: string) => number): string {
  const by = new Map<string, { address: string; port: number; messages: number; bytes: number }>();
  let top: { address: string; port: number; messages: number; bytes: number } | null = null;
  for (let m = pending.first; m !== null; m = m.sockNext) {
    const k = `${m.daddr}|${m.dport}`;
    let d = by.get(k);
    if (d === undefined) by.set(k, (d = { address: m.daddr, port: m.dport, messages: 0, bytes: 0 }));
    d.messages++;
    d.bytes += m.len;
    if (top === null || d.bytes > top.bytes) top = d;
  }
  if (top === null) return "wait for 'writable' or use send()";
  const ep = top.address.includes(':') ? `[${top.address}]:${top.port}` : `${top.address}:${top.port}`;
  const where = `${top.messages} message${top.messages === 1 ? '' : 's'} / ${formatBytes(top.bytes)} queued to ${ep}`;
  const ms = unreachableMs(top.address);
  if (ms > 0)
    return `${where}, unreachable for ${formatDuration(ms)}; cancel with RDS_CANCEL_SENT_TO or set SO_SNDTIMEO`;
  return `${where}, reachable but not yet acknowledged; wait for 'writable' or use send()`;
}

export function formatBytes(n: number): string {
  if (n < 1000) return `${n} bytes`;
  if (n < 1e6) return `${Math.floor(n / 1000)} KB`;
  return `${(n / 1e6).toFixed(1)} MB`;
}

export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return `${Math.round(ms / 1000)} s`;
}
