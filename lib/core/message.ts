import { RDS_FLAG_RETRANSMITTED, RDSSOCK_EXTHDR_MOVED } from '../constants.js';
import { OFF_EXTHDR, OFF_FLAGS, OFF_SEQUENCE, readU64, writeU64 } from '../wire/header.js';
import type { RdsConnPath } from './path.js';
import type { RdmaOp } from './rdma-ops.js';
import type { WireSlab } from './wire-slab.js';

/** Who gets the bytes back when a message is acknowledged or cancelled: the sending socket. */
export interface SendOwner {
  messageDone(msg: RdsOutgoing): void;
  /** True when the owner's send budget is half used: ask the peer for an ack now. */
  wantsAck?(): boolean;
  /** A MSG_ZEROCOPY message's payload is no longer referenced: the caller may reuse it. */
  zcopyReleased?(cookie: number): void;
  /** Set by the path's own account (pongs, probes): such messages belong to their path. */
  readonly ownAccount?: boolean;
  /**
   * Set by a path's withdrawn records (ext/withdrawn.ts): they hold a cancelled message's place
   * and carry nothing, so they are not data a peer must be reached for (hasPendingData).
   */
  readonly placeHolder?: boolean;
}

/**
 * One queued message. `wire` is the complete frame, header and payload in one buffer, encoded once
 * when the message is queued, so transmitting is a single write and a retransmission only flips
 * a flag bit. A MSG_ZEROCOPY message is the exception: `wire` is its header alone and the payload
 * stays in the caller's buffers (`zcPayload`) until the peer has it and no write still reads it.
 * A large frame's memory goes back to its WireSlab under the same rule.
 */
export class RdsOutgoing {
  /** True once acknowledged or cancelled: its bytes went back to the owner. */
  done = false;
  cancelled = false;
  private firstSentAt = 0;
  private deadlineStart = 0;
  private settle: ((err?: Error) => void) | null = null;
  /** Links in the owning socket's RdsSendList. */
  sockPrev: RdsOutgoing | null = null;
  sockNext: RdsOutgoing | null = null;
  sockLinked = false;
  private zc: Uint8Array | readonly Uint8Array[] | null = null;
  private zcCookie = 0;
  /** Where a large frame's memory returns once nothing reads it (null: never reused). */
  private recycler: WireSlab | null = null;
  /** Transport writes that still read the frame or zcPayload: released only when none remain. */
  private xmitRefs = 0;
  /** The RDMA READ/WRITE this message carries (RDS_CMSG_RDMA_ARGS), posted before it. */
  rdma: RdmaOp | null = null;
  /** Where the message was first numbered, once a failover moved it (-1: never moved). */
  private firstPath = -1;
  private firstSeq = 0;

  constructor(
    readonly wire: Buffer,
    /** Payload bytes. */
    readonly len: number,
    /** Sequence on its current path; a failover gives it a new one (see moveTo). */
    public seq: number,
    readonly sport: number,
    readonly dport: number,
    readonly daddr: string,
    public path: RdsConnPath,
    readonly owner: SendOwner | null,
  ) {}

  /** performance.now() of the first transmission (0 = not yet sent), for the latency histogram. */
  get sentAt(): number {
    return this.firstSentAt;
  }

  /** Transmitted at `now` (performance.now()); only the first transmission counts. @internal */
  sent(now: number): void {
    if (this.firstSentAt === 0) this.firstSentAt = now;
  }

  /** performance.now() when queued, set only while the socket has SO_SNDTIMEO (its deadline's start). */
  get queuedAt(): number {
    return this.deadlineStart;
  }

  /** SO_SNDTIMEO applies: the deadline runs from `now`, unless it already runs. @internal */
  startDeadline(now: number): void {
    if (this.deadlineStart === 0) this.deadlineStart = now;
  }

  /** MSG_ZEROCOPY: the caller's payload, referenced rather than copied; null once released. */
  get zcPayload(): Uint8Array | readonly Uint8Array[] | null {
    return this.zc;
  }

  /** MSG_ZEROCOPY: the payload stays in the caller's buffers; `cookie` is reported when they are free. @internal */
  zeroCopy(payload: Uint8Array | readonly Uint8Array[], cookie: number): void {
    this.zc = payload;
    this.zcCookie = cookie;
  }

  /** A send({ confirm: true }) waits for it: confirm() has not settled it yet. */
  get confirmPending(): boolean {
    return this.settle !== null;
  }

  /** send({ confirm: true }): `settle` is told when the peer has the message, or why it never will. @internal */
  onConfirm(settle: (err?: Error) => void): void {
    this.settle = settle;
  }

  get flags(): number {
    return this.wire[OFF_FLAGS]!;
  }

  markRetransmitted(): void {
    this.wire[OFF_FLAGS] = this.wire[OFF_FLAGS]! | RDS_FLAG_RETRANSMITTED;
  }

