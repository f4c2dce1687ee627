// The host node's send side for one attached client: the SEND frames of its sockets, queued per
// socket (the backlog) and handed to the real socket in order, waiting for room or for a
// congested destination to clear without blocking the client's other sockets; and the SENT
// reports that give the client its send budget back once its messages have left the node (the
// peer acknowledged them, or they failed or were cancelled), as SO_SNDBUF counts in the kernel.
// What the node holds for a client, all its sockets together, is bounded by the node's
// maxClientSendBytes, which the client also enforces (it learns it in the welcome).
import { RDS_MAX_MSG_SIZE } from '../constants.js';
import { RdsError } from '../errors.js';
import { decodeSend, writeCount } from './hot-frames.js';
import { checkWireHeader } from './send-wire.js';
import { sendWaiting } from '../core/socket-blocking.js';
import { type Frame, type FrameWriter, N_SENT, ProtocolError } from './protocol.js';
import type { Item } from './client-state.js';
import type { NodeSock } from './node-sock.js';
import type { HostNode } from './server.js';

/** What the send side needs of its client. @internal */
export interface SendHost {
  readonly node: HostNode;
  readonly writer: FrameWriter;
  isGone(): boolean;
  answer(id: number, value: unknown): void;
  fail(id: number, e: unknown): void;
  /** An N_EVENT for socket `sid`. */
  event(sid: number, meta: Record<string, unknown>): void;
  /** The client's open sockets. */
  openSockets(): Iterable<NodeSock>;
  /** One more call waiting for an answer (throws a ProtocolError past the limit). */
  countCall(): void;
  /** Ends the client (an internal error in a send loop: NodeStateError). */
  drop(why: string): void;
}

/** @internal */
export class SendSide {
  /** AbortControllers of confirm sends handed to the real socket, by request id. */
  private readonly confirming = new Map<number, AbortController>();
  /** Sockets with messages handed on and not yet reported to the client. */
  private readonly unreported = new Set<NodeSock>();
  private reportQueued = false;
  /**
   * Bytes the client sent on its open sockets and has not been given back (SENT): what its own
   * budget check counts, so a client keeping to the budget never passes it. What the node really
   * holds (heldNow) is at most this, and is counted only when this passes the budget.
   */
  private outstanding = 0;

  constructor(private readonly host: SendHost) {}

  /** Exactly what the node holds for the client now: every socket's backlog and queue. */
  private heldNow(): number {
    let n = 0;
    for (const s of this.host.openSockets()) n += s.backlogBytes + s.local.queuedBytes;
    return n;
  }

  /** Bytes that left the node (acknowledged, failed or cancelled) and the client has not heard of. */
  private unreportedBytes(s: NodeSock): number {
    return s.accepted - s.backlogBytes - s.local.queuedBytes - s.reported;
  }

  /** Socket `s` is closing: what it sent is discarded with it and no longer counts. */
  forget(s: NodeSock): void {
    this.outstanding -= s.forgetSent();
    this.unreported.delete(s);
  }

  /**
   * C_ABORT: the client gave up on confirm send `id` (its timeout or signal) and told its caller
   * so. As the real socket's send() does on a timeout, a message not yet handed on is never sent:
   * one still waiting in the backlog behind a head that waits leaves it, rather than be sent
   * later, after its caller was told it timed out.
   */
  abort(s: NodeSock, id: number): void {
    this.confirming.get(id)?.abort();
    let found: Item | undefined;
    for (const it of s.backlog()) if (it.id === id) found = it;
    if (found === undefined) return;
    if (found.ac !== null) {
      found.ac.abort(); // the head, waiting inside real.send(): it leaves the backlog itself
      return;
    }
    this.removed(
      s,
      s.remove((it) => it === found),
    );
    this.host.fail(id, new RdsError('ECANCELED', 'the send was aborted before the node handed it on'));
  }

  /** RDS_CANCEL_SENT_TO: messages to address:port still waiting here go first, as the real socket drops its own. */
  cancelBacklog(s: NodeSock, address: string, port: number): void {
    const to = (it: Item): boolean => it.dest.address === address && it.dest.port === port;
    // The head waiting inside real.send() leaves the backlog itself once aborted.
    for (const it of s.backlog()) if (to(it) && it.ac !== null) it.ac.abort();
    const gone = s.remove((it) => to(it) && it.ac === null);
    this.removed(s, gone);
    for (const it of gone)
      if (it.id !== 0)
        this.host.fail(it.id, new RdsError('ECANCELED', `cancelled by RDS_CANCEL_SENT_TO ${address}:${port}`));
    if (s.backlogLength === 0 && !s.running) s.drained();
  }

