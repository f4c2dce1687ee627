// What one attached client may hold in the host node, a message waiting in a socket's send backlog
// (the socket's own record is node-sock.ts), and how an error travels back to the client.
import { RdsError } from '../errors.js';

/** Sockets one client may hold open. */
export const MAX_SOCKETS_PER_CLIENT = 4096;
/** Calls one client may have waiting for an answer (confirmations, flushes, binds). */
export const MAX_OUTSTANDING_PER_CLIENT = 65536;
/**
 * What one client may have the node hold for it by default (ServeOptions.maxClientSendBytes): sent
 * and not yet acknowledged by the peer, all its sockets together.
 */
export const DEFAULT_MAX_CLIENT_SEND_BYTES = 256 << 20;
/** A client not reading its control socket is dropped once this much is waiting to be written to it. */
export const MAX_CLIENT_WRITE_BACKLOG = 256 << 20;

/** @internal */
export interface Item {
  /** The payload. */
  data: Buffer;
  /** Protocol 4 (F_WIRE): the RDS data header and payload the client wrote, `data` a view of it; else null. */
  wire: Buffer | null;
  dest: { address: string; port: number };
  flags: number;
  cookie: number | undefined;
  confirm: boolean;
  /** Request id to answer (confirm sends), 0 for none. */
  id: number;
  ac: AbortController | null;
}

/** An error as an answer frame carries it: its code and its message without the code prefix. @internal */
export function wireError(e: unknown): { code: string; message: string } {
  if (e instanceof RdsError) {
    const prefix = `${e.code}: `;
    return { code: e.code, message: e.message.startsWith(prefix) ? e.message.slice(prefix.length) : e.message };
  }
  return { code: 'EPROTO', message: e instanceof Error ? e.message : String(e) };
}
