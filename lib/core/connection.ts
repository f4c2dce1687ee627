import { RDSSOCK_CAP_ACK, RDSSOCK_CAP_HEARTBEAT } from '../constants.js';
import { compareAddresses } from './address.js';
import type { CongMap } from './cong-map.js';
import { RdsConnPath } from './path.js';
import type { RdsStack } from './stack.js';
import type { RdsTransport } from './transport.js';

/**
 * What one node knows about one peer over one transport (struct rds_connection): the peer's
 * congestion map, the negotiated number of paths, generation numbers, and the paths themselves.
 * Connections are shared by every socket of the stack and live as long as the stack.
 */
export class RdsConnection {
  readonly paths: RdsConnPath[];
  /** 0 until a handshake says otherwise (spec §3.2); then the agreed number of paths. */
  npaths = 0;
  /** Peer generation from GEN_NUM (0 = unknown). */
  peerGenNum = 0;
  /** rds-socket capabilities the peer advertised (RDSSOCK_CAP_*); 0 for a kernel. */
  peerCaps = 0;
  /** A handshake (or its timeout) told us what the peer is. Until then, keep every message. */
  capsKnown = false;
  /** The peer's congestion map (for a loopback connection, the destination address's own map). */
  readonly peerCong: CongMap;
  /** True when this side has the numerically smaller address (it initiates TCP). */
  readonly isInitiator: boolean;
  readonly isLoopback: boolean;

  constructor(
    readonly stack: RdsStack,
    readonly laddr: string,
    readonly faddr: string,
    readonly transport: RdsTransport,
    maxPaths: number,
  ) {
    this.peerCong = stack.congMap(faddr);
    this.isInitiator = compareAddresses(laddr, faddr) < 0;
    this.isLoopback = transport.transType === stack.loopTransportType;
    this.paths = Array.from({ length: maxPaths }, (_, i) => new RdsConnPath(this, i));
  }

  /** RDS-level acks: both sides are rds-socket and the stack allows it. */
  get ackMode(): boolean {
    return (this.peerCaps & RDSSOCK_CAP_ACK) !== 0 && this.stack.options.rdsAcks && !this.isLoopback;
  }

  get heartbeatMode(): boolean {
    return (this.peerCaps & RDSSOCK_CAP_HEARTBEAT) !== 0 && !this.isLoopback;
  }

  /** Whether a transport-level acknowledgement (TCP's) may release messages: kernel peers only. */
  get releaseOnTransportAck(): boolean {
    return this.capsKnown && !this.ackMode;
  }

  get key(): string {
    return RdsConnection.key(this.laddr, this.faddr, this.transport.name);
  }

  static key(laddr: string, faddr: string, transport: string): string {
    return `${laddr}|${faddr}|${transport}`;
  }

  /**
   * The path a socket's messages use: fixed per bound port so one socket's messages to one peer
   * stay in order. Single path until multipath is negotiated.
   */
  pathFor(_sport: number): RdsConnPath {
    return this.paths[0]!;
  }
}
