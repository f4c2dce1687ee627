import { createServer, Socket, type Server } from 'node:net';
import * as tls from 'node:tls';
import { compareAddresses } from '../core/address.js';
import type { TransportConn } from '../core/transport-path.js';
import type { TransportPath } from '../core/transport-path.js';
import { RDS_CTR } from '../core/stats.js';
import { RdsError } from '../errors.js';
import { FrameReader } from '../wire/frame-reader.js';
import { KNOWN_PEER_UNIDENTIFIED, type AdmissionSlot, type TcpAdmission } from './tcp-admission.js';
import { KEEPALIVE_MS, tcpPath, type TcpShared } from './tcp-carrier.js';
import { peerOf, refuse, turnReads, withSlabReads } from './tcp-socket.js';
import type { TcpReceiver } from './tcp-recv.js';
import type { TcpRails } from './tcp-rail.js';
import { RDS_CONN_UP } from '../constants.js';
import { carrierMovedAway, carrierWaiting, replaceCarrier, stillUsable } from './tcp-replace.js';

/**
 * Accepting carriers (the kernel's tcp_listen.c): one listener per local address; the allowlist,
 * pokes and the connection limits are applied before any per-peer state or TLS; an admitted
 * connection becomes the carrier of the path its source port names.
 */
export class TcpListener {
  private readonly listeners = new Map<string, Promise<Server>>();
  /** With TLS: completes handshakes of connections the plain listeners admitted (never listens). */
  private tlsServer: tls.Server | null = null;
  /** Admitted connections whose TLS handshake is under way, by their TCP socket. */
  private readonly handshaking = new WeakMap<Socket, { slot: AdmissionSlot; local: string; remote: string }>();
  /** Accepted carriers, each with how it moves to another path (carrierToLane). */
  private readonly lanes = new WeakMap<Socket, (to: TransportPath) => boolean>();

  constructor(
    private readonly ctx: TcpShared,
    private readonly admission: TcpAdmission,
    private readonly receiver: TcpReceiver,
    private readonly rails?: TcpRails,
  ) {}

  laddrCheck(laddr: string): Promise<void> {
    let p = this.listeners.get(laddr);
    if (p === undefined) {
      p = this.listen(laddr);
      this.listeners.set(laddr, p);
      p.catch(() => this.listeners.delete(laddr));
    }
    return p.then(() => undefined);
  }

  /**
   * TLS handshakes run on a tls.Server that never listens: connections reach it (its 'connection'
   * event) only after the plain listener has applied the allowlist and the limits, so a stranger
   * holding idle connections or half-done handshakes gets no more than an unidentified slot.
   */
  private tlsHandshaker(): tls.Server {
    if (this.tlsServer === null) {
      const host = this.ctx.host;
      this.tlsServer = tls.createServer(
        {
          ...this.ctx.topts.tls,
          requestCert: true,
          rejectUnauthorized: true,
          handshakeTimeout: host.options.headerTimeoutMs,
        },
        (s) => this.acceptSecure(s),
      );
      // Failed and timed-out handshakes: Node leaves the socket open when someone listens here.
      // A peer that hung up mid-handshake was not refused (the larger side drops a poke still in
      // flight once our connection reaches it): not counted.
      this.tlsServer.on('tlsClientError', (err: NodeJS.ErrnoException, s) => {
        if (err.code !== 'ECONNRESET' && err.code !== 'EPIPE') host.counters.add(RDS_CTR.conn_refused_tls);
        refuse(s);
      });
    }
    return this.tlsServer;
  }

  private listen(laddr: string): Promise<Server> {
    const port = this.ctx.host.options.tcpPort;
    return new Promise<Server>((resolve, reject) => {
      const server: Server = createServer(
        { noDelay: true, keepAlive: true, keepAliveInitialDelay: KEEPALIVE_MS, pauseOnConnect: true },
        (s) => this.accept(s),
      );
      server.once('error', (err: NodeJS.ErrnoException) => {
        if (err.code === 'EADDRINUSE') {
          reject(
            new RdsError(
              'EADDRINUSE',
              `TCP port ${port} on ${laddr} is already in use (another rds-socket stack, or the kernel's rds_tcp module); give this stack another one with new RdsStack({ tcpPort })`,
              { cause: err },
            ),
          );
        } else if (err.code === 'EADDRNOTAVAIL') {
          reject(new RdsError('EADDRNOTAVAIL', `${laddr} is not an address of this host`, { cause: err }));
        } else {
          reject(new RdsError('EADDRNOTAVAIL', `cannot listen on ${laddr}:${port}: ${err.message}`, { cause: err }));
        }
      });
      server.listen({ host: laddr, port, exclusive: true, backlog: 64 }, () => {
        server.on('error', (err) => this.ctx.host.emit('error', err));
        if (!this.ctx.ref) server.unref();
        resolve(server);
      });
    });
  }

