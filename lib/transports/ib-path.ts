import { RDS_HEADER_SIZE, RDS_MAX_MSG_SIZE } from '../constants.js';
import { CarrierKind, CarrierSlot } from '../core/carrier.js';
import type { CreditLedger } from '../core/credits.js';
import type { RdsOutgoing } from '../core/message.js';
import type { TransportPath } from '../core/transport-path.js';
import type { TransportHost } from '../core/transport.js';
import type { IbEndpointBinding } from '../native.js';
import type { RdmaOp } from '../core/rdma-ops.js';

/** RDS_FRAG_SIZE: every SEND carries a header copy and at most this much payload (spec §7.2). */
export const RDS_IB_FRAG_SIZE = 4096;
export const SLOT_SIZE = RDS_HEADER_SIZE + RDS_IB_FRAG_SIZE;
/** The biggest h_len a peer may announce: a message or a congestion map. */
export const MAX_H_LEN = RDS_MAX_MSG_SIZE;

/** What the parts of the IB transport share: the host, the endpoint once opened, the ring sizes. */
export class IbShared {
  private h: TransportHost | null = null;
  private endpoint: IbEndpointBinding | null = null;

  /** `sendSlots`: send ring slots per connection (slot sendSlots is the ack slot, then the receive slots). */
  constructor(readonly sendSlots: number) {}

  get host(): TransportHost {
    return this.h!;
  }

  get ep(): IbEndpointBinding | null {
    return this.endpoint;
  }

  attach(host: TransportHost): void {
    this.h = host;
  }

  setEndpoint(ep: IbEndpointBinding | null): void {
    this.endpoint = ep;
  }

  private tag = 0;

  /** A tag naming an RDMA op in completions: >= 2^30, so never a ring slot. */
  nextRdmaTag(): number {
    this.tag = (this.tag + 1) % 0x3fffffff;
    return RDMA_TAG_BASE + this.tag;
  }
}

/** Completions whose first field is at least this are RDMA ops' (tags), not ring slots. */
export const RDMA_TAG_BASE = 0x40000000;

/** A frame waiting for the send ring: one fragment source (message or map). */
export interface Fragmenting {
  readonly wire: Buffer;
  readonly len: number;
  /** Payload bytes already in the ring (advanced by IbPath.fragmentPosted). */
  off: number;
  /** The message whose frame this is, held (xmitHold) until its last fragment is in the ring. */
  readonly msg: RdsOutgoing | null;
  /** RDS_RDMA_FENCE: the first fragment's SEND waits for the RDMA op before it. */
  readonly fence?: boolean;
}

/** A header-only control frame waiting for the ack slot. */
export interface Control {
  readonly header: Buffer;
  readonly done: () => void;
  readonly ackOnly: boolean;
}

/**
 * The transport's state for one cm id of a path (its ring and reassembly): the path's carrier,
 * held in its IB_CARRIER slot. The IB parts change it only through the methods below, each named
 * for what happened.
 */
export class IbPath {
  private isEstablished = false;
  private ringBuf: Buffer | null = null;
  private readonly freeSend: number[] = [];
  private ackBusy = false;
  private ackDone: (() => void) | null = null;
  private flow = false;
  private cur: Fragmenting | null = null;
  private readonly queued: Control[] = [];
  private highestAck = 0;
  /** Reassembly of a multi-fragment message. */
  private rxHeader: Buffer | null = null;
  private rxPayload: Buffer | null = null;
  private rxFilled = 0;
  private isBlocked = false;
  private coreWaiting = false;
  private protocol = 0;
  private peerMark = false;
  private wakeups = 0;
  private completions = 0;
  /** RDMA ops posted on this QP whose completion has not come, by tag. */
  readonly rdmaOps = new Map<number, RdmaOp>();
  /** A message whose RDMA op found the send queue full: posted before anything else. */
  private rdmaWait: RdsOutgoing | null = null;

  constructor(
    readonly id: number,
    /** We accepted this id (passive side). */
    readonly passive: boolean,
    readonly ledger: CreditLedger,
  ) {}

  // ---- connection ----

  get established(): boolean {
    return this.isEstablished;
  }

  markEstablished(): void {
    this.isEstablished = true;
  }

  /** A completion-channel wake-up handed us `n` work completions (RTRS's wc_completion figure). */
  completionsArrived(n: number): void {
    this.wakeups++;
    this.completions += n;
  }

  /** Wake-ups and the work completions they brought since the carrier came (or the last reset). */
  get completionFigures(): { wakeups: number; completions: number } {
    return { wakeups: this.wakeups, completions: this.completions };
  }

  /** resetStats(): the completion figures start over. */
  resetCompletionFigures(): void {
    this.wakeups = 0;
    this.completions = 0;
  }

  /** The peer's private data carried rds-socket's mark (RDS_SOCKET_IB_MARK); else it is a kernel. */
  get peerRdsSocket(): boolean {
    return this.peerMark;
  }

  /** Connection setup read the peer's private data: whether it carried rds-socket's mark. */
  peerMarked(rdsSocket: boolean): void {
    this.peerMark = rdsSocket;
  }

  /** The negotiated RDS/IB protocol version (major << 8 | minor); 0 until known. */
  get version(): number {
    return this.protocol;
  }

  versionNegotiated(version: number): void {
    this.protocol = version;
  }

  /** Credit-based flow control is on for this connection. */
  get flowControl(): boolean {
    return this.flow;
  }

