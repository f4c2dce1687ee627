import { connect, type Socket } from 'node:net';
import * as tls from 'node:tls';
import type { TransportPath } from '../core/transport-path.js';
import { RDS_CTR } from '../core/stats.js';
import { FrameReader } from '../wire/frame-reader.js';
import { tcpPath, type TcpShared } from './tcp-carrier.js';
import { localPortRange, slabOnread } from './tcp-socket.js';
import type { TcpReceiver } from './tcp-recv.js';
import type { TcpRails } from './tcp-rail.js';
import { railOf } from '../core/ext/rail.js';

/**
 * How long one TCP connect (or poke) may wait for the peer's SYN-ACK: this, or headerTimeoutMs if
 * smaller. TCP itself resends a SYN lost to a partition or a downed link only 1, 3, 7, 15 and 31 s
 * after the first, so a connect begun during the fault reached the healed peer up to half a minute
 * late while the path stayed CONNECTING (the nemesis's stuck pairs, issue #35). Abandoned, the
 * path is dialled again within its reconnect backoff, with a fresh SYN.
 */
export const CONNECT_ANSWER_MS = 3000;

/**
 * Abandons `sock` (its close then fails the attempt as a refused connect would) if TCP has not
 * connected within CONNECT_ANSWER_MS; `still` says whether the attempt is still the path's.
 */
function boundConnect(ctx: TcpShared, sock: Socket, still: () => boolean): void {
  const t = setTimeout(
    () => {
      if (!still()) return;
      ctx.host.counters.add(RDS_CTR.tcp_connect_timeout);
      sock.destroy();
    },
    Math.min(CONNECT_ANSWER_MS, ctx.host.options.headerTimeoutMs),
  );
  t.unref();
  // 'connect' is TCP's (a TLS socket emits it before its handshake, which headerTimeoutMs bounds).
  sock.once('connect', () => clearTimeout(t));
  sock.once('close', () => clearTimeout(t));
}

/**
 * Opening carriers (the kernel's tcp_connect.c): the smaller address connects from a source port
 * that names the path; the larger one only pokes the smaller side, which answers by connecting.
 */
export class TcpConnector {
  /** Rotating group for cp_index-encoded source ports (spec §3.6). */
  private portGroup = 0;

  constructor(
    private readonly ctx: TcpShared,
    private readonly receiver: TcpReceiver,
    private readonly rails?: TcpRails,
  ) {}

  /**
   * Opens a carrier (plain or TLS); `ready` fires once it can carry RDS frames. A plain carrier
   * reads straight into the reader's slabs through `received` (net's onread; `slab` is then true).
   */
  private dialSocket(
    laddr: string,
    faddr: string,
    localPort?: number,
    reader?: FrameReader,
    received?: (n: number) => void,
  ): { sock: Socket; ready: string; slab: boolean } {
    const opts = {
      ...this.target(laddr, faddr),
      localAddress: laddr,
      ...(localPort === undefined ? {} : { localPort }),
    };
    const topts = this.ctx.topts;
    if (topts.tls) {
      // Authenticate the peer by the shared CA; RDS peers are addressed by IP, not by name.
      const sock = tls.connect({
        ...opts,
        ...topts.tls,
        rejectUnauthorized: true,
        checkServerIdentity: () => undefined,
      });
      sock.on('error', (e: NodeJS.ErrnoException) => {
        if (!e.code?.startsWith('E')) this.ctx.host.counters.add(RDS_CTR.conn_refused_tls);
      });
      return { sock, ready: 'secureConnect', slab: false };
    }
    if (reader === undefined || received === undefined) return { sock: connect(opts), ready: 'connect', slab: false };
    return { sock: connect({ ...opts, onread: slabOnread(reader, received) }), ready: 'connect', slab: true };
  }

  private target(laddr: string, faddr: string): { host: string; port: number } {
    const port = this.ctx.host.options.tcpPort;
    return this.ctx.topts.dial?.(laddr, faddr, port) ?? { host: faddr, port };
  }