  /**
   * Failover: the message leaves a dead path for `path`, where it gets sequence `seq`. The header
   * records where it was first numbered (path index and sequence), once, so the receiver can tell
   * whether it already has it however many times it moves. Callers move only messages whose
   * extension area is free (data messages never carry extensions).
   */
  moveTo(path: RdsConnPath, seq: number): void {
    const w = this.wire;
    if (this.firstPath < 0 && w[OFF_EXTHDR] === RDSSOCK_EXTHDR_MOVED) {
      // A withdrawn record carries its message's origin from the start (ext/withdrawn.ts).
      this.firstPath = w[OFF_EXTHDR + 1]!;
      this.firstSeq = readU64(w, OFF_EXTHDR + 2);
    } else if (this.firstPath < 0) {
      w[OFF_EXTHDR] = RDSSOCK_EXTHDR_MOVED;
      w[OFF_EXTHDR + 1] = this.path.index;
      writeU64(w, OFF_EXTHDR + 2, this.seq);
      this.firstPath = this.path.index;
      this.firstSeq = this.seq;
    }
    writeU64(w, OFF_SEQUENCE, seq);
    // First transmission in the new path's sequence space.
    w[OFF_FLAGS] = w[OFF_FLAGS]! & ~RDS_FLAG_RETRANSMITTED;
    this.seq = seq;
    this.path = path;
  }

  /**
   * A message never sent gets a later sequence on its own path: failover put messages it must not
   * overtake ahead of it (PathSend.adoptAhead). Only for messages no carrier has seen.
   */
  renumber(seq: number): void {
    writeU64(this.wire, OFF_SEQUENCE, seq);
    this.seq = seq;
  }

  /** The path index the message was first numbered on (its MOVED record's, once moved). */
  get originPath(): number {
    return this.firstPath < 0 ? this.path.index : this.firstPath;
  }

  /** Its sequence number there. */
  get originSeq(): number {
    return this.firstPath < 0 ? this.seq : this.firstSeq;
  }

  /** A socket's message, not one the node sent on its own account (probe, pong, ping). */
  get fromSocket(): boolean {
    return this.owner !== null && this.owner.ownAccount !== true;
  }

  /** Only sockets' messages with an empty extension area can carry the failover record. */
  get movable(): boolean {
    return this.fromSocket && (this.wire[OFF_EXTHDR] === 0 || this.wire[OFF_EXTHDR] === RDSSOCK_EXTHDR_MOVED);
  }

  /**
   * Acknowledged (no error) or cancelled (err): return its bytes to the sender's budget, once.
   * `keepConfirm`: acknowledged as queued, not yet as read; a pending confirmation waits for
   * confirm() (see ReadConfirmations.awaitingRead, and localReceipt for loopback).
   */
  complete(err?: Error, keepConfirm = false): void {
    if (this.done) return;
    this.done = true;
    if (err) this.cancelled = true;
    this.owner?.messageDone(this);
    if (this.xmitRefs === 0) this.release();
    if (!keepConfirm || err) this.confirm(err);
  }

  /** Settles a pending confirmation (if any is still waiting): resolved, or rejected with `err`. */
  confirm(err?: Error): void {
    const settle = this.settle;
    this.settle = null;
    settle?.(err);
  }

  /**
   * A transport starts a write (or a copy spread over several turns) that reads the frame or the
   * zero-copy payload after xmit() returns; xmitDone() when it finishes.
   */
  xmitHold(): void {
    this.xmitRefs++;
  }

  xmitDone(): void {
    if (--this.xmitRefs === 0 && this.done) this.release();
  }

  /** The frame's memory goes back to `pool` once the message is done and nothing reads it. */
  recycleInto(pool: WireSlab): void {
    this.recycler = pool;
  }

  /** The frame has memory of its own that is reused: a transport must hold it while it reads it. */
  get recycles(): boolean {
    return this.recycler !== null;
  }

  /** A receiver was handed views of the frame (loopback): it is theirs now, never reused. */
  wireTaken(): void {
    this.recycler = null;
  }

  private release(): void {
    if (this.recycler !== null) {
      this.recycler.recycle(this.wire);
      this.recycler = null;
    }
    if (this.zc === null) return;
    this.zc = null;
    this.owner?.zcopyReleased?.(this.zcCookie);
  }
}

/**
 * A socket's messages not yet acknowledged or cancelled (the kernel's rs_send_queue), linked
 * through the messages themselves: adding and removing one costs no allocation and no hashing.
 */
export class RdsSendList {
  private head: RdsOutgoing | null = null;
  private tail: RdsOutgoing | null = null;
  size = 0;

  add(m: RdsOutgoing): void {
    m.sockPrev = this.tail;
    m.sockNext = null;
    if (this.tail === null) this.head = m;
    else this.tail.sockNext = m;
    this.tail = m;
    m.sockLinked = true;
    this.size++;
  }

  delete(m: RdsOutgoing): void {
    if (!m.sockLinked) return;
    if (m.sockPrev === null) this.head = m.sockNext;
    else m.sockPrev.sockNext = m.sockNext;
    if (m.sockNext === null) this.tail = m.sockPrev;
    else m.sockNext.sockPrev = m.sockPrev;
    m.sockPrev = m.sockNext = null;
    m.sockLinked = false;
    this.size--;
  }

  /** The oldest message, or null; walk on through sockNext (without completing any meanwhile). */
  get first(): RdsOutgoing | null {
    return this.head;
  }

  /** A snapshot, oldest first, safe to walk while completing (and so removing) messages. */
  toArray(): RdsOutgoing[] {
    const out: RdsOutgoing[] = [];
    for (let m = this.head; m !== null; m = m.sockNext) out.push(m);
    return out;
  }
}
