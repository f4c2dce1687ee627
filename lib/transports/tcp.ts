import { RDS_TRANS_TCP } from '../constants.js';
import type { TransportConn } from '../core/transport-path.js';
import type { RdsOutgoing } from '../core/message.js';
import type { TransportPath } from '../core/transport-path.js';
import type { TransportHost } from '../core/transport.js';
import type { RdsTransport } from '../core/transport.js';
import { TcpAdmission } from './tcp-admission.js';
import { TCP_CARRIER, tcpPath, TcpShared, type TcpTransportOptions } from './tcp-carrier.js';
import { TcpConnector } from './tcp-connect.js';
import { TcpListener } from './tcp-listen.js';
import { TcpRails } from './tcp-rail.js';
import { TcpReceiver } from './tcp-recv.js';
import { TcpSender } from './tcp-send.js';

export type { TcpTransportOptions } from './tcp-carrier.js';

/** How long a graceful close waits for the peer's FIN before resetting. */
const CLOSE_LINGER_MS = 2000;

/**
 * RDS over TCP, wire-compatible with net/rds/tcp*.c (the kernel's tcp.c): one listener per local
 * address on the RDS/TCP port, the numerically smaller address connects, the larger one only
 * pokes, and the byte stream is a plain sequence of [48-byte header][payload] records. Its parts
 * follow the kernel's files: TcpConnector (tcp_connect.c), TcpListener (tcp_listen.c),
 * TcpReceiver (tcp_recv.c), TcpSender (tcp_send.c); each path's state is a TcpPath carrier object.
 */
export class TcpTransport implements RdsTransport {
  readonly name = 'tcp';
  readonly streamCarrier = true;
  readonly transType = RDS_TRANS_TCP;
  readonly mpathCapable = true;
  readonly userSelectable = true;

  /** rds_tcp_get_tos_map: every TOS is carried by the one connection, which therefore carries 0. */
  tosMap(_tos: number): number {
    return 0;
  }

  /** Carries rails (tcp-rail.ts), over plain TCP only. */
  get rails(): boolean {
    return !this.ctx.topts.tls;
  }

  get railsRefusal(): string | undefined {
    if (!this.ctx.topts.tls) return undefined;
    return (
      "this stack's TCP transport uses TLS, and rails are not carried over TLS (a rail's connection " +
      'would bypass the certificate check): declare no rails on a TLS stack; for several links with ' +
      'TLS, bond them below RDS (Linux bonding or multipath routes), or use rails on a stack without tls ' +
      'on a network you trust'
    );
  }
  private readonly ctx: TcpShared;
  private readonly admission = new TcpAdmission();
  private readonly sender: TcpSender;
  private readonly receiver: TcpReceiver;
  private readonly connector: TcpConnector;
  private readonly listener: TcpListener;

  constructor(topts: TcpTransportOptions = {}) {
    this.ctx = new TcpShared(topts, this);
    this.sender = new TcpSender(this.ctx);
    this.receiver = new TcpReceiver(this.ctx, this.admission, this.sender);
    const rails = new TcpRails(this.ctx, this.admission, this.receiver);
    this.connector = new TcpConnector(this.ctx, this.receiver, rails);
    this.listener = new TcpListener(this.ctx, this.admission, this.receiver, rails);
  }

  attach(host: TransportHost): void {
    this.ctx.attach(host);
    this.receiver.attach();
  }

  /** Bytes charged to the frames in progress on every carrier: h_len of those over 64 KiB, at least 256 KiB each (at most maxPartialFrameBytes). */
  get partialFrameBytes(): number {
    return this.receiver.partialFrameBytes;
  }

  rxPause(cp: TransportPath): void {
    this.receiver.rxPause(cp);
  }

  rxResume(cp: TransportPath): void {
    this.receiver.rxResume(cp);
  }

  laddrCheck(laddr: string): Promise<void> {
    return this.listener.laddrCheck(laddr);
  }

  initiates(cp: TransportPath): boolean {
    return cp.conn.isInitiator;
  }

  acceptedLane(cp: TransportPath): number | undefined {
    if (cp.conn.isInitiator || cp.index >= 8) return undefined;
    const port = tcpPath(cp).sock?.remotePort;
    return port === undefined ? undefined : port % 8;
  }

  carrierToLane(cp: TransportPath, to: TransportPath): boolean {
    return this.listener.carrierToLane(cp, to);
  }

  connPathConnect(cp: TransportPath): void {
    this.connector.connect(cp);
  }

  connPathShutdown(cp: TransportPath): void {
    tcpPath(cp).shutdown()?.destroy();
  }

  xmitBegin(cp: TransportPath): boolean {
    return this.sender.xmitBegin(cp);
  }

  xmitEnd(cp: TransportPath): void {
    this.sender.xmitEnd(cp);
  }

  xmit(cp: TransportPath, msg: RdsOutgoing): boolean {
    return this.sender.xmit(cp, msg);
  }

  xmitCong(cp: TransportPath, map: Buffer): boolean {
    return this.sender.xmitCong(cp, map);
  }

  xmitControl(cp: TransportPath, header: Buffer, done: () => void): void {
    this.sender.xmitControl(cp, header, done);
  }

  capabilitiesChanged(conn: TransportConn): void {
    this.sender.capabilitiesChanged(conn);
  }

  pathInfo(cp: TransportPath): Record<string, unknown> | null {
    const tp = cp.carrierIf(TCP_CARRIER);
    const sock = tp?.sock;
    if (!sock) return null;
    const [hdrRem, dataRem] = tp!.reader?.remaining ?? [0, 0];
    return {
      localPort: sock.localPort,
      peerPort: sock.remotePort,
      bytesWritten: sock.bytesWritten,
      bytesRead: sock.bytesRead,
      writeQueued: sock.writableLength,
      hdrRemaining: hdrRem,
      dataRemaining: dataRem,
      // Receive limits: the node has stopped reading this connection (queue limit, or waiting for
      // room for its frame in maxPartialFrameBytes).
      readPaused: cp.readPaused,
      waitingForFrameRoom: tp!.waiting,
    };
  }

  setRef(ref: boolean): void {
    this.ctx.setRef(ref);
    this.listener.syncRef();
  }

  /** Stop listening; half-close every carrier so queued bytes still reach the peer, then reset stragglers. */
  async close(): Promise<void> {
    this.ctx.markClosed();
    // server.close() only calls back once every accepted connection is gone, so end those at the same time.
    const closing = await this.listener.closeAll();
    await Promise.all(
      [...this.ctx.sockets].map(
        (s) =>
          new Promise<void>((res) => {
            if (s.destroyed) return res();
            const t = setTimeout(() => s.destroy(), CLOSE_LINGER_MS);
            s.once('close', () => {
              clearTimeout(t);
              res();
            });
            s.resume();
            s.end();
          }),
      ),
    );
    await Promise.all(closing);
  }
}