  flowControlNegotiated(on: boolean): void {
    this.flow = on;
  }

  /** The registered send and receive slots; null before setup and after release. */
  get ring(): Buffer | null {
    return this.ringBuf;
  }

  /** The queue pair is set up with `ring`: every one of its `sendSlots` data slots is free. */
  ringReady(ring: Buffer, sendSlots: number): void {
    this.ringBuf = ring;
    this.freeSend.length = 0;
    for (let s = sendSlots - 1; s >= 0; s--) this.freeSend.push(s);
  }

  /** The carrier is released: what waited for the ring is handed back, the ring forgotten. */
  ringGone(): void {
    this.ringBuf = null;
  }

  // ---- the send ring (IbSender) ----

  get freeSendSlots(): number {
    return this.freeSend.length;
  }

  /** A data slot for the next fragment (there must be one: see freeSendSlots). */
  takeSendSlot(): number {
    return this.freeSend.pop()!;
  }

  /** A send completed: its data slot is free again. */
  sendSlotFreed(slot: number): void {
    this.freeSend.push(slot);
  }

  /** The control frame in the ack slot is in flight. */
  get ackSlotBusy(): boolean {
    return this.ackBusy;
  }

  ackSlotTaken(done: () => void): void {
    this.ackBusy = true;
    this.ackDone = done;
  }

  /** The ack slot's send completed: returns what to tell its sender. */
  ackSlotFreed(): (() => void) | null {
    this.ackBusy = false;
    return this.takeAckDone();
  }

  /** What waits for the ack slot's frame, taken (released carrier: it is told once). */
  takeAckDone(): (() => void) | null {
    const done = this.ackDone;
    this.ackDone = null;
    return done;
  }

  /** The highest h_ack this side has put on the wire (for credit-update frames). */
  get lastAck(): number {
    return this.highestAck;
  }

  ackPosted(ack: number): void {
    if (ack > this.highestAck) this.highestAck = ack;
  }

  /** Control frames waiting for the ack slot. */
  get controls(): readonly Control[] {
    return this.queued;
  }

  queueControl(c: Control): void {
    this.queued.push(c);
  }

  takeControl(): Control | undefined {
    return this.queued.shift();
  }

  /** Every waiting control frame, taken (released carrier). */
  dropControls(): Control[] {
    return this.queued.splice(0);
  }

  /** The frame being cut into fragments, or null. */
  get current(): Fragmenting | null {
    return this.cur;
  }

  startFrame(f: Fragmenting): void {
    this.cur = f;
  }

  /** `n` more bytes of the current frame are in the ring: true if that was its last fragment (it is no longer current). */
  fragmentPosted(n: number): boolean {
    const cur = this.cur!;
    cur.off += n;
    if (cur.off < cur.len) return false;
    this.cur = null;
    return true;
  }

  /** The current frame is given up (released carrier): its message is no longer held. */
  dropFrame(): void {
    this.cur?.msg?.xmitDone();
    this.cur = null;
  }

  /** The message waiting for room for its RDMA op's work requests, or null. */
  get rdmaWaiting(): RdsOutgoing | null {
    return this.rdmaWait;
  }

  rdmaWaits(msg: RdsOutgoing | null): void {
    this.rdmaWait = msg;
  }

  /** The ring cannot take more now (a frame waits, or no data slot is free). */
  get blocked(): boolean {
    return this.isBlocked;
  }

  /** xmit told the core "no more for now": it is kicked once the ring moves again (ringMoved). */
  coreWaits(): void {
    this.coreWaiting = true;
  }

  /** After a push: whether the ring is blocked now; true if the core was waiting and may send again. */
  ringMoved(): boolean {
    this.isBlocked = this.cur !== null || this.rdmaWait !== null || this.freeSend.length === 0;
    if (!this.coreWaiting || this.isBlocked) return false;
    this.coreWaiting = false;
    return true;
  }

  // ---- reassembly (IbReceiver) ----

  /** A multi-fragment message is being reassembled: its first fragment's header, or null. */
  get reassembling(): Buffer | null {
    return this.rxHeader;
  }

  /** Payload bytes of the message being reassembled received so far. */
  get reassembled(): number {
    return this.rxFilled;
  }

  /** The first fragment of a message of `hLen` payload bytes, carrying `first`. */
  startReassembly(header: Buffer, hLen: number, first: Buffer): void {
    this.rxHeader = header;
    this.rxPayload = Buffer.allocUnsafe(hLen);
    first.copy(this.rxPayload, 0);
    this.rxFilled = first.length;
  }

  /** A later fragment, bytes [start, end) of `ring`: the whole payload once complete (reassembly ends), else null. */
  addFragment(ring: Buffer, start: number, end: number): Buffer | null {
    const payload = this.rxPayload!;
    ring.copy(payload, this.rxFilled, start, end);
    this.rxFilled += end - start;
    if (this.rxFilled < payload.length) return null;
    this.rxHeader = null;
    this.rxPayload = null;
    this.rxFilled = 0;
    return payload;
  }
}

/** The IB transport's carrier object of a path: the slot of its current cm id's state. */
export const IB_CARRIER = new CarrierKind<CarrierSlot<IbPath>>('infiniband', (cp) => new CarrierSlot<IbPath>(cp));

export function ibPath(cp: TransportPath): IbPath | null {
  return cp.carrier(IB_CARRIER).current;
}