  /**
   * A TCP connection reached a listener (paused, nothing read yet). Everything that costs nothing
   * is checked here, before any per-peer state or TLS: the allowlist on the source address, a
   * local source, pokes (plain TCP), and the limits. Known peers (see TransportConn.isKnownPeer)
   * bypass the shared pool of unidentified slots, so a flood of strangers cannot lock them out.
   */
  private accept(raw: Socket): void {
    const host = this.ctx.host;
    const adm = this.admission;
    this.ctx.track(raw);
    raw.on('error', () => {});
    const { local, remote } = peerOf(raw);
    if (local === null || remote === null || this.ctx.closed) {
      refuse(raw);
      return;
    }
    if (!host.peerAllowed(remote)) {
      host.counters.add(RDS_CTR.conn_refused_allowlist);
      refuse(raw);
      return;
    }
    if (host.isLocalAddress(remote)) {
      // Local destinations use the loopback transport; a TCP connection from one is not ours.
      host.counters.add(RDS_CTR.conn_refused_local_peer);
      refuse(raw);
      return;
    }
    const { maxConnections, maxUnidentifiedConnections } = host.options;
    if (this.rails !== undefined && !this.ctx.topts.tls && host.rails.declared(local, remote)) {
      // A rail's connection (either address order): the rail hello says whose and which path.
      if (adm.carriers >= maxConnections || adm.unidentified >= maxUnidentifiedConnections) {
        host.counters.add(RDS_CTR.conn_refused_limit);
        refuse(raw);
        return;
      }
      this.rails.accept(raw, local, remote, adm.takeSlot(null));
      return;
    }
    const conn = host.findConn(local, remote, this.ctx.transport);
    const known = conn?.isKnownPeer();
    if (!this.ctx.topts.tls && compareAddresses(remote, local) > 0) {
      // A plain poke holds nothing: answered (or refused) and reset at once. A stranger's poke
      // makes a connection record and has us dial, so it meets the limits like a connection.
      if (!known && (adm.unidentified >= maxUnidentifiedConnections || adm.carriers >= maxConnections)) {
        host.counters.add(RDS_CTR.conn_refused_limit);
        refuse(raw);
        return;
      }
      const port = raw.remotePort ?? 0;
      refuse(raw);
      this.pokeReceived(local, remote, port);
      return;
    }
    const peerSlots = known ? adm.knownSlots(remote) : 0;
    if (
      adm.carriers >= maxConnections ||
      (known
        ? peerSlots >= KNOWN_PEER_UNIDENTIFIED && adm.unidentified >= maxUnidentifiedConnections
        : adm.unidentified >= maxUnidentifiedConnections)
    ) {
      host.counters.add(RDS_CTR.conn_refused_limit);
      refuse(raw);
      return;
    }
    const slot = adm.takeSlot(known && peerSlots < KNOWN_PEER_UNIDENTIFIED ? remote : null);
    if (this.ctx.topts.tls) {
      this.handshaking.set(raw, { slot, local, remote });
      raw.once('close', () => adm.freeSlot(slot));
      this.tlsHandshaker().emit('connection', raw);
      return;
    }
    this.admit(raw, local, remote, slot);
  }

  /** A TLS handshake the limits let start has finished, with a certificate from our CA. */
  private acceptSecure(sock: tls.TLSSocket): void {
    sock.on('error', () => {});
    const raw = (sock as unknown as { _parent?: unknown })._parent;
    const pending = raw instanceof Socket ? this.handshaking.get(raw) : undefined;
    if (pending === undefined || this.ctx.closed || !pending.slot.open) {
      refuse(sock);
      return;
    }
    this.handshaking.delete(raw as Socket);
    // The carrier is the TLS socket from now on (close() ends it, not the TCP socket under it).
    this.ctx.sockets.delete(raw as Socket);
    this.ctx.track(sock);
    sock.once('close', () => this.admission.freeSlot(pending.slot));
    if (compareAddresses(pending.remote, pending.local) > 0) {
      // An authenticated poke: close it for the peer (its client side waits for that) and connect.
      const port = (raw as Socket).remotePort ?? 0;
      this.admission.freeSlot(pending.slot);
      refuse(sock);
      this.pokeReceived(pending.local, pending.remote, port);
      return;
    }
    this.admit(sock, pending.local, pending.remote, pending.slot);
  }

