import { RDS_HEADER_SIZE, RDS_MAX_MSG_SIZE } from '../constants.js';
import { CarrierKind, CarrierSlot } from '../core/carrier.js';
import type { CreditLedger } from '../core/credits.js';
import type { RdsOutgoing } from '../core/message.js';
import type { RdsConnPath } from '../core/path.js';
import type { RdsTransportHost } from '../core/stack.js';
import type { IbEndpointBinding } from '../native.js';

/** RDS_FRAG_SIZE: every SEND carries a header copy and at most this much payload (spec §7.2). */
export const RDS_IB_FRAG_SIZE = 4096;
export const SLOT_SIZE = RDS_HEADER_SIZE + RDS_IB_FRAG_SIZE;
/** The biggest h_len a peer may announce: a message or a congestion map. */
export const MAX_H_LEN = RDS_MAX_MSG_SIZE;

/** What the parts of the IB transport share: the host, the endpoint once opened, the ring sizes. */
export class IbShared {
  private h: RdsTransportHost | null = null;
  private endpoint: IbEndpointBinding | null = null;

  /** `sendSlots`: send ring slots per connection (slot sendSlots is the ack slot, then the receive slots). */
  constructor(readonly sendSlots: number) {}

  get host(): RdsTransportHost {
    return this.h!;
  }

  get ep(): IbEndpointBinding | null {
    return this.endpoint;
  }

  attach(host: RdsTransportHost): void {
    this.h = host;
  }

  setEndpoint(ep: IbEndpointBinding | null): void {
    this.endpoint = ep;
  }
}

/** A frame waiting for the send ring: one fragment source (message or map) or a header-only control frame. */
export interface Fragmenting {
  wire: Buffer;
  len: number;
  off: number;
  /** The message whose frame this is, held (xmitHold) until its last fragment is in the ring. */
  msg: RdsOutgoing | null;
}

export interface Control {
  header: Buffer;
  done: () => void;
  ackOnly: boolean;
}

/** The transport's state for one cm id of a path (its ring and reassembly): the path's carrier, held in its IB_CARRIER slot. */
export interface IbPath {
  id: number;
  established: boolean;
  /** We accepted this id (passive side). */
  passive: boolean;
  ring: Buffer | null;
  freeSend: number[];
  ackSlotBusy: boolean;
  ackDone: (() => void) | null;
  flowControl: boolean;
  ledger: CreditLedger;
  current: Fragmenting | null;
  controls: Control[];
  /** The highest h_ack this side has put on the wire (for credit-update frames). */
  lastAck: number;
  /** Reassembly of a multi-fragment message. */
  rxHeader: Buffer | null;
  rxPayload: Buffer | null;
  rxFilled: number;
  blocked: boolean;
  /** xmit told the core "no more for now": kick it once the ring moves again. */
  coreWaiting: boolean;
  version: number;
  /** The peer's private data carried rds-socket's mark (RDS_SOCKET_IB_MARK); else it is a kernel. */
  peerRdsSocket: boolean;
}

/** The IB transport's carrier object of a path: the slot of its current cm id's state. */
export const IB_CARRIER = new CarrierKind<CarrierSlot<IbPath>>('infiniband', (cp) => new CarrierSlot<IbPath>(cp));

export function ibPath(cp: RdsConnPath): IbPath | null {
  return cp.carrier(IB_CARRIER).current;
}
