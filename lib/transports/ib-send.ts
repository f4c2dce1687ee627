import { RDS_HEADER_SIZE } from '../constants.js';
import { defer } from '../core/defer.js';
import type { RdsOutgoing } from '../core/message.js';
import type { TransportPath } from '../core/transport-path.js';
import {
  headerChecksum,
  OFF_ACK,
  OFF_CREDIT,
  OFF_CSUM,
  OFF_DPORT,
  OFF_LEN,
  OFF_SPORT,
  readU64,
  writeU64,
} from '../wire/header.js';
import { encodeCongUpdate } from '../wire/header.js';
import { RDS_FLAG_PROBE_PORT, RDS_RDMA_DROPPED, RDS_RDMA_OTHER_ERROR } from '../constants.js';
import { RdsError } from '../errors.js';

const EAGAIN = 11;
import { RDS_CTR } from '../core/stats.js';
import { ibPath, RDS_IB_FRAG_SIZE, SLOT_SIZE, type IbPath, type IbShared } from './ib-path.js';

/**
 * The sending side of RDS/IB (the kernel's ib_send.c): frames are cut into 4 KiB fragments, each
 * with a checksummed header copy and our credits, and posted to the send ring while slots and
 * credits last; ack-only and other control frames use one dedicated slot.
 */
export class IbSender {
  constructor(private readonly ib: IbShared) {}

  xmit(cp: TransportPath, msg: RdsOutgoing): boolean {
    const tp = ibPath(cp);
    if (tp === null || !tp.established) return false;
    if (!tp.peerRdsSocket && isHandshakeFrame(msg.sport, msg.dport)) {
      // The multipath probe queued ahead of the first message, before we knew the peer: a kernel's
      // RDS/IB never gets one. 6.1 handles a probe received over IB with a WARN_ON and then spins
      // on a lock in softirq (rds_recv_hs_exthdrs), hanging the CPU. Skipping its sequence number
      // is harmless (receivers only drop sequences below the next expected); the kernel's next
      // h_ack frees it with the messages after it.
      this.ib.host.counters.add(RDS_CTR.ib_probe_withheld);
      return true;
    }
    if (msg.rdma) {
      const r = this.postRdma(tp, msg);
      if (r === 'dropped') return true;
      if (r === 'posted' && msg.rdma.silent && msg.len === 0) {
        // Only the op goes: the peer's socket gets no message (its sequence number is skipped,
        // which receivers allow); the message is done when the op is.
        const silent = msg;
        msg.rdma.onFinish = () => silent.complete();
        return true;
      }
      if (r === 'wait') {
        tp.rdmaWaits(msg);
        tp.ringMoved();
        tp.coreWaits();
        return false;
      }
    }
    this.startMessage(tp, msg);
    return this.take(cp, tp);
  }

  private startMessage(tp: IbPath, msg: RdsOutgoing): void {
    msg.xmitHold();
    tp.startFrame({ wire: msg.wire, len: msg.len, off: 0, msg, fence: msg.rdma?.fence === true });
  }

  /**
   * Posts the message's RDMA op ahead of its SEND (rds_send_xmit: xmit_rdma before the data).
   * 'wait': the send queue has no room for its work requests now. 'dropped': the op was posted on
   * an earlier carrier (RDMA ops are never retransmitted: the message goes, its op is reported
   * RDS_RDMA_DROPPED unless already reported) or could not be posted; the message is not sent.
   */
  private postRdma(tp: IbPath, msg: RdsOutgoing): 'posted' | 'wait' | 'dropped' {
    const op = msg.rdma!;
    const counters = this.ib.host.counters;
    if (op.state !== 'queued') {
      op.finish(RDS_RDMA_DROPPED);
      msg.complete(
        new RdsError(
          'ECONNRESET',
          "the connection went down after this message's RDMA op was posted; RDMA ops are never retransmitted",
        ),
      );
      return 'dropped';
    }
    const tag = this.ib.nextRdmaTag();
    const rc =
      op.atomicKind !== 0
        ? this.ib.ep!.postRdma!(tp.id, tag, op.atomicKind, op.remoteAddr, op.rkey, op.local, op.compareAdd, op.swap)
        : this.ib.ep!.postRdma!(tp.id, tag, op.write, op.remoteAddr, op.rkey, op.local);
    if (rc === EAGAIN) return 'wait';
    if (rc !== 0) {
      op.finish(RDS_RDMA_OTHER_ERROR);
      msg.complete(new RdsError('ENOBUFS', `the RDMA op could not be posted (errno ${rc}); the message was not sent`));
      return 'dropped';
    }
    op.state = 'posted';
    tp.rdmaOps.set(tag, op);
    counters.add(RDS_CTR.send_rdma);
    counters.add(RDS_CTR.send_rdma_bytes, op.bytes);
    return 'posted';
  }

  xmitCong(cp: TransportPath, map: Buffer): boolean {
    const tp = ibPath(cp);
    if (tp === null || !tp.established) return false;
    tp.startFrame({ wire: encodeCongUpdate(map), len: map.length, off: 0, msg: null });
    return this.take(cp, tp);
  }

