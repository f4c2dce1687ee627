// The host node's record of one socket an attached client has open: the real socket it runs in the
// node's stack, the SEND frames not yet handed to it (the backlog), the budget figures the client's
// SENT reports come from, and what was handed to the client and not yet read. Only this class
// writes its fields; the send side (node-send.ts) and the client (server-client.ts) call its
// methods. Its life is one checked state, as the path's is (core/path.ts):
//
//   IDLE --run()--> RUNNING --run ends--> IDLE          (RUNNING: node-send's loop owns the backlog)
//   IDLE | RUNNING --close--> CLOSED                    (CLOSED is final)
//
// A move the table does not allow is a bug of the node (two loops handing one backlog would send
// out of order; a closed socket running again would send after close): it is refused, counted in
// the node's counters.stateRefused, and thrown as a NodeStateError, which drops that one client
// (its frame handler or its run loop catches it) and leaves the node and its other clients alone.
import { Fifo } from '../core/fifo.js';
import type { LocalBackend } from '../core/local-backend.js';
import type { RdsSocket } from '../core/socket.js';
import type { Receipt } from '../core/stack.js';
import { RX_DISCARDED } from '../core/ext/rx-ack.js';
import type { Item } from './client-state.js';
import { ProtocolError } from './protocol.js';

/** The states of a node socket. @internal */
export type NodeSockState = 'IDLE' | 'RUNNING' | 'CLOSED';

const LEGAL_MOVES: Readonly<Record<NodeSockState, readonly NodeSockState[]>> = {
  IDLE: ['RUNNING', 'CLOSED'],
  RUNNING: ['IDLE', 'CLOSED'],
  CLOSED: [],
};

/** An illegal state move of a node socket: a bug of the node, counted, and the end of that client. @internal */
export class NodeStateError extends Error {
  override readonly name = 'NodeStateError';
}

/** @internal */
export class NodeSock {
  #state: NodeSockState = 'IDLE';
  /** SEND frames not yet with the real socket, oldest first (a Fifo: it holds up to SO_SNDBUF of small messages). */
  #backlog = new Fifo<Item>();
  #backlogBytes = 0;
  /** Bytes of SEND frames accepted for this socket, and bytes given back in SENT frames. */
  #accepted = 0;
  #reported = 0;
  /** Messages handed on since the last SENT frame. */
  #sentMsgs = 0;
  /** Bytes handed to the client not yet reported read (CREDIT). */
  #inflight = 0;
  /** Receipts of messages handed to the client, oldest first: the sender hears they were read once the client says so. */
  readonly #held = new Fifo<Receipt | null>();
  /** The receipt of the message recvmsg() just returned, if it had one. */
  #lastReceipt: Receipt | null = null;
  #bound = '';
  /** flush() calls waiting for the backlog to empty. */
  #drainWaiters: (() => void)[] = [];

  constructor(
    readonly id: number,
    readonly real: RdsSocket,
    /** The real socket's backend: the node hears of its sent messages and receipts from it. */
    readonly local: LocalBackend,
    private readonly counters: { stateRefused: number },
  ) {
    // The sender hears a message was read once the client says so (CREDIT), not at recvmsg().
    local.on('receipt', (r) => {
      this.#lastReceipt = r;
    });
  }

  get state(): NodeSockState {
    return this.#state;
  }

  get closed(): boolean {
    return this.#state === 'CLOSED';
  }

  get running(): boolean {
    return this.#state === 'RUNNING';
  }

