import { RDS_CONN_CONNECTING, RDS_CONN_DOWN, RDS_CONN_UP, RDS_RDMA_DROPPED, RDS_TRANS_IB } from '../constants.js';
import { rdmaStatusOf, type RdmaTransport } from '../core/rdma-ops.js';
import { CreditLedger } from '../core/credits.js';
import type { RdsOutgoing } from '../core/message.js';
import type { TransportPath } from '../core/transport-path.js';
import { type IbLimits, ibAdmissionRefusal } from './ib-admission.js';
import { type IbTransportOptions, resolveIbOptions } from './ib-options.js';
import type { TransportHost } from '../core/transport.js';
import type { RdsTransport } from '../core/transport.js';
import { RdsError } from '../errors.js';
import { native, nativeLoadError, type IbEndpointBinding } from '../native.js';
import { decodeIbPrivateData, negotiateIbVersion, RDS_PROTOCOL_3_1 } from '../wire/ib-private-data.js';
import { RDS_CTR } from '../core/stats.js';

import { IB_CARRIER, ibPath, IbPath, IbShared } from './ib-path.js';
import { IbReceiver } from './ib-recv.js';
import { IbSender } from './ib-send.js';
import { applyPeerCredits, ibMemory, ourPrivateData, rejectIncompatible, setupQp } from './ib-cm.js';

export { RDS_IB_FRAG_SIZE } from './ib-path.js';

