// What one attached client may hold in the host node, and the per-socket state the node keeps for
// each socket a client has open (its send backlog, what it was handed and not yet read), and how
// an error travels back to the client.
import { SO_RCVBUF, SOL_SOCKET } from '../constants.js';
import type { RdsSocket } from '../core/socket.js';
import type { LocalBackend } from '../core/local-backend.js';
import type { Receipt } from '../core/stack.js';
import type { Fifo } from '../core/fifo.js';
import { RX_DISCARDED } from '../core/ext/rx-ack.js';
import { RdsError } from '../errors.js';

/** Sockets one client may hold open. */
export const MAX_SOCKETS_PER_CLIENT = 4096;
/** Calls one client may have waiting for an answer (confirmations, flushes, binds). */
export const MAX_OUTSTANDING_PER_CLIENT = 65536;
/**
 * Received bytes the node hands a client's socket before the client says it has read them: the
 * socket's SO_RCVBUF (as set), so unread messages beyond it stay queued in the node, where they
 * make the port congested as the kernel would.
 * @internal
 */
export function recvWindow(s: NodeSock): number {
  return s.real.getsockopt(SOL_SOCKET, SO_RCVBUF) / 2;
}
/**
 * What one client may have the node hold for it by default (ServeOptions.maxClientSendBytes): sent
 * and not yet acknowledged by the peer, all its sockets together.
 */
export const DEFAULT_MAX_CLIENT_SEND_BYTES = 256 << 20;
/** A client not reading its control socket is dropped once this much is waiting to be written to it. */
export const MAX_CLIENT_WRITE_BACKLOG = 256 << 20;

/** @internal */
export interface Item {
  data: Buffer;
  dest: { address: string; port: number };
  flags: number;
  cookie: number | undefined;
  confirm: boolean;
  /** Request id to answer (confirm sends), 0 for none. */
  id: number;
  ac: AbortController | null;
}

/** @internal */
export interface NodeSock {
  id: number;
  real: RdsSocket;
  /** The real socket's backend: the node hears of its sent messages and receipts from it. */
  local: LocalBackend;
  /** SEND frames not yet with the real socket, oldest first (a Fifo: it holds up to SO_SNDBUF of small messages). */
  backlog: Fifo<Item>;
  backlogBytes: number;
  running: boolean;
  closed: boolean;
  /** Bytes handed to the client not yet reported read (CREDIT). */
  inflight: number;
  /** Bytes of SEND frames accepted for this socket, and bytes given back in SENT frames. */
  accepted: number;
  reported: number;
  /** Messages handed on since the last SENT frame. */
  sentMsgs: number;
  /** Receipts of messages handed to the client, oldest first: the sender hears they were read once the client says so. */
  held: Fifo<Receipt | null>;
  /** The receipt of the message recvmsg() just returned, if it had one. */
  takeReceipt: () => Receipt | null;
  bound: string;
  /** flush() calls waiting for the backlog to empty. */
  drainWaiters: (() => void)[];
}

/** The backlog of `s` is empty (or the socket closed): flush() calls waiting for it may go on. @internal */
export function drained(s: NodeSock): void {
  if (s.drainWaiters.length === 0) return;
  for (const w of s.drainWaiters.splice(0)) w();
}

/** Closes a client's socket in the node: messages handed to the client but not read are discarded, as close() discards unread messages. @internal */
export function closeNodeSock(s: NodeSock): void {
  s.closed = true;
  for (const r of s.held.drain()) if (r) r.owner.consumed(r, RX_DISCARDED);
  for (const it of s.backlog.drain()) it.ac?.abort();
  s.backlogBytes = 0;
  drained(s);
  void s.real.close();
}

/** An error as an answer frame carries it: its code and its message without the code prefix. @internal */
export function wireError(e: unknown): { code: string; message: string } {
  if (e instanceof RdsError) {
    const prefix = `${e.code}: `;
    return { code: e.code, message: e.message.startsWith(prefix) ? e.message.slice(prefix.length) : e.message };
  }
  return { code: 'EPROTO', message: e instanceof Error ? e.message : String(e) };
}