  /** A SEND frame for socket `s` (undefined: closed by a call already in flight). */
  accept(f: Frame, s: NodeSock | undefined): void {
    const sm = decodeSend(f.raw, f.metaStart, f.metaEnd);
    // A header the client wrote is checked before anything else: a bad one drops the client.
    const data = sm.wire === true ? checkWireHeader(f.data, sm.port, s?.local.bound?.port ?? null) : f.data;
    const confirm = sm.confirm;
    if (confirm) this.host.countCall();
    if (s === undefined) {
      // Closed by a call already in flight: answer as a closed socket would.
      if (confirm) this.host.fail(f.id, new RdsError('EBADF', 'sendmsg() on a closed socket; make a new RdsSocket'));
      return;
    }
    const len = data.length;
    const wire = sm.wire === true ? f.data : null;
    // The usual case: nothing waits before this message, so it goes to the real socket at once,
    // without a backlog Item or a turn of run() (a promise per message); only one that must wait
    // for room becomes an Item, and run() takes over.
    const direct = !confirm && s.backlogLength === 0 && !s.running && !s.closed;
    let it: Item | null = null;
    if (direct) s.acceptDirect(len);
    else {
      it = item(data, wire, sm, confirm ? f.id : 0);
      s.queue(it);
    }
    // A client keeps at most SO_SNDBUF bytes in flight to us; allow one message of slack.
    // (The socket's SO_SNDBUF as set: getsockopt would report twice this, as Linux does.)
    const sndbuf2 = 2 * s.sndbuf;
    const limit = sndbuf2 + RDS_MAX_MSG_SIZE;
    if (s.backlogBytes > limit)
      throw new ProtocolError(`socket ${s.id} sent ${s.backlogBytes} bytes past its send buffer`);
    // And all its sockets together at most the node's budget for it (the client stops at the
    // budget: one message may cross it).
    const processLimit = this.host.node.maxClientSendBytes + RDS_MAX_MSG_SIZE;
    this.outstanding += len;
    if (this.outstanding > processLimit) {
      const held = this.heldNow();
      if (held > processLimit)
        throw new ProtocolError(
          `sent ${held} bytes not yet acknowledged, past the node's budget of ${this.host.node.maxClientSendBytes} per process`,
        );
    }
    // Near a budget, what already left the node must not wait for more to leave (none may): the
    // client is about to stop until it hears of it.
    if (this.unreported.size > 0 && (this.nearBudget() || (s.accepted - s.reported) * 2 >= sndbuf2))
      this.scheduleReport();
    if (it === null) {
      const r = this.handDirect(s, data, sm, wire);
      if (r === 'done') return;
      // No room, or a congested port: it waits in the backlog like any other, run() below.
      it = item(data, wire, sm, 0);
      s.queueAccepted(it);
    } else if (s.running || s.closed) return;
    s.startRun();
    this.run(s).catch((e: unknown) => this.host.drop(`internal error: ${(e as Error).message}`));
  }

  /**
   * Hands a message that nothing waits before to the real socket (as tryHand() a backlog head):
   * 'done' once it is queued there or failed for good, or why it must wait.
   */
  private handDirect(
    s: NodeSock,
    data: Buffer,
    sm: { address: string; port: number; flags: number; cookie: number | undefined },
    wire: Buffer | null,
  ): 'done' | 'EAGAIN' | 'ENOBUFS' {
    try {
      s.real.enqueue(data, sm, sendOpts(sm.flags, sm.cookie), false, sm.cookie === undefined ? wire : null);
    } catch (e) {
      const code = e instanceof RdsError ? e.code : '';
      if (code === 'EAGAIN' || code === 'ENOBUFS') return code;
      this.host.node.counters.sendFailed++;
    }
    if (!s.sentDirect(data.length)) return 'done';
    this.done(s);
    if (s.backlogLength === 0 && !s.running) s.drained();
    return 'done';
  }

  /**
   * Hands the backlog's head `it` to the real socket with sendmsg(): 'done' once it left the
   * backlog (queued, or failed for good), or the reason it must wait (EAGAIN: no room, ENOBUFS:
   * the destination port is congested).
   */
  private tryHand(s: NodeSock, it: Item): 'done' | 'EAGAIN' | 'ENOBUFS' {
    try {
      // The client's encoded message is queued as it is (cut-through): sendmsg()'s checks, then
      // only the sequence stamped. Zero-copy keeps the old way: its payload is referenced anyway.
      s.real.enqueue(it.data, it.dest, sendOpts(it.flags, it.cookie), false, wireOf(it));
    } catch (e) {
      const code = e instanceof RdsError ? e.code : '';
      if (code === 'EAGAIN' || code === 'ENOBUFS') return code;
      // Checked by the client before it sent; what is left (a closed or unbound socket) has nobody to tell.
      this.host.node.counters.sendFailed++;
    }
    this.handed(s, it);
    return 'done';
  }

  /** The backlog's head left it (queued by the real socket, or failed). */
  private handed(s: NodeSock, it: Item): void {
    if (!s.take(it)) return; // its client has closed it: nobody counts this budget any more
    this.done(s);
    if (s.backlogLength === 0 && !s.running) s.drained();
  }

  /** Messages left the backlog without being handed on (aborted, cancelled). */
  private removed(s: NodeSock, items: Item[]): void {
    if (items.length === 0 || s.closed) return;
    this.done(s);
    if (s.backlogLength === 0 && !s.running) s.drained();
  }

