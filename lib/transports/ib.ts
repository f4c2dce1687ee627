import { RDS_CONN_CONNECTING, RDS_CONN_DOWN, RDS_CONN_UP, RDS_HEADER_SIZE, RDS_MAX_MSG_SIZE, RDS_PORT, RDS_TRANS_IB } from '../constants.js';
import { CarrierKind, CarrierSlot } from '../core/carrier.js';
import { CreditLedger } from '../core/credits.js';
import { defer } from '../core/defer.js';
import type { RdsOutgoing } from '../core/message.js';
import type { RdsConnPath } from '../core/path.js';
import type { RdsTransportHost } from '../core/stack.js';
import type { RdsTransport } from '../core/transport.js';
import { RdsError } from '../errors.js';
import { native, nativeLoadError, type IbEndpointBinding } from '../native.js';
import { encodeCongUpdate, headerChecksum, OFF_ACK, OFF_CREDIT, OFF_CSUM, OFF_DPORT, OFF_LEN, OFF_SPORT, readU64, verifyHeaderChecksum, writeU64 } from '../wire/header.js';
import { RdsProtocolError } from '../wire/frame-reader.js';
import { decodeIbPrivateData, encodeIbPrivateData, negotiateIbVersion, RDS_PROTOCOL_3_1, type IbPrivateData } from '../wire/ib-private-data.js';
import { RDS_CTR } from '../core/stats.js';

/** RDS_FRAG_SIZE: every SEND carries a header copy and at most this much payload (spec §7.2). */
export const RDS_IB_FRAG_SIZE = 4096;
const SLOT_SIZE = RDS_HEADER_SIZE + RDS_IB_FRAG_SIZE;
/** The biggest h_len a peer may announce: a message or a congestion map. */
const MAX_H_LEN = RDS_MAX_MSG_SIZE;

export interface IbTransportOptions {
  /** rdma_cm port (RDS_PORT, 18634, for the kernel's rds_rdma). */
  port?: number;
  /** Offer credit flow control (used when the peer offers it too, as the kernel decides). Default true. */
  flowControl?: boolean;
  /** Send ring slots per connection (one more is kept for ack-only frames). Default 128. */
  sendSlots?: number;
  /** Receive ring slots per connection (the credits we can grant). Default 256. */
  recvSlots?: number;
  /** Address resolution timeout in ms (the kernel's 5000); route resolution always uses 5000, as the kernel. */
  resolveTimeoutMs?: number;
}

/** A frame waiting for the send ring: one fragment source (message or map) or a header-only control frame. */
interface Fragmenting {
  wire: Buffer;
  len: number;
  off: number;
  /** The message whose frame this is, held (xmitHold) until its last fragment is in the ring. */
  msg: RdsOutgoing | null;
}

interface Control {
  header: Buffer;
  done: () => void;
  ackOnly: boolean;
}

/** The transport's state for the path (its cm id, ring and reassembly), kept in cp.tdata. */
interface IbPath {
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
}

/** The IB transport's carrier object of a path: the slot of its current cm id's state. */
const IB_CARRIER = new CarrierKind<CarrierSlot<IbPath>>('infiniband', (cp) => new CarrierSlot<IbPath>(cp));

function ibPath(cp: RdsConnPath): IbPath | null {
  return cp.carrier(IB_CARRIER).current;
}

/**
 * RDS over InfiniBand / RoCE through rdma_cm and one RC queue pair per connection, wire-compatible
 * with the kernel's rds_rdma (spec §7): connection private data with version negotiation, 4 KiB
 * fragments each carrying a checksummed header copy, credit flow control, acknowledgements in
 * h_ack and ack-only frames. The addon moves work requests and completions; everything here is
 * protocol.
 */