  /** Starts the frame just made current; false (and a kick later) if the ring cannot take more now. */
  private take(cp: TransportPath, tp: IbPath): boolean {
    this.push(cp, tp);
    const more = tp.current === null && !tp.blocked;
    if (!more) tp.coreWaits();
    return more;
  }

  xmitControl(cp: TransportPath, header: Buffer, done: () => void): void {
    const tp = ibPath(cp);
    if (tp === null || !tp.established) {
      done();
      return;
    }
    // Ack-only frames may go between the fragments of a message (the kernel handles them before
    // reassembly); anything else (the hello) waits for a message boundary.
    const ackOnly =
      header.readUInt16BE(OFF_SPORT) === 0 &&
      header.readUInt16BE(OFF_DPORT) === 0 &&
      header.readUInt32BE(OFF_LEN) === 0;
    tp.queueControl({ header, done, ackOnly });
    this.push(cp, tp);
  }

  /** A header-only credit update when 16 buffers are owed and nothing else is going out. */
  creditUpdate(cp: TransportPath): void {
    const tp = ibPath(cp);
    if (tp === null || !tp.established || tp.controls.length > 0 || tp.ackSlotBusy) return;
    const h = Buffer.alloc(RDS_HEADER_SIZE);
    writeU64(h, OFF_ACK, tp.lastAck);
    tp.queueControl({ header: h, done: () => {}, ackOnly: true });
    defer(() => this.push(cp, tp));
  }

  resume(cp: TransportPath): void {
    const tp = ibPath(cp);
    if (tp !== null) this.push(cp, tp);
  }

  /** Fills one send slot with a header copy (credits, checksum) and `len` payload bytes from src. */
  private fill(tp: IbPath, slot: number, header: Buffer, src: Buffer | null, srcOff: number, len: number): void {
    const ring = tp.ring!;
    const base = slot * SLOT_SIZE;
    header.copy(ring, base, 0, RDS_HEADER_SIZE);
    ring[base + OFF_CREDIT] = tp.ledger.advertise();
    const ack = readU64(ring, base + OFF_ACK);
    tp.ackPosted(ack);
    ring.writeUInt16BE(0, base + OFF_CSUM);
    ring.writeUInt16BE(headerChecksum(ring, base), base + OFF_CSUM);
    if (src !== null && len > 0) src.copy(ring, base + RDS_HEADER_SIZE, srcOff, srcOff + len);
  }

  /**
   * Moves work to the send ring while slots and credits last: control frames first (the ack slot),
   * then fragments of the current message. Posts the batch with one call.
   */
  push(cp: TransportPath, tp: IbPath): void {
    if (!tp.established || tp.ring === null) return;
    const waiting = tp.rdmaWaiting;
    if (waiting !== null && tp.current === null) {
      // A completion made room in the send queue (or the op was dropped meanwhile).
      const r = this.postRdma(tp, waiting);
      if (r !== 'wait') {
        tp.rdmaWaits(null);
        if (r === 'posted' && waiting.rdma!.silent && waiting.len === 0)
          waiting.rdma!.onFinish = () => waiting.complete();
        else if (r === 'posted') this.startMessage(tp, waiting);
      }
    }
    const posts: number[] = [];
    // Control frames use the dedicated slot, one at a time (one ack in flight, spec §7.4).
    if (!tp.ackSlotBusy && tp.controls.length > 0) {
      const c = tp.controls[0]!;
      const atBoundary = tp.current === null || tp.current.off === 0;
      if ((c.ackOnly || atBoundary) && (!tp.flowControl || tp.ledger.tryConsumeForUpdate())) {
        tp.takeControl();
        const slot = this.ib.sendSlots;
        this.fill(tp, slot, c.header, null, 0, 0);
        tp.ackSlotTaken(c.done);
        posts.push(slot, RDS_HEADER_SIZE, 1);
      }
    }
    const cur = tp.current;
    if (cur !== null && (tp.controls.length === 0 || tp.controls[0]!.ackOnly)) {
      while (tp.freeSendSlots > 0) {
        if (tp.flowControl && !tp.ledger.tryConsume(1)) break;
        const slot = tp.takeSendSlot();
        const n = Math.min(RDS_IB_FRAG_SIZE, cur.len - cur.off);
        const fence = cur.off === 0 && cur.fence === true ? 2 : 0;
        this.fill(tp, slot, cur.wire, cur.wire, RDS_HEADER_SIZE + cur.off, n);
        const last = tp.fragmentPosted(n);
        posts.push(slot, RDS_HEADER_SIZE + n, (last ? 1 : 0) | fence);
        if (last) {
          cur.msg?.xmitDone();
          break;
        }
      }
    }
    if (tp.ringMoved()) cp.tx.kick();
    if (posts.length === 0) return;
    const rc = this.ib.ep!.postSend(tp.id, Int32Array.from(posts));
    if (rc !== 0) cp.drop(`ibv_post_send failed (${rc})`);
  }
}

/** The ports of the kernel's handshake frames (RDS_HS_PROBE): probe 1 -> 0, pong 0 -> 1. */
export function isHandshakeFrame(sport: number, dport: number): boolean {
  return (sport === RDS_FLAG_PROBE_PORT && dport === 0) || (sport === 0 && dport === RDS_FLAG_PROBE_PORT);
}