  /**
   * The peer (larger address) has something for us and we are the one who must connect: at once,
   * whatever backoff was running, so its messages (and ours for it) need not wait.
   */
  private pokeReceived(local: string, remote: string, port: number): void {
    this.ctx.host.counters.add(RDS_CTR.conn_poke_received);
    const conn = this.ctx.host.connFor(local, remote, this.ctx.transport);
    conn.path(0)!.connectNow();
    // A peer whose lanes open on demand pokes for lane port % 8 when it has messages for it.
    const i = port % 8;
    if (i > 0 && conn.handshake.lazyLanes && i < conn.npaths) conn.path(i)!.pokedFor();
  }

  /** An admitted connection from a smaller address: it becomes a path's carrier. */
  private admit(sock: Socket, local: string, remote: string, slot: AdmissionSlot): void {
    const host = this.ctx.host;
    const conn = host.connFor(local, remote, this.ctx.transport);
    const cp = pathForAccepted(conn, sock.remotePort ?? 0);
    if (cp === null) {
      host.counters.add(RDS_CTR.tcp_accept_no_free_path);
      this.admission.freeSlot(slot);
      refuse(sock);
      return;
    }
    this.handOver(conn, sock, slot, cp, false);
  }

  /**
   * `sock` becomes `cp`'s carrier. Simultaneous or replacement connection: the newest carrier
   * wins, once the old one has been read to its end (tcp-replace.ts); until then this one stays
   * paused, nothing of it read. The path was chosen when the connection came, and by its turn the
   * handshake may have settled the path count and the peer's pairing by source port: a 7.x kernel
   * redialling its lanes to a node that just started had a lane's connection, accepted for path 0
   * while nothing was known, take path 0 over a second later, when the kernel was known to pair
   * by port; path 0's messages went on it and the kernel read them there and again on its real
   * path 0 (the 1200 s replay, session 26). So the port is asked again at the turn: the
   * connection goes where it names now (once), or is refused.
   */
  private handOver(conn: TransportConn, sock: Socket, slot: AdmissionSlot, cp: TransportPath, moved: boolean): void {
    const host = this.ctx.host;
    const tp = tcpPath(cp);
    const poke = tp.poke;
    if (poke !== null && tp.pokeEnded(poke)) {
      poke.destroy();
      host.counters.add(RDS_CTR.conn_poke_superseded);
    }
    replaceCarrier(this.ctx, cp, () => {
      if (!stillUsable(this.ctx, sock)) {
        this.admission.freeSlot(slot);
        refuse(sock);
        return;
      }
      const named = pathByPort(conn, sock.remotePort ?? 0);
      if (named !== undefined && named !== cp) {
        if (named === null || moved) {
          host.counters.add(RDS_CTR.tcp_accept_no_free_path);
          this.admission.freeSlot(slot);
          refuse(sock);
          return;
        }
        host.counters.add(RDS_CTR.accept_moved_by_port);
        this.handOver(conn, sock, slot, named, true);
        return;
      }
      this.takeCarrier(cp, sock, slot);
    });
  }