export class IbTransport implements RdsTransport {
  readonly name = 'infiniband';
  readonly transType = RDS_TRANS_IB;
  readonly mpathCapable = false;
  readonly userSelectable = true;
  /** IB peers, kernels included, free messages only on RDS acks (spec §7.4). */
  readonly alwaysAcks = true;
  private host!: RdsTransportHost;
  private ep: IbEndpointBinding | null = null;
  private readonly listeners = new Map<string, number>();
  /** cm id -> the path it carries (or, for listeners, nothing). */
  private readonly byId = new Map<number, RdsConnPath>();
  private readonly port: number;
  private readonly flowControl: boolean;
  private readonly sendSlots: number;
  private readonly recvSlots: number;
  private readonly resolveTimeoutMs: number;
  private ref = false;
  private closed = false;

  constructor(opts: IbTransportOptions = {}) {
    this.port = opts.port ?? RDS_PORT;
    this.flowControl = opts.flowControl ?? true;
    this.sendSlots = opts.sendSlots ?? 128;
    this.recvSlots = opts.recvSlots ?? 256;
    this.resolveTimeoutMs = opts.resolveTimeoutMs ?? 5000;
    if (!Number.isInteger(this.port) || this.port < 1 || this.port > 65535) throw new RdsError('EINVAL', `IB port must be 1..65535, got ${this.port}`);
    if (!(this.sendSlots >= 4 && this.sendSlots <= 4096) || !(this.recvSlots >= 16 && this.recvSlots <= 4096)) {
      throw new RdsError('EINVAL', 'IB ring sizes: sendSlots 4..4096, recvSlots 16..4096');
    }
  }

  attach(host: RdsTransportHost): void {
    this.host = host;
  }

  /**
   * The endpoint (rdma_cm event channel) on first use. Fails with ENOPROTOOPT saying what is
   * missing: the addon, rdma-core's libraries, or an RDMA device.
   */
  private endpoint(): IbEndpointBinding {
    if (this.ep !== null) return this.ep;
    if (this.closed) throw new RdsError('ENOPROTOOPT', 'the InfiniBand transport is closed');
    const n = native();
    if (n === null) {
      throw new RdsError('ENOPROTOOPT', `the InfiniBand transport needs the rds-socket native addon, which did not load here: ${nativeLoadError()?.message ?? 'unknown reason'}`);
    }
    const why = n.ibLoad();
    if (why !== null) {
      throw new RdsError('ENOPROTOOPT', `the InfiniBand transport needs rdma-core's libibverbs.so.1 and librdmacm.so.1 (Debian/Ubuntu: apt-get install ibverbs-providers librdmacm1): ${why}`);
    }
    try {
      this.ep = new n.IbEndpoint(
        (id, event, status, pdata, info) => this.guard(() => this.onCmEvent(id, event, status, pdata, info)),
        (id, batch) => this.guard(() => this.onCompletions(id, batch)),
      );
    } catch (e) {
      throw new RdsError('ENOPROTOOPT', `no RDMA device is usable (rdma_cm: ${(e as Error).message}); check ibv_devices, or add a Soft-RoCE device: rdma link add rxe0 type rxe netdev <if>`, { cause: e });
    }
    if (!this.ref) this.ep.unref();
    return this.ep;
  }

