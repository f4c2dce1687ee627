// The host node's receive side for one attached client: how a message its stack received for a
// socket of that client's reaches the client. Two ways, one order:
//
// - Cut-through (the common case): the node's stack has done what must stay in the node (the
//   sequence, ack and duplicate checks, the read-report receipt, recv.ts; a malformed frame from
//   the peer never gets this far), found the socket by its destination port, and offers the
//   message to the socket's RxHandoff (core/local-rx.ts) before queueing it. While nothing waits in
//   the node's queue and the client's window (its SO_RCVBUF) has room, it goes to the client at
//   once, in the event-loop turn that read it: no receive-queue entry, no 'readable' turn, no
//   recvmsg() in the node. To a protocol 5 client it goes as the peer sent it (MSG with M_WIRE:
//   the RDS header as received and the payload), which the client parses (msg-frames.ts).
// - Queued: a message that finds the window full, or something queued before it (a message, a
//   congestion notification, zero-copy completions), waits in the node's socket as before, where
//   it counts against SO_RCVBUF and sets the port's congestion bit as the kernel would; pump()
//   moves it when the client's CREDIT opens the window, through recvmsg() (its header is not kept
//   there: it goes as a plain MSG, which every client version reads).
import type { RxHandoff } from '../core/local-rx.js';
import type { RdsMessage, Receipt } from '../core/types.js';
import { writeMsg, writeMsgWire } from './msg-frames.js';
import type { NodeSock } from './node-sock.js';
import type { FrameOut } from './protocol.js';

/** The first protocol version whose client reads MSG with M_WIRE. */
export const WIRE_MSG_VERSION = 5;

/** What delivery needs of the client it delivers to (server-client.ts). @internal */
export interface DeliveryTarget {
  readonly writer: FrameOut;
  /** The client is being dropped: nothing more is written to it. */
  isGone(): boolean;
  /** Its hello's protocol version. */
  readonly version: number;
}

/** The handoff the node installs on the real socket of `s` (its LocalRx). @internal */
export function cutThrough(c: DeliveryTarget, s: NodeSock): RxHandoff {
  return (msg: RdsMessage, receipt: Receipt | null, header: Buffer): boolean => {
    if (s.closed || c.isGone() || s.inflight >= s.window()) return false;
    s.handedToClient(msg.data.length, receipt);
    // A message handed over here has no completions or congestion bits of its own (those ride on
    // messages recvmsg() returns, below).
    if (c.version >= WIRE_MSG_VERSION) writeMsgWire(c.writer, s.id, msg, header);
    else writeMsg(c.writer, s.id, msg);
    return true;
  };
}

/** Moves messages queued in the node's socket to the client while its window has room. @internal */
export function pump(c: DeliveryTarget, s: NodeSock): void {
  if (s.closed) return;
  const window = s.window();
  while (s.inflight < window) {
    const m = s.real.recvmsg();
    if (m === null) return;
    s.handedToClient(m.data.length);
    if (!c.isGone()) writeMsg(c.writer, s.id, m);
  }
}
