// RDS/IB connection management (the kernel's ib_cm.c) as plain functions of a path and the
// endpoint: the queue pair's rings, our private data and the peer's credits, the refusal of an
// incompatible peer; and memory registration for getMr() (ib_rdma.c). ib.ts drives them from
// rdma_cm's events.
import type { RdmaTransport } from '../core/rdma-ops.js';
import type { TransportPath } from '../core/transport-path.js';
import { RdsError } from '../errors.js';
import { native, type IbEndpointBinding } from '../native.js';
import { encodeIbPrivateData, type IbPrivateData } from '../wire/ib-private-data.js';
import { type IbPath, SLOT_SIZE } from './ib-path.js';

/** Registers the rings, posts every receive buffer: the QP is ready for rdma_connect / rdma_accept. */
export function setupQp(ep: IbEndpointBinding, tp: IbPath, sendSlots: number, recvSlots: number): void {
  tp.ringReady(ep.setupQp(tp.id, sendSlots + 1, recvSlots, SLOT_SIZE), sendSlots);
  const recv = new Int32Array(recvSlots);
  for (let i = 0; i < recvSlots; i++) recv[i] = sendSlots + 1 + i;
  const rc = ep.postRecv(tp.id, recv);
  if (rc !== 0) throw new Error(`ibv_post_recv failed (${rc})`);
  tp.ledger.posted(recvSlots);
}

/** Our private data; `offerCredits`: grant our receive buffers (proposing or accepting flow control). */
export function ourPrivateData(cp: TransportPath, tp: IbPath, version: number, offerCredits: boolean): Buffer {
  // dp_ack_seq is 0: an ack in private data cannot be tied to either side's generation, and a
  // stale one would free messages the peer never saw. Acks flow in headers once connected.
  const credits = offerCredits ? tp.ledger.advertise() : 0;
  return encodeIbPrivateData({
    saddr: cp.conn.laddr,
    daddr: cp.conn.faddr,
    major: version >> 8,
    minor: version & 0xff,
    minorMask: 0x0003,
    // dp_tos: the connection's TOS; the accepting side keys its connection by it.
    tos: cp.conn.tos,
    ackSeq: 0,
    credit: credits,
    rdsSocket: true,
  });
}

/** As rds_ib_set_flow_control: credit flow control only if we offer it and the peer granted credits. */
export function applyPeerCredits(tp: IbPath, peer: IbPrivateData, offered: boolean): void {
  tp.flowControlNegotiated(offered && peer.credit > 0);
  if (tp.flowControl) tp.ledger.grant(peer.credit);
}

/** The kernel's RDS_RDMA_REJ_INCOMPAT: a 4-byte host-order (little-endian here) int 1. */
export function rejectIncompatible(): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32LE(1, 0);
  return b;
}

/** Memory registration for getMr() (ib_rdma.c): one PD per device, shared with every connection on it. */
export function ibMemory(endpoint: () => IbEndpointBinding, current: () => IbEndpointBinding | null): RdmaTransport {
  return {
    regMr: (laddr, mem, readWrite) => {
      const ep = endpoint();
      if (ep.regMr === undefined)
        throw new RdsError('EOPNOTSUPP', 'getMr(): this build of the rds-socket addon cannot register memory');
      try {
        const [handle, rkey, offset] = ep.regMr(laddr, mem, readWrite);
        return { handle, rkey, offset };
      } catch (e) {
        const errno = (e as { errno?: number }).errno;
        throw new RdsError(
          errno === 95 ? 'EOPNOTSUPP' : 'ENOBUFS',
          `getMr(): cannot register ${mem.byteLength} bytes on the RDMA device of ${laddr}: ${(e as Error).message}`,
          { cause: e },
        );
      }
    },
    deregMr: (handle) => {
      current()?.deregMr?.(handle);
    },
    atomics: (laddr) => native()?.ibAtomics?.(laddr) === true,
  };
}