  /**
   * Something of `s` may have left the node (a message failed or was cancelled before the real
   * socket had it, or left the real socket's queue): the client's budget has it back. The client
   * hears of it lazily: in any write that goes to it anyway, or on its own once a quarter of the
   * socket's SO_SNDBUF is unreported (before the client can run out of budget), never with a
   * wakeup of its own per message.
   */
  done(s: NodeSock): void {
    if (s.closed) return;
    this.unreported.add(s);
    // Near the process's budget every turn with something done reports: its sockets may each be
    // far from a quarter of their own SO_SNDBUF while together they hold the whole budget.
    if (this.unreportedBytes(s) * 4 >= s.sndbuf || this.nearBudget()) this.scheduleReport();
  }

  /** The client's sockets together hold three quarters of the node's budget for it or more. */
  private nearBudget(): boolean {
    return this.outstanding * 4 >= this.host.node.maxClientSendBytes * 3;
  }

  /** A SENT report goes with the next write to the client (at the latest at the end of this turn). */
  private scheduleReport(): void {
    if (this.reportQueued) return;
    this.reportQueued = true;
    this.host.writer.beforeFlush(this.reportSent);
  }

  /** Writes a SENT frame for every socket with bytes that left the node since its last one. */
  readonly reportSent = (): void => {
    this.reportQueued = false;
    if (this.unreported.size === 0) return;
    for (const s of this.unreported) {
      const n = this.unreportedBytes(s);
      if (n > 0 && !s.closed && !this.host.isGone()) {
        writeCount(this.host.writer, N_SENT, s.id, n, s.sentMsgs);
        s.reportedNow(n);
        this.outstanding -= n;
      }
      s.clearSentMsgs();
    }
    this.unreported.clear();
  };

  /** Resolves once every message the client sent on `s` so far has left the backlog. */
  whenDrained(s: NodeSock): Promise<void> {
    return s.whenDrained();
  }

  /**
   * Hands the backlog to the real socket in order; waits (without blocking other sockets) for
   * room or an uncongested port. The caller has moved `s` to RUNNING (s.startRun()).
   */
  private async run(s: NodeSock): Promise<void> {
    try {
      while (s.backlogLength > 0 && !s.closed) {
        const it = s.head()!;
        const opts = sendOpts(it.flags, it.cookie);
        if (it.confirm) {
          this.handed(s, it);
          const ac = new AbortController();
          this.confirming.set(it.id, ac);
          sendWaiting(s.real, it.data, it.dest, { ...opts, confirm: true, signal: ac.signal }, wireOf(it)).then(
            () => {
              this.confirming.delete(it.id);
              this.host.answer(it.id, null);
            },
            (e) => {
              this.confirming.delete(it.id);
              this.host.fail(it.id, e);
            },
          );
          continue;
        }
        const r = this.tryHand(s, it);
        if (r === 'done') continue;
        let congested = r === 'ENOBUFS';
        if (congested) this.host.event(s.id, { ev: 'cong', a: it.dest.address, p: it.dest.port });
        it.ac = new AbortController();
        // send() may wait for room first (EAGAIN) and then for the port to clear: tell the client
        // as soon as the destination is congested, whichever came first, or its sendmsg() only
        // ever sees EAGAIN and never the ENOBUFS the kernel's API gives.
        const stack = this.host.node.stack;
        const dest = it.dest;
        let waiting = true;
        const watch = (): void => {
          if (!waiting || congested) return;
          if (stack.congMap(dest.address).test(dest.port)) {
            congested = true;
            this.host.event(s.id, { ev: 'cong', a: dest.address, p: dest.port });
          } else stack.addCongWaiter(watch);
        };
        watch();
        try {
          await sendWaiting(s.real, it.data, it.dest, { ...opts, signal: it.ac.signal }, wireOf(it));
        } catch {
          this.host.node.counters.sendFailed++;
        } finally {
          waiting = false;
          stack.removeCongWaiter(watch);
        }
        if (congested) this.host.event(s.id, { ev: 'uncong', a: it.dest.address, p: it.dest.port });
        this.handed(s, it);
      }
    } finally {
      s.endRun();
    }
  }
}

/**
 * The client's encoded message (header and payload), to be queued as it is; null for a version 3
 * client's payload, and for zero-copy, which keeps referencing the payload its own way.
 */
function wireOf(it: Item): Buffer | null {
  return it.cookie === undefined ? it.wire : null;
}

/** The sendmsg() options of a SEND frame's message (none for a plain message). */
function sendOpts(flags: number, cookie: number | undefined): { flags: number; zcopyCookie?: number } | undefined {
  if (cookie !== undefined) return { flags, zcopyCookie: cookie };
  return flags !== 0 ? { flags } : undefined;
}

/** A backlog entry for a SEND frame's message (`id`: the request to answer for a confirm send, else 0). */
function item(
  data: Buffer,
  wire: Buffer | null,
  sm: { address: string; port: number; flags: number; cookie: number | undefined; confirm: boolean },
  id: number,
): Item {
  return { data, wire, dest: sm, flags: sm.flags, cookie: sm.cookie, confirm: sm.confirm, id, ac: null };
}
