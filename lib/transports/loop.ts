import { RDS_HEADER_SIZE, RDS_TRANS_LOOP } from '../constants.js';
import { RdsError } from '../errors.js';
import { RDS_CTR } from '../core/stats.js';
import type { RdsConnPath } from '../core/path.js';
import type { RdsOutgoing } from '../core/message.js';
import type { RdsTransportHost } from '../core/stack.js';
import type { RdsTransport } from '../core/transport.js';
import { localReceipt } from '../core/send-confirm.js';

/**
 * The loopback transport (net/rds/loop.c): messages between addresses of the same stack are
 * handed straight to the receive path, with no bytes on any wire. The receiving side's view is
 * the reverse connection (faddr -> laddr), so replies such as pongs flow back naturally.
 */
export class LoopTransport implements RdsTransport {
  readonly name = 'loopback';
  readonly transType = RDS_TRANS_LOOP;
  readonly mpathCapable = false;
  readonly userSelectable = false;
  readonly local = true;
  private host!: RdsTransportHost;

  attach(host: RdsTransportHost): void {
    this.host = host;
  }

  async laddrCheck(): Promise<void> {
    // Never chosen by bind: the core picks it per destination.
  }

  initiates(): boolean {
    return true;
  }

  connPathConnect(cp: RdsConnPath): void {
    queueMicrotask(() => cp.connectComplete());
  }

  connPathShutdown(): void {}

  xmit(cp: RdsConnPath, msg: RdsOutgoing): boolean {
    const rev = this.host.connFor(cp.conn.faddr, cp.conn.laddr, this);
    const rcp = rev.path(0)!;
    // The receiver owns the payload from here: the sender never touches an acknowledged message.
    // A zero-copy payload is the sender's to reuse once acknowledged, so the receiver gets a copy.
    const zc = msg.zcPayload;
    let payload: Buffer;
    if (zc === null) {
      msg.wireTaken();
      payload = msg.wire.subarray(RDS_HEADER_SIZE);
    } else {
      payload = Buffer.concat(zc instanceof Uint8Array ? [zc] : zc, msg.len);
    }
    // No socket bound there: the receive path drops it (recv_drop_no_sock); the sender is told,
    // as an rds-socket peer would tell it over TCP.
    if (msg.dport !== 0 && !this.host.isBound(cp.conn.faddr, msg.dport)) {
      this.host.counters.add(RDS_CTR.send_refused_no_sock);
      msg.confirm(
        new RdsError('ECONNREFUSED', `no socket is bound to ${cp.conn.faddr}:${msg.dport}: the message was dropped`),
      );
    }
    // A confirmation means the receiving application took the message, here as from a peer: the
    // receiving socket settles it through the receipt when it is read, or discarded unread. The
    // message itself is acknowledged at once (its bytes go back to the sender's budget), as the
    // kernel's loopback does. A ping (port 0) is taken by the stack itself: its confirmation
    // resolves on the acknowledgement.
    const receipt = msg.confirmPending && msg.dport !== 0 ? localReceipt(msg, this.host.counters) : undefined;
    rcp.noteRxActivity();
    this.host.recvIncoming(rcp, msg.wire.subarray(0, RDS_HEADER_SIZE), payload, receipt);
    cp.tx.ackThrough(msg.seq, receipt !== undefined);
    return true;
  }

  xmitCong(): boolean {
    // Loopback peers read the local map directly (the connection's peer map is the same object).
    return true;
  }

  setRef(): void {}

  async close(): Promise<void> {}
}