export type { IbTransportOptions } from './ib-options.js';

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
  /** Monitors learn exactly which ports a map update cleared. */
  readonly exactCongMask = true;
  private host!: TransportHost;
  private ep: IbEndpointBinding | null = null;
  private readonly shared: IbShared;
  private readonly sender: IbSender;
  private readonly receiver: IbReceiver;
  private readonly listeners = new Map<string, number>();
  /** cm id -> the path it carries (or, for listeners, nothing). */
  private readonly byId = new Map<number, TransportPath>();
  private readonly port: number;
  private readonly flowControl: boolean;
  private readonly sendSlots: number;
  private readonly recvSlots: number;
  private readonly resolveTimeoutMs: number;
  private readonly limits: IbLimits;
  private ref = false;
  private closed = false;

  /** Memory registration for getMr(): one PD per device, shared with every connection on it. */
  readonly rdma: RdmaTransport = ibMemory(
    () => this.endpoint(),
    () => this.ep,
  );

  constructor(opts: IbTransportOptions = {}) {
    ({
      port: this.port,
      flowControl: this.flowControl,
      sendSlots: this.sendSlots,
      recvSlots: this.recvSlots,
      resolveTimeoutMs: this.resolveTimeoutMs,
      limits: this.limits,
    } = resolveIbOptions(opts));
    this.shared = new IbShared(this.sendSlots);
    this.sender = new IbSender(this.shared);
    this.receiver = new IbReceiver(this.shared, this.sender);
  }

  attach(host: TransportHost): void {
    this.host = host;
    this.shared.attach(host);
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
      throw new RdsError(
        'ENOPROTOOPT',
        `the InfiniBand transport needs the rds-socket native addon, which did not load here: ${nativeLoadError()?.message ?? 'unknown reason'}`,
      );
    }
    const why = n.ibLoad();
    if (why !== null) {
      throw new RdsError(
        'ENOPROTOOPT',
        `the InfiniBand transport needs rdma-core's libibverbs.so.1 and librdmacm.so.1 (Debian/Ubuntu: apt-get install ibverbs-providers librdmacm1): ${why}`,
      );
    }
    try {
      this.ep = new n.IbEndpoint(
        (id, event, status, pdata, info) => this.guard(() => this.onCmEvent(id, event, status, pdata, info)),
        (id, batch) =>
          this.guard(() => {
            const cp = this.byId.get(id);
            if (cp !== undefined) this.receiver.onCompletions(cp, id, batch);
          }),
      );
      this.shared.setEndpoint(this.ep);
    } catch (e) {
      throw new RdsError(
        'ENOPROTOOPT',
        `no RDMA device is usable (rdma_cm: ${(e as Error).message}); check ibv_devices, or add a Soft-RoCE device: rdma link add rxe0 type rxe netdev <if>`,
        { cause: e },
      );
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
    if (laddr.includes(':'))
      throw new RdsError('EAFNOSUPPORT', 'the InfiniBand transport supports IPv4 addresses only');
    const dev = native()!.ibDeviceFor(laddr);
    if (dev === null) {
      throw new RdsError(
        'EADDRNOTAVAIL',
        `${laddr} is not an address of an RDMA device (see ibv_devices and rdma link; Soft-RoCE: rdma link add rxe0 type rxe netdev <if>)`,
      );
    }
    try {
      this.listeners.set(laddr, ep.listen(laddr, this.port));
    } catch (e) {
      throw new RdsError(
        'EADDRINUSE',
        `cannot listen for RDS/IB on ${laddr}:${this.port} (${(e as Error).message}); the kernel's rds_rdma module may hold it`,
        { cause: e },
      );
    }
  }

  /** rds_ib_get_tos_map: the TOS is kept; each TOS has its own connection, its service type from it. */
  tosMap(tos: number): number {
    return tos;
  }

  /** IB has no address-ordering rule: either side connects when it has something to send (spec §7.1). */
  initiates(_cp: TransportPath): boolean {
    return true;
  }

  private newPath(id: number, passive: boolean, cp: TransportPath): IbPath {
    const tp = new IbPath(
      id,
      passive,
      new CreditLedger(
        () => this.sender.resume(cp),
        () => this.sender.creditUpdate(cp),
      ),
    );
    cp.carrier(IB_CARRIER).set(tp);
    this.byId.set(id, cp);
    return tp;
  }

  connPathConnect(cp: TransportPath): void {
    let id: number;
    try {
      // The connection's TOS is the id's service type, set before route resolution (rds_rdma's
      // rdma_set_service_type); the private data carries it to the peer (ourPrivateData).
      id = this.endpoint().connect(cp.conn.laddr, cp.conn.faddr, this.port, this.resolveTimeoutMs, cp.conn.tos);
    } catch (e) {
      this.host.emit('error', e as Error);
      cp.connectFailed();
      return;
    }
    this.newPath(id, false, cp);
  }

  private onCmEvent(
    id: number,
    event: string,
    status: number,
    pdata: Buffer | undefined,
    info: Record<string, unknown>,
  ): void {
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
          setupQp(this.ep!, tp, this.sendSlots, this.recvSlots);
          this.ep!.rdmaConnect(id, ourPrivateData(cp, tp, RDS_PROTOCOL_3_1, this.flowControl));
        } catch (e) {
          this.host.emit('error', e as Error);
          this.lost(cp, tp, 'queue pair setup failed');
        }
        return;
      case 'RDMA_CM_EVENT_ESTABLISHED':
        if (!tp.passive) {
          const peer = pdata !== undefined ? decodeIbPrivateData(pdata) : null;
          const version = peer === null ? 0 : (peer.major << 8) | peer.minor;
          if (version < 0x0301) {
            this.lost(cp, tp, `peer speaks RDS/IB ${version >> 8}.${version & 0xff}`);
            return;
          }
          tp.versionNegotiated(version);
          tp.peerMarked(peer!.rdsSocket === true);
          applyPeerCredits(tp, peer!, this.flowControl);
        }
        tp.markEstablished();
        cp.connectComplete();
        return;
      case 'RDMA_CM_EVENT_REJECTED':
      case 'RDMA_CM_EVENT_UNREACHABLE':
      case 'RDMA_CM_EVENT_CONNECT_ERROR':
      case 'RDMA_CM_EVENT_ADDR_ERROR':
      case 'RDMA_CM_EVENT_ROUTE_ERROR':
        this.lost(cp, tp, `rdma_cm: ${event} (${status})`);
        return;
      case 'RDMA_CM_EVENT_DISCONNECTED':
      case 'RDMA_CM_EVENT_DEVICE_REMOVAL':
      case 'RDMA_CM_EVENT_ADDR_CHANGE':
        this.lost(cp, tp, `rdma_cm: ${event}`);
        return;
      default:
        return; // TIMEWAIT_EXIT and the like
    }
  }

  /**
   * Passive side (rds_ib_cm_handle_connect): find the connection by the addresses and the TOS in
   * the private data (a connection per TOS, as the kernel's rds_conn_create with dp_tos).
   */
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
    // Before connFor: a refused request must not leave a connection object behind either.
    const over = ibAdmissionRefusal(this.byId.values(), laddr, faddr, peer.tos, this.limits);
    if (over !== null) {
      this.host.counters.add(RDS_CTR.conn_refused_limit);
      ep.reject(id);
      return;
    }
    const conn = this.host.connFor(laddr, faddr, this, peer.tos);
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
    tp.versionNegotiated(version);
    tp.peerMarked(peer.rdsSocket === true);
    applyPeerCredits(tp, peer, this.flowControl);
    try {
      setupQp(ep, tp, this.sendSlots, this.recvSlots);
      ep.accept(id, ourPrivateData(cp, tp, version, tp.flowControl));
    } catch (e) {
      this.host.emit('error', e as Error);
      this.lost(cp, tp, 'accept failed');
    }
  }

  /**
   * The carrier `tp` failed (CarrierSlot.lost): one that never came up is released here and its
   * connect failed; a live one is dropped, and connPathShutdown releases it.
   */
  private lost(cp: TransportPath, tp: IbPath, reason: string): void {
    cp.carrier(IB_CARRIER).lost(tp, reason, (t) => this.release(cp, t));
  }

  /** Forget the path's carrier: destroy the QP and id; nothing from it reaches the core again. */
  private release(cp: TransportPath, tp: IbPath): void {
    this.byId.delete(tp.id);
    const slot = cp.carrier(IB_CARRIER);
    if (slot.is(tp)) slot.clear();
    const done = tp.takeAckDone();
    // RDMA ops that completed (or failed) before the teardown get their own status; those whose
    // completion never came are reported dropped. Their messages are not resent either way.
    const finished = this.ep?.pollOps?.(tp.id);
    for (let i = 0; finished !== undefined && i < finished.length; i += 3) {
      const op = tp.rdmaOps.get(finished[i]!);
      tp.rdmaOps.delete(finished[i]!);
      op?.finish(rdmaStatusOf(finished[i + 1]!));
    }
    for (const op of tp.rdmaOps.values()) op.finish(RDS_RDMA_DROPPED);
    tp.rdmaOps.clear();
    tp.rdmaWaits(null);
    for (const c of tp.dropControls()) c.done();
    tp.dropFrame();
    if (this.ep !== null) {
      this.ep.disconnect(tp.id);
      this.ep.destroy(tp.id);
    }
    tp.ringGone();
    done?.();
  }

  connPathShutdown(cp: TransportPath): void {
    const tp = ibPath(cp);
    if (tp !== null) this.release(cp, tp);
  }

  /** A peer whose private data lacks rds-socket's mark is a kernel: no multipath probe for it. */
  peerKindHint(cp: TransportPath): 'kernel' | 'unknown' {
    const tp = ibPath(cp);
    return tp?.established === true && !tp.peerRdsSocket ? 'kernel' : 'unknown';
  }

  // ---- sending ----

  xmit(cp: TransportPath, msg: RdsOutgoing): boolean {
    return this.sender.xmit(cp, msg);
  }

  xmitCong(cp: TransportPath, map: Buffer): boolean {
    return this.sender.xmitCong(cp, map);
  }

  xmitControl(cp: TransportPath, header: Buffer, done: () => void): void {
    this.sender.xmitControl(cp, header, done);
  }

  setRef(ref: boolean): void {
    this.ref = ref;
    if (this.ep !== null) ref ? this.ep.ref() : this.ep.unref();
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
    this.shared.setEndpoint(null);
  }

  pathInfo(cp: TransportPath): Record<string, unknown> | null {
    const tp = ibPath(cp);
    if (tp === null) return null;
    return {
      id: tp.id,
      established: tp.established,
      protocol: tp.version ? `${tp.version >> 8}.${tp.version & 0xff}` : null,
      flowControl: tp.flowControl,
      sendCredits: tp.ledger.sendCredits,
      postedUnadvertised: tp.ledger.postedUnadvertised,
      freeSendSlots: tp.freeSendSlots,
      reassembling: tp.reassembling !== null,
      peer: tp.established ? (tp.peerRdsSocket ? 'rds-socket' : 'kernel') : null,
      // The queue pair's ring sizes (RDS_INFO_IB_CONNECTIONS' max_send_wr / max_recv_wr).
      maxSendWr: this.sendSlots + 1,
      maxRecvWr: this.recvSlots,
      // How well completions batch: each wake-up of the completion channel costs a trip through
      // the event loop, so more completions per wake-up is cheaper per message.
      ...completionFigures(tp.completionFigures),
    };
  }

  resetPathStats(cp: TransportPath): void {
    ibPath(cp)?.resetCompletionFigures();
  }
}

function completionFigures(f: { wakeups: number; completions: number }): Record<string, number> {
  return {
    wakeups: f.wakeups,
    completions: f.completions,
    completionsPerWakeup: f.wakeups === 0 ? 0 : Math.round((f.completions / f.wakeups) * 100) / 100,
  };
}