  /** `sock` (accepted, paused) becomes the carrier of `cp`. */
  private takeCarrier(cp: TransportPath, sock: Socket, slot: AdmissionSlot): void {
    const host = this.ctx.host;
    // The path the carrier feeds: `cp`, until the core moves the carrier to the lane it is
    // (carrierToLane); the frame that moved it is then handed to that lane, and so is the rest of
    // the same read. A frame that made the core drop the carrier ends it: nothing more is taken.
    let at = cp;
    let atSlot = tcpPath(cp).slot;
    let mine: Socket | null = null;
    const reader = new FrameReader((h, p) => {
      for (let turn = 0; turn < 2 && mine !== null && atSlot.is(mine); turn++) {
        const was = at;
        host.recvIncoming(at, h, p);
        if (at === was) return;
      }
    });
    let received = (_n: number): void => {};
    const slabSock = this.ctx.topts.tls ? null : withSlabReads(sock, reader, (n) => received(n));
    const carrier = slabSock ?? sock;
    mine = carrier;
    if (slabSock !== null) this.ctx.track(slabSock);
    const attach = (p: TransportPath, moved: boolean): void => {
      if (slabSock !== null) received = this.receiver.attachCarrier(p, slabSock, reader, true, slot);
      else this.receiver.attachCarrier(p, sock, reader, false, slot);
      // A moved carrier may have been paused for the path it left (its receive limits, a read turn).
      if (p.readPaused) return;
      if (slabSock === null || moved) carrier.resume();
      if (moved) turnReads(carrier, slabSock !== null, true);
    };
    this.lanes.set(carrier, (to) => {
      const tt = tcpPath(to);
      if (tt.sock !== null || carrierWaiting(tt) || !atSlot.is(carrier)) return false;
      // The path that took it forgets it without closing it (its drop then finds no carrier).
      const from = at;
      tcpPath(from).shutdown();
      at = to;
      atSlot = tt.slot;
      attach(to, true);
      // Connections that waited behind it on the path it left go now, once the frame that moved
      // it has settled the pairing (they are then paired by their ports).
      queueMicrotask(() => carrierMovedAway(this.ctx, from));
      return true;
    });
    attach(cp, false);
    cp.connectComplete();
  }

  /**
   * The carrier of `cp`, a connection this side accepted, is another lane's (Handshake.misplacedLane):
   * it goes on, unclosed, as the carrier of `to`, whose connectComplete the core calls. Closing it
   * would lose what our TCP already acknowledged on it and the node has not read yet, which a
   * kernel has released as delivered. False when `to` has a carrier (or one waiting for it) or
   * `cp`'s carrier was not accepted here: the core drops it instead.
   */
  carrierToLane(cp: TransportPath, to: TransportPath): boolean {
    const sock = tcpPath(cp).sock;
    const move = sock === null ? undefined : this.lanes.get(sock);
    return move?.(to) === true;
  }

  /** Applies the transport's setRef (TcpShared.ref) to the listeners. */
  syncRef(): void {
    for (const p of this.listeners.values())
      p.then(
        (s) => (this.ctx.ref ? s.ref() : s.unref()),
        () => {},
      );
  }

  /** Stops listening: resolves once every accepted connection is gone too (see TcpTransport.close). */
  async closeAll(): Promise<Promise<void>[]> {
    const servers = await Promise.allSettled([...this.listeners.values()]);
    return servers.map((r) =>
      r.status === 'fulfilled' ? new Promise<void>((res) => r.value.close(() => res())) : Promise.resolve(),
    );
  }
}

/**
 * Which path an accepted connection serves. With SPORT_IDX: source port % npaths, the same path
 * after every reconnect, replacing a carrier still there (a duel). Otherwise, as kernels up to
 * 6.19: the first path in [0, max(1, npaths)) without a live carrier.
 *
 * With one path that is up, a new connection replaces its carrier: the peer connects only once
 * it has given up the previous connection (whose FIN or RST may have been lost), and the new
 * one may already hold data our TCP has acknowledged, which a kernel sender has released
 * (spec §2.4): resetting it would lose those messages. Only a connection from a source port
 * that names another lane (SPORT_IDX peers) is refused: a lane that arrives before the path
 * count is known is never mistaken for path 0. With several paths and no free one, the
 * connection is reset and the initiator retries.
 */
/**
 * What the peer's source port says of an accepted carrier: the path it names (the peer pairs by
 * port and the count is settled), null when it must be refused, undefined when it says nothing yet.
 */
function pathByPort(conn: TransportConn, srcPort: number): TransportPath | null | undefined {
  const n = conn.npaths;
  if (n > 1 && conn.handshake.sportIdx) return conn.path(srcPort % n)!;
  // A peer seen to pair carriers by source port whose path count is not settled yet: a lane's
  // carrier is refused (its initiator redials it), never taken for path 0 again (Handshake.pairsByPort).
  if (n <= 1 && conn.handshake.pairsByPort && srcPort % 8 !== 0) return null;
  return undefined;
}

function pathForAccepted(conn: TransportConn, srcPort: number): TransportPath | null {
  const named = pathByPort(conn, srcPort);
  if (named !== undefined) return named;
  const n = conn.npaths;
  for (let i = 0; i < Math.max(1, n); i++) {
    const p = conn.path(i)!;
    if (p.state !== RDS_CONN_UP) return p;
  }
  if (n <= 1 && (!conn.handshake.sportIdx || srcPort % 8 === 0)) return conn.path(0)!;
  return null;
}