  private move(to: NodeSockState): void {
    if (!LEGAL_MOVES[this.#state].includes(to)) {
      this.counters.stateRefused++;
      throw new NodeStateError(`socket ${this.id}: ${this.#state} -> ${to} refused`);
    }
    this.#state = to;
  }

  // ---- send side (node-send.ts) ----

  get backlogLength(): number {
    return this.#backlog.length;
  }

  get backlogBytes(): number {
    return this.#backlogBytes;
  }

  get accepted(): number {
    return this.#accepted;
  }

  get reported(): number {
    return this.#reported;
  }

  get sentMsgs(): number {
    return this.#sentMsgs;
  }

  /** The backlog, oldest first (read only: items leave through take() and remove()). */
  backlog(): Iterable<Item> {
    return this.#backlog;
  }

  /** The oldest item of the backlog. */
  head(): Item | undefined {
    return this.#backlog.peek();
  }

  /**
   * SO_SNDBUF as set (getsockopt reports twice this, as Linux does): read from the real socket's
   * options rather than through getsockopt(), twice per message on the node's send side.
   */
  get sndbuf(): number {
    return this.local.options.sndbuf;
  }

  /**
   * A SEND frame's message that nothing in the backlog waits before (node-send's direct hand-off):
   * counted as accepted and as in the backlog, as queue() counts it, without an Item;
   * sentDirect() once the real socket took it, or queueAccepted() if it must wait after all.
   */
  acceptDirect(bytes: number): void {
    this.#accepted += bytes;
    this.#backlogBytes += bytes;
  }

  /** The message acceptDirect() counted was handed on (as take()): one more for the next SENT report, unless closed (false then). */
  sentDirect(bytes: number): boolean {
    this.#backlogBytes -= bytes;
    if (this.closed) return false;
    this.#sentMsgs++;
    return true;
  }

  /** A SEND frame's message joins the backlog. */
  queue(it: Item): void {
    this.#backlog.push(it);
    this.#backlogBytes += it.data.length;
    this.#accepted += it.data.length;
  }

  /** A message acceptDirect() already counted joins the backlog: the real socket had no room for it. */
  queueAccepted(it: Item): void {
    this.#backlog.push(it);
  }

  /**
   * `it` left the backlog (handed to the real socket, failed or cancelled): it no longer counts,
   * and unless the socket closed, it is one more message for the next SENT report (true then).
   */
  take(it: Item): boolean {
    if (this.#backlog.peek() === it) this.#backlog.shift();
    this.#backlogBytes -= it.data.length;
    if (this.closed) return false;
    this.#sentMsgs++;
    return true;
  }

  /** Items `leave` picks leave the backlog without being handed on (abort, RDS_CANCEL_SENT_TO); returns them. */
  remove(leave: (it: Item) => boolean): Item[] {
    const keep = new Fifo<Item>();
    const out: Item[] = [];
    for (const it of this.#backlog) (leave(it) ? out : keep).push(it);
    this.#backlog = keep;
    for (const it of out) this.#backlogBytes -= it.data.length;
    if (!this.closed) this.#sentMsgs += out.length;
    return out;
  }

  /** A SENT frame told the client that `bytes` left the node. */
  reportedNow(bytes: number): void {
    this.#reported += bytes;
  }

  /** The last SENT frame counted the messages handed on so far. */
  clearSentMsgs(): void {
    this.#sentMsgs = 0;
  }

  /** The socket is closing: what it sent is discarded with it, nothing is left to report. */
  forgetSent(): number {
    const n = this.#accepted - this.#reported;
    this.#reported = this.#accepted;
    return n;
  }

  /** node-send's loop takes the backlog over (one loop at a time, never on a closed socket). */
  startRun(): void {
    this.move('RUNNING');
  }

  /** node-send's loop ended: IDLE again, unless the socket closed meanwhile (which ended it). */
  endRun(): void {
    if (this.#state !== 'CLOSED') this.move('IDLE');
    if (this.#backlog.length === 0) this.drained();
  }

  /** Resolves once every message the client sent so far has left the backlog (or the socket closed). */
  whenDrained(): Promise<void> {
    if (this.#backlog.length === 0 || this.closed) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  /** The backlog is empty (or the socket closed): flush() calls waiting for it may go on. */
  drained(): void {
    if (this.#drainWaiters.length === 0) return;
    for (const w of this.#drainWaiters.splice(0)) w();
  }

  // ---- receive side and the rest (server-client.ts) ----

  get bound(): string {
    return this.#bound;
  }

  get inflight(): number {
    return this.#inflight;
  }

  boundTo(address: string, port: number): void {
    this.#bound = `${address}:${port}`;
  }

  /**
   * Received bytes the node hands this socket's client before the client says it has read them:
   * the socket's SO_RCVBUF (as set), so unread messages beyond it stay queued in the node, where
   * they make the port congested as the kernel would.
   */
  window(): number {
    // SO_RCVBUF as set (getsockopt reports it doubled, as Linux does), read once per message.
    return this.local.options.rcvbuf;
  }

  /**
   * A message of `bytes` went to the client: it counts against the window until the client's
   * CREDIT. Its receipt: the one recvmsg() just gave (the queued way), or `receipt` when the
   * message was handed on without being queued (node-deliver.ts cutThrough).
   */
  handedToClient(bytes: number, receipt?: Receipt | null): void {
    this.#inflight += bytes;
    this.#held.push(receipt === undefined ? this.#lastReceipt : receipt);
    this.#lastReceipt = null;
  }

  /**
   * CREDIT: the client read `bytes` in `messages` messages; their senders may now hear so
   * (send({ confirm })). More than was handed to it is a protocol error.
   */
  credit(bytes: number, messages: number): void {
    if (bytes < 0 || bytes > this.#inflight || messages < 0 || messages > this.#held.length)
      throw new ProtocolError('credit for more than was delivered');
    this.#inflight -= bytes;
    for (let i = 0; i < messages; i++) {
      const r = this.#held.shift();
      if (r) r.owner.consumed(r);
    }
  }

  /**
   * Closes the socket in the node: messages handed to the client but not read are discarded, as
   * close() discards unread messages; what waits in the backlog is aborted (returned, so the
   * client's confirm sends among them can be answered).
   */
  close(): Item[] {
    this.move('CLOSED');
    for (const r of this.#held.drain()) if (r) r.owner.consumed(r, RX_DISCARDED);
    const left = [...this.#backlog.drain()];
    for (const it of left) it.ac?.abort();
    this.#backlogBytes = 0;
    this.drained();
    void this.real.close();
    return left;
  }
}
