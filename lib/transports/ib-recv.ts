import { RDS_HEADER_SIZE } from '../constants.js';
import type { TransportPath } from '../core/transport-path.js';
import { RDS_CTR } from '../core/stats.js';
import { RdsProtocolError } from '../wire/frame-reader.js';
import { OFF_ACK, OFF_CREDIT, OFF_DPORT, OFF_LEN, OFF_SPORT, readU64, verifyHeaderChecksum } from '../wire/header.js';
import { rdmaStatusOf } from '../core/rdma-ops.js';
import {
  IB_CARRIER,
  ibPath,
  MAX_H_LEN,
  RDMA_TAG_BASE,
  RDS_IB_FRAG_SIZE,
  SLOT_SIZE,
  type IbPath,
  type IbShared,
} from './ib-path.js';
import type { IbSender } from './ib-send.js';

const EMPTY = Buffer.alloc(0);

/**
 * The receiving side of RDS/IB (the kernel's ib_recv.c): completions free send slots and bring
 * fragments, which are checked (checksum, header copy, lengths), reassembled and handed up; their
 * receive buffers are posted again and advertised as credits.
 */
export class IbReceiver {
  constructor(
    private readonly ib: IbShared,
    private readonly sender: IbSender,
  ) {}

  /** A batch of work completions of cm id `id`, which carries `cp`: [slot, status, byte_len]... */
  onCompletions(cp: TransportPath, id: number, batch: Int32Array): void {
    const tp = ibPath(cp);
    if (tp === null || tp.id !== id || tp.ring === null) return;
    cp.heartbeat.noteRx();
    tp.completionsArrived(batch.length / 3);
    const reposts: number[] = [];
    let sendFreed = false;
    for (let i = 0; i < batch.length; i += 3) {
      const slot = batch[i]!;
      const status = batch[i + 1]!;
      const len = batch[i + 2]!;
      if (slot >= RDMA_TAG_BASE) {
        // An RDMA op of ours: reported with its status; its work requests left the send queue.
        const op = tp.rdmaOps.get(slot);
        if (op !== undefined) {
          tp.rdmaOps.delete(slot);
          op.finish(rdmaStatusOf(status));
        }
        sendFreed = true;
        if (status === 0) continue;
      }
      if (status !== 0) {
        // Flushes after an error, or the error itself: the connection is gone.
        if (tp.established) cp.drop(`work request failed (ibv_wc_status ${status})`);
        return;
      }
      if (slot < this.ib.sendSlots) {
        tp.sendSlotFreed(slot);
        sendFreed = true;
      } else if (slot === this.ib.sendSlots) {
        tp.ackSlotFreed()?.();
        sendFreed = true;
      } else {
        try {
          this.receive(cp, tp, slot, len);
        } catch (e) {
          if (e instanceof RdsProtocolError) {
            this.ib.host.reportProtocolError(cp, e);
            cp.drop(`protocol error: ${e.message}`);
            return;
          }
          throw e;
        }
        if (!cp.carrier(IB_CARRIER).is(tp)) return; // the core dropped the path while handling the message
        reposts.push(slot);
      }
    }
    if (reposts.length > 0 && tp.ring !== null) {
      const rc = this.ib.ep!.postRecv(tp.id, Int32Array.from(reposts));
      if (rc !== 0) {
        cp.drop(`ibv_post_recv failed (${rc})`);
        return;
      }
      tp.ledger.posted(reposts.length);
    }
    if (sendFreed || tp.controls.length > 0) this.sender.push(cp, tp);
  }

  /** One received fragment (rds_ib_process_recv). */
  private receive(cp: TransportPath, tp: IbPath, slot: number, byteLen: number): void {
    const ring = tp.ring!;
    const base = slot * SLOT_SIZE;
    if (byteLen < RDS_HEADER_SIZE || byteLen > SLOT_SIZE) throw new RdsProtocolError(`IB fragment of ${byteLen} bytes`);
    if (!verifyHeaderChecksum(ring, base)) {
      this.ib.host.counters.add(RDS_CTR.recv_drop_bad_checksum);
      throw new RdsProtocolError('header checksum mismatch');
    }
    const credit = ring[base + OFF_CREDIT]!;
    if (credit > 0 && tp.flowControl) tp.ledger.grant(credit);
    const dataLen = byteLen - RDS_HEADER_SIZE;
    const hLen = ring.readUInt32BE(base + OFF_LEN);
    const sport = ring.readUInt16BE(base + OFF_SPORT);
    const dport = ring.readUInt16BE(base + OFF_DPORT);
    if (sport === 0 && dport === 0 && dataLen === 0 && hLen === 0 && readU64(ring, base) === 0) {
      // Ack-only frame: may arrive between fragments; never part of reassembly.
      this.ib.host.recvIncoming(cp, Buffer.from(ring.subarray(base, base + RDS_HEADER_SIZE)), EMPTY);
      return;
    }
    const h = tp.reassembling;
    if (h === null) {
      if (hLen > MAX_H_LEN) throw new RdsProtocolError(`h_len ${hLen} exceeds ${MAX_H_LEN}`);
      if (dataLen !== Math.min(hLen, RDS_IB_FRAG_SIZE))
        throw new RdsProtocolError(`first fragment carries ${dataLen} of ${hLen} bytes`);
      const header = Buffer.from(ring.subarray(base, base + RDS_HEADER_SIZE));
      const payload = Buffer.from(ring.subarray(base + RDS_HEADER_SIZE, base + byteLen));
      if (hLen <= RDS_IB_FRAG_SIZE) {
        this.ib.host.recvIncoming(cp, header, payload);
        return;
      }
      tp.startReassembly(header, hLen, payload);
      return;
    }
    // A later fragment: same sequence, length and ports (h_ack, h_credit, h_csum may differ).
    if (
      ring.compare(h, 0, 8, base, base + 8) !== 0 ||
      ring.compare(h, OFF_LEN, OFF_LEN + 8, base + OFF_LEN, base + OFF_LEN + 8) !== 0
    ) {
      throw new RdsProtocolError('fragment header mismatch');
    }
    const want = Math.min(RDS_IB_FRAG_SIZE, hLen - tp.reassembled);
    if (dataLen !== want) throw new RdsProtocolError(`fragment carries ${dataLen} bytes, expected ${want}`);
    const ack = readU64(ring, base + OFF_ACK);
    if (ack !== 0) cp.tx.ackThrough(ack);
    const payload = tp.addFragment(ring, base + RDS_HEADER_SIZE, base + byteLen);
    if (payload !== null) this.ib.host.recvIncoming(cp, h, payload);
  }
}