  /** Callbacks from the addon must never throw back into it: report and carry on. */
  private guard(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.host.emit('error', e as Error);
    }
  }

  /** The kernel's rds_ib_laddr_check: the address must belong to an RDMA device. Then listen on it. */
  async laddrCheck(laddr: string): Promise<void> {
    if (this.listeners.has(laddr)) return;
    const ep = this.endpoint();
    if (laddr.includes(':')) throw new RdsError('EAFNOSUPPORT', 'the InfiniBand transport supports IPv4 addresses only');
    const dev = native()!.ibDeviceFor(laddr);
    if (dev === null) {
      throw new RdsError('EADDRNOTAVAIL', `${laddr} is not an address of an RDMA device (see ibv_devices and rdma link; Soft-RoCE: rdma link add rxe0 type rxe netdev <if>)`);
    }
    try {
      this.listeners.set(laddr, ep.listen(laddr, this.port));
    } catch (e) {
      throw new RdsError('EADDRINUSE', `cannot listen for RDS/IB on ${laddr}:${this.port} (${(e as Error).message}); the kernel's rds_rdma module may hold it`, { cause: e });
    }
  }

  /** IB has no address-ordering rule: either side connects when it has something to send (spec §7.1). */
  initiates(_cp: RdsConnPath): boolean {
    return true;
  }

  private newPath(id: number, passive: boolean, cp: RdsConnPath): IbPath {
    const tp: IbPath = {
      id, established: false, passive, ring: null, freeSend: [], ackSlotBusy: false, ackDone: null,
      flowControl: false, ledger: new CreditLedger(() => this.resume(cp), () => this.creditUpdate(cp)),
      current: null, controls: [], lastAck: 0, rxHeader: null, rxPayload: null, rxFilled: 0, blocked: false, coreWaiting: false,
      version: 0,
    };
    cp.carrier(IB_CARRIER).set(tp);
    this.byId.set(id, cp);
    return tp;
  }

  connPathConnect(cp: RdsConnPath): void {
    let id: number;
    try {
      id = this.endpoint().connect(cp.conn.laddr, cp.conn.faddr, this.port, this.resolveTimeoutMs);
    } catch (e) {
      this.host.emit('error', e as Error);
      cp.connectFailed();
      return;
    }
    this.newPath(id, false, cp);
  }

  /** Registers the rings, posts every receive buffer: the QP is ready for rdma_connect / rdma_accept. */
  private setupQp(tp: IbPath): void {
    const ep = this.ep!;
    tp.ring = ep.setupQp(tp.id, this.sendSlots + 1, this.recvSlots, SLOT_SIZE);
    tp.freeSend = [];
    for (let s = this.sendSlots - 1; s >= 0; s--) tp.freeSend.push(s);
    const recv = new Int32Array(this.recvSlots);
    for (let i = 0; i < this.recvSlots; i++) recv[i] = this.sendSlots + 1 + i;
    const rc = ep.postRecv(tp.id, recv);
    if (rc !== 0) throw new Error(`ibv_post_recv failed (${rc})`);
    tp.ledger.posted(this.recvSlots);
  }

  /** Our private data; `offerCredits`: grant our receive buffers (proposing or accepting flow control). */
  private privateData(cp: RdsConnPath, tp: IbPath, version: number, offerCredits: boolean): Buffer {
    // dp_ack_seq is 0: an ack in private data cannot be tied to either side's generation, and a
    // stale one would free messages the peer never saw. Acks flow in headers once connected.
    const credits = offerCredits ? tp.ledger.advertise() : 0;
    return encodeIbPrivateData({
      saddr: cp.conn.laddr, daddr: cp.conn.faddr, major: version >> 8, minor: version & 0xff,
      minorMask: 0x0003, tos: 0, ackSeq: 0, credit: credits,
    });
  }

  private onCmEvent(id: number, event: string, status: number, pdata: Buffer | undefined, info: Record<string, unknown>): void {
    if (event === 'RDMA_CM_EVENT_CONNECT_REQUEST') {
      this.onConnectRequest(id, pdata, info);
      return;
    }
    const cp = this.byId.get(id);
    if (cp === undefined) return; // an id we already gave up on
    const tp = ibPath(cp);
    if (tp === null || tp.id !== id) return;
    switch (event) {
      case 'RDMA_CM_EVENT_ROUTE_RESOLVED':
        try {
          this.setupQp(tp);
          this.ep!.rdmaConnect(id, this.privateData(cp, tp, RDS_PROTOCOL_3_1, this.flowControl));
        } catch (e) {
          this.host.emit('error', e as Error);
          this.release(cp, tp);
          cp.connectFailed();
        }
        return;
      case 'RDMA_CM_EVENT_ESTABLISHED':
        if (!tp.passive) {
          const peer = pdata !== undefined ? decodeIbPrivateData(pdata) : null;
          const version = peer === null ? 0 : (peer.major << 8) | peer.minor;
          if (version < 0x0301) {
            this.release(cp, tp);
            cp.connectFailed();
            return;
          }
          tp.version = version;
          this.applyPeerCredits(tp, peer!);
        }
        tp.established = true;
        cp.connectComplete();
        return;
      case 'RDMA_CM_EVENT_REJECTED':
      case 'RDMA_CM_EVENT_UNREACHABLE':
      case 'RDMA_CM_EVENT_CONNECT_ERROR':
      case 'RDMA_CM_EVENT_ADDR_ERROR':
      case 'RDMA_CM_EVENT_ROUTE_ERROR':
        if (tp.established) {
          cp.drop(`rdma_cm: ${event} (${status})`);
        } else {
          this.release(cp, tp);
          cp.connectFailed();
        }
        return;
      case 'RDMA_CM_EVENT_DISCONNECTED':
      case 'RDMA_CM_EVENT_DEVICE_REMOVAL':
      case 'RDMA_CM_EVENT_ADDR_CHANGE':
        if (tp.established) cp.drop(`rdma_cm: ${event}`);
        else {
          this.release(cp, tp);
          cp.connectFailed();
        }
        return;
      default:
        return; // TIMEWAIT_EXIT and the like
    }
  }

  private applyPeerCredits(tp: IbPath, peer: IbPrivateData): void {
    // As rds_ib_set_flow_control: on only if we offer it and the peer granted credits.
    tp.flowControl = this.flowControl && peer.credit > 0;
    if (tp.flowControl) tp.ledger.grant(peer.credit);
  }

  /** Passive side (rds_ib_cm_handle_connect): find the connection by the addresses in the private data. */
  private onConnectRequest(id: number, pdata: Buffer | undefined, info: Record<string, unknown>): void {
    const ep = this.ep!;
    const reject = (incompatible = false): void => {
      this.host.counters.add(RDS_CTR.ib_connect_refused);
      ep.reject(id, incompatible ? rejectIncompatible() : undefined);
    };
    const peer = pdata !== undefined ? decodeIbPrivateData(pdata) : null;
    if (peer === null || this.closed) return reject();
    const version = negotiateIbVersion(peer, pdata!.length);
    if (version === 0) return reject(true);
    const local = String(info.localAddress ?? '');
    const laddr = peer.daddr;
    const faddr = peer.saddr;
    if (!this.listeners.has(laddr) || (local !== '' && local !== laddr)) return reject();
    if (!this.host.peerAllowed(faddr)) {
      this.host.counters.add(RDS_CTR.conn_refused_allowlist);
      ep.reject(id);
      return;
    }
    const conn = this.host.connFor(laddr, faddr, this);
    const cp = conn.paths[0]!;
    const old = ibPath(cp);
    if (cp.state === RDS_CONN_UP) {
      // rds_ib_cm_handle_connect: a request while UP means the peer lost the connection: drop
      // ours (stale) and refuse; the peer retries.
      this.host.counters.add(RDS_CTR.ib_listen_closed_stale);
      cp.drop('peer reconnected (stale connection)');
      ep.reject(id);
      return;
    }
    if (cp.state === RDS_CONN_CONNECTING && old !== null) {
      // Both sides dialled (or a second request while we accept one). The kernel refuses and both
      // back off; between two rds-socket nodes the smaller address's attempt wins at once (a
      // kernel peer refuses ours anyway).
      this.host.counters.add(RDS_CTR.ib_connect_raced);
      if (old.passive || conn.isInitiator) {
        ep.reject(id);
        return;
      }
      this.release(cp, old);
    } else if (cp.state !== RDS_CONN_DOWN && cp.state !== RDS_CONN_CONNECTING) {
      ep.reject(id);
      return;
    }
    if (cp.state === RDS_CONN_DOWN) {
      cp.acceptIncoming();
    }
    const tp = this.newPath(id, true, cp);
    tp.version = version;
    this.applyPeerCredits(tp, peer);
    try {
      this.setupQp(tp);
      ep.accept(id, this.privateData(cp, tp, version, tp.flowControl));
    } catch (e) {
      this.host.emit('error', e as Error);
      this.release(cp, tp);
      cp.connectFailed();
    }
  }

  /** Forget the path's carrier: destroy the QP and id; nothing from it reaches the core again. */
  private release(cp: RdsConnPath, tp: IbPath): void {
    this.byId.delete(tp.id);
    const slot = cp.carrier(IB_CARRIER);
    if (slot.is(tp)) slot.clear();
    const done = tp.ackDone;
    tp.ackDone = null;
    for (const c of tp.controls.splice(0)) c.done();
    tp.current?.msg?.xmitDone();
    tp.current = null;
    if (this.ep !== null) {
      this.ep.disconnect(tp.id);
      this.ep.destroy(tp.id);
    }
    tp.ring = null;
    done?.();
  }

  connPathShutdown(cp: RdsConnPath): void {
    const tp = ibPath(cp);
    if (tp !== null) this.release(cp, tp);
  }

  // ---- sending ----

  xmit(cp: RdsConnPath, msg: RdsOutgoing): boolean {
    const tp = ibPath(cp);
    if (tp === null || !tp.established) return false;
    msg.xmitHold();
    tp.current = { wire: msg.wire, len: msg.len, off: 0, msg };
    return this.take(cp, tp);
  }

  xmitCong(cp: RdsConnPath, map: Buffer): boolean {
    const tp = ibPath(cp);
    if (tp === null || !tp.established) return false;
    tp.current = { wire: encodeCongUpdate(map), len: map.length, off: 0, msg: null };
    return this.take(cp, tp);
  }

  /** Starts the frame just made current; false (and a kick later) if the ring cannot take more now. */
  private take(cp: RdsConnPath, tp: IbPath): boolean {
    this.push(cp, tp);
    const more = tp.current === null && !tp.blocked;
    if (!more) tp.coreWaiting = true;
    return more;
  }

  xmitControl(cp: RdsConnPath, header: Buffer, done: () => void): void {
    const tp = ibPath(cp);
    if (tp === null || !tp.established) {
      done();
      return;
    }
    // Ack-only frames may go between the fragments of a message (the kernel handles them before
    // reassembly); anything else (the hello) waits for a message boundary.
    const ackOnly = header.readUInt16BE(OFF_SPORT) === 0 && header.readUInt16BE(OFF_DPORT) === 0 && header.readUInt32BE(OFF_LEN) === 0;
    tp.controls.push({ header, done, ackOnly });
    this.push(cp, tp);
  }

  /** A header-only credit update when 16 buffers are owed and nothing else is going out. */
  private creditUpdate(cp: RdsConnPath): void {
    const tp = ibPath(cp);
    if (tp === null || !tp.established || tp.controls.length > 0 || tp.ackSlotBusy) return;
    const h = Buffer.alloc(RDS_HEADER_SIZE);
    writeU64(h, OFF_ACK, tp.lastAck);
    tp.controls.push({ header: h, done: () => {}, ackOnly: true });
    defer(() => this.push(cp, tp));
  }

  private resume(cp: RdsConnPath): void {
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
    if (ack > tp.lastAck) tp.lastAck = ack;
    ring.writeUInt16BE(0, base + OFF_CSUM);
    ring.writeUInt16BE(headerChecksum(ring, base), base + OFF_CSUM);
    if (src !== null && len > 0) src.copy(ring, base + RDS_HEADER_SIZE, srcOff, srcOff + len);
  }

  /**
   * Moves work to the send ring while slots and credits last: control frames first (the ack slot),
   * then fragments of the current message. Posts the batch with one call.
   */
  private push(cp: RdsConnPath, tp: IbPath): void {
    if (!tp.established || tp.ring === null) return;
    const posts: number[] = [];
    // Control frames use the dedicated slot, one at a time (one ack in flight, spec §7.4).
    if (!tp.ackSlotBusy && tp.controls.length > 0) {
      const c = tp.controls[0]!;
      const atBoundary = tp.current === null || tp.current.off === 0;
      if ((c.ackOnly || atBoundary) && (!tp.flowControl || tp.ledger.tryConsumeForUpdate())) {
        tp.controls.shift();
        const slot = this.sendSlots;
        this.fill(tp, slot, c.header, null, 0, 0);
        tp.ackSlotBusy = true;
        tp.ackDone = c.done;
        posts.push(slot, RDS_HEADER_SIZE, 1);
      }
    }
    const cur = tp.current;
    if (cur !== null && (tp.controls.length === 0 || tp.controls[0]!.ackOnly)) {
      while (tp.freeSend.length > 0) {
        if (tp.flowControl && !tp.ledger.tryConsume(1)) break;
        const slot = tp.freeSend.pop()!;
        const n = Math.min(RDS_IB_FRAG_SIZE, cur.len - cur.off);
        this.fill(tp, slot, cur.wire, cur.wire, RDS_HEADER_SIZE + cur.off, n);
        cur.off += n;
        const last = cur.off >= cur.len;
        posts.push(slot, RDS_HEADER_SIZE + n, last ? 1 : 0);
        if (last) {
          tp.current = null;
          cur.msg?.xmitDone();
          break;
        }
      }
    }
    tp.blocked = tp.current !== null || tp.freeSend.length === 0;
    if (tp.coreWaiting && !tp.blocked) {
      tp.coreWaiting = false;
      cp.kick();
    }
    if (posts.length === 0) return;
    const rc = this.ep!.postSend(tp.id, Int32Array.from(posts));
    if (rc !== 0) cp.drop(`ibv_post_send failed (${rc})`);
  }

  // ---- completions ----

  private onCompletions(id: number, batch: Int32Array): void {
    const cp = this.byId.get(id);
    if (cp === undefined) return;
    const tp = ibPath(cp);
    if (tp === null || tp.id !== id || tp.ring === null) return;
    cp.noteRxActivity();
    const reposts: number[] = [];
    let sendFreed = false;
    for (let i = 0; i < batch.length; i += 3) {
      const slot = batch[i]!;
      const status = batch[i + 1]!;
      const len = batch[i + 2]!;
      if (status !== 0) {
        // Flushes after an error, or the error itself: the connection is gone.
        if (tp.established) cp.drop(`work request failed (ibv_wc_status ${status})`);
        return;
      }
      if (slot < this.sendSlots) {
        tp.freeSend.push(slot);
        sendFreed = true;
      } else if (slot === this.sendSlots) {
        tp.ackSlotBusy = false;
        const done = tp.ackDone;
        tp.ackDone = null;
        done?.();
        sendFreed = true;
      } else {
        try {
          this.receive(cp, tp, slot, len);
        } catch (e) {
          if (e instanceof RdsProtocolError) {
            this.host.reportProtocolError(cp, e);
            cp.drop(`protocol error: ${e.message}`);
            return;
          }
          throw e;
        }
        if (ibPath(cp) !== tp) return; // the core dropped the path while handling the message
        reposts.push(slot);
      }
    }
    if (reposts.length > 0 && tp.ring !== null) {
      const rc = this.ep!.postRecv(tp.id, Int32Array.from(reposts));
      if (rc !== 0) {
        cp.drop(`ibv_post_recv failed (${rc})`);
        return;
      }
      tp.ledger.posted(reposts.length);
    }
    if (sendFreed || tp.controls.length > 0) this.push(cp, tp);
  }

  /** One received fragment (rds_ib_process_recv). */
  private receive(cp: RdsConnPath, tp: IbPath, slot: number, byteLen: number): void {
    const ring = tp.ring!;
    const base = slot * SLOT_SIZE;
    if (byteLen < RDS_HEADER_SIZE || byteLen > SLOT_SIZE) throw new RdsProtocolError(`IB fragment of ${byteLen} bytes`);
    if (!verifyHeaderChecksum(ring, base)) {
      this.host.counters.add(RDS_CTR.recv_drop_bad_checksum);
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
      this.host.recvIncoming(cp, Buffer.from(ring.subarray(base, base + RDS_HEADER_SIZE)), EMPTY);
      return;
    }
    if (tp.rxHeader === null) {
      if (hLen > MAX_H_LEN) throw new RdsProtocolError(`h_len ${hLen} exceeds ${MAX_H_LEN}`);
      if (dataLen !== Math.min(hLen, RDS_IB_FRAG_SIZE)) throw new RdsProtocolError(`first fragment carries ${dataLen} of ${hLen} bytes`);
      const header = Buffer.from(ring.subarray(base, base + RDS_HEADER_SIZE));
      const payload = Buffer.from(ring.subarray(base + RDS_HEADER_SIZE, base + byteLen));
      if (hLen <= RDS_IB_FRAG_SIZE) {
        this.host.recvIncoming(cp, header, payload);
        return;
      }
      tp.rxHeader = header;
      tp.rxPayload = Buffer.allocUnsafe(hLen);
      payload.copy(tp.rxPayload, 0);
      tp.rxFilled = dataLen;
      return;
    }
    // A later fragment: same sequence, length and ports (h_ack, h_credit, h_csum may differ).
    const h = tp.rxHeader;
    if (ring.compare(h, 0, 8, base, base + 8) !== 0 || ring.compare(h, OFF_LEN, OFF_LEN + 8, base + OFF_LEN, base + OFF_LEN + 8) !== 0) {
      throw new RdsProtocolError('fragment header mismatch');
    }
    const want = Math.min(RDS_IB_FRAG_SIZE, hLen - tp.rxFilled);
    if (dataLen !== want) throw new RdsProtocolError(`fragment carries ${dataLen} bytes, expected ${want}`);
    const ack = readU64(ring, base + OFF_ACK);
    if (ack !== 0) cp.ackThrough(ack);
    ring.copy(tp.rxPayload!, tp.rxFilled, base + RDS_HEADER_SIZE, base + byteLen);
    tp.rxFilled += dataLen;
    if (tp.rxFilled < hLen) return;
    const payload = tp.rxPayload!;
    tp.rxHeader = null;
    tp.rxPayload = null;
    tp.rxFilled = 0;
    this.host.recvIncoming(cp, h, payload);
  }

  setRef(ref: boolean): void {
    this.ref = ref;
    if (this.ep !== null) (ref ? this.ep.ref() : this.ep.unref());
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const cp of [...this.byId.values()]) {
      const tp = ibPath(cp);
      if (tp !== null) this.release(cp, tp);
    }
    this.byId.clear();
    this.listeners.clear();
    this.ep?.close();
    this.ep = null;
  }

  pathInfo(cp: RdsConnPath): Record<string, unknown> | null {
    const tp = ibPath(cp);
    if (tp === null) return null;
    return {
      id: tp.id, established: tp.established, protocol: tp.version ? `${tp.version >> 8}.${tp.version & 0xff}` : null,
      flowControl: tp.flowControl, sendCredits: tp.ledger.sendCredits, postedUnadvertised: tp.ledger.postedUnadvertised,
      freeSendSlots: tp.freeSend.length, reassembling: tp.rxHeader !== null,
    };
  }
}

const EMPTY = Buffer.alloc(0);

/** The kernel's RDS_RDMA_REJ_INCOMPAT: a 4-byte host-order (little-endian here) int 1. */
function rejectIncompatible(): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32LE(1, 0);
  return b;
}