  /** connPathConnect: the path is CONNECTING. */
  connect(cp: TransportPath): void {
    const conn = cp.conn;
    // A rail path dials over its own address pair, with the rail hello first (tcp-rail.ts).
    const rail = railOf(cp);
    if (rail !== null && this.rails !== undefined) {
      this.rails.connect(cp, rail);
      return;
    }
    const tp = tcpPath(cp);
    const host = this.ctx.host;
    if (!conn.isInitiator) {
      // The larger address never keeps a connection it opened: it only pokes the smaller side,
      // which answers by connecting to us (spec §2.2). Lanes > 0 are poked only when lanes open on
      // demand; the poke's source port says which (port % 8, as SPORT_IDX), 0 for path 0.
      if (cp.index !== 0 && !conn.handshake.lazyLanes) {
        cp.connectFailed();
        return;
      }
      // A kernel, or a peer not yet known, gets its pokes from an ephemeral port, as before lanes
      // opened on demand (the kernel reads nothing into the port).
      const port = conn.handshake.peer === 'rds-socket' ? this.pokePort(cp.index) : undefined;
      const { sock: poke, ready } = this.dialSocket(conn.laddr, conn.faddr, port);
      this.ctx.track(poke);
      tp.pokeSent(poke);
      let delivered = false;
      boundConnect(this.ctx, poke, () => !delivered);
      poke.once(ready, () => {
        host.counters.add(RDS_CTR.conn_poke_sent);
        delivered = true;
        if (this.ctx.topts.tls) {
          // A TLS client finishes its handshake before the server has checked our certificate:
          // closing now would look like a failed handshake. The acceptor closes a verified poke.
          const t = setTimeout(() => poke.destroy(), host.options.headerTimeoutMs);
          t.unref();
          poke.once('close', () => clearTimeout(t));
          return;
        }
        // As the kernel: the poke reached ESTABLISHED, so the path goes ERROR and is torn down.
        if (tp.pokeEnded(poke)) {
          poke.destroy();
          cp.drop('poke delivered');
        } else {
          poke.destroy();
        }
      });
      poke.on('error', () => {});
      poke.once('close', () => {
        if (tp.pokeEnded(poke)) {
          if (delivered) cp.drop('poke delivered');
          else cp.connectFailed();
        }
      });
      return;
    }
    this.connectFrom(cp, 0);
  }

  /** A source port for a poke for path `index`: port % 8 == index, from a rotating group. */
  private pokePort(index: number): number {
    const [lo, hi] = localPortRange();
    const groups = Math.max(1, Math.floor((hi - lo + 1) / 8));
    return lo + 8 * (this.portGroup++ % groups) + index;
  }

  /**
   * The initiator picks a TCP source port with port % 8 == path index (and says so with
   * SPORT_IDX), so the acceptor pairs each connection with the same path after any reconnect.
   */
  private connectFrom(cp: TransportPath, attempt: number): void {
    const conn = cp.conn;
    const tp = tcpPath(cp);
    const [lo, hi] = localPortRange();
    const groups = Math.max(1, Math.floor((hi - lo + 1) / 8));
    const group = (this.portGroup++ + attempt * 7919) % groups;
    const localPort = lo + 8 * group + cp.index;
    // The initiator's carrier is identified from the start: its frames go straight up.
    const host = this.ctx.host;
    // A frame that made the core drop this carrier ends it: the rest of the same read is not taken
    // (a lane that met a restarted peer carries what that peer numbered for its path 0).
    let mine: Socket | null = null;
    const reader = new FrameReader((h, p) => {
      if (mine !== null && tp.slot.is(mine)) host.recvIncoming(cp, h, p);
    });
    let received = (_n: number): void => {};
    const { sock, ready, slab } = this.dialSocket(conn.laddr, conn.faddr, localPort, reader, (n) => received(n));
    mine = sock;
    this.ctx.track(sock);
    let connected = false;
    sock.once('error', (err: NodeJS.ErrnoException) => {
      // Port taken, or the 4-tuple (an older connection from this port to the peer, in FIN-WAIT
      // or TIME-WAIT: a previous life's, numbered from the same first group): try the next group
      // at once, as the kernel does. Given up, a dial a kernel's single poke asked for is never
      // made again (test/connect-port-taken.test.ts).
      const taken = err.code === 'EADDRINUSE' || (err.code === 'EADDRNOTAVAIL' && err.syscall === 'connect');
      if (!connected && taken && attempt < 64 && tp.slot.is(sock)) {
        tp.abandon();
        sock.destroy();
        this.connectFrom(cp, attempt + 1);
      }
    });
    received = this.receiver.attachCarrier(cp, sock, reader, slab);
    boundConnect(this.ctx, sock, () => !connected && tp.slot.is(sock));
    sock.once(ready, () => {
      connected = true;
      if (tp.slot.is(sock)) cp.connectComplete();
    });
  }
}
