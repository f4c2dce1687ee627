import { readFileSync } from 'node:fs';
import { createServer, connect, Socket, type OnReadOpts, type Server, type SocketConstructorOpts } from 'node:net';
import * as tls from 'node:tls';
import {
  RDS_CONN_CONNECTING, RDS_CONN_UP, RDS_TRANS_TCP,
} from '../constants.js';
import { RdsError } from '../errors.js';
import { canonicalAddress, compareAddresses } from '../core/address.js';
import type { RdsConnPath } from '../core/path.js';
import type { RdsOutgoing } from '../core/message.js';
import type { RdsTransportHost } from '../core/stack.js';
import type { RdsTransport } from '../core/transport.js';
import { encodeCongUpdate } from '../wire/header.js';
import { FrameReader } from '../wire/frame-reader.js';
import { Fifo } from '../core/fifo.js';
import { CarrierKind } from '../core/carrier.js';
import type { RdsConnection } from '../core/connection.js';
import { native } from '../native.js';
import { RDS_CTR } from '../core/stats.js';
import { PartialFrameBudget } from './partial-frames.js';

/** Per-path state: the carrier socket and its reassembly. */
interface TcpPath {
  sock: Socket | null;
  reader: FrameReader | null;
  /** The larger side's short-lived poke connection, if one is in flight. */
  poke: Socket | null;
  /** Source-port attempts for the current connect. */
  portTries: number;
  /** Bytes written to this carrier, and how many of them the kernel has taken. */
  wrote: number;
  flushed: number;
  /** Messages on this carrier waiting for TCP's acknowledgement: stream offset of their last byte. */
  track: Fifo<{ end: number; seq: number }>;
  /**
   * -1 until the peer's first frame arrived on this carrier, then `wrote` at that moment. A peer
   * that releases on TCP acknowledgement (a kernel) has that acknowledgement count only once it
   * covers a byte written after this point: see releaseAcked.
   */
  provenAt: number;
  outqTimer: NodeJS.Timeout | null;
  outqDelay: number;
  /**
   * Frames of the current batch not yet handed to the socket: `run` is the first, and the run
   * extends to `runEnd` (an offset in run.buffer) while each next frame follows in memory.
   */
  run: Buffer | null;
  runEnd: number;
  /** Inside a transmit batch, and whether the socket was corked for it. */
  inBatch: boolean;
  corked: boolean;
  /** The core stopped reading this path (receive queue limit); outlives a carrier change. */
  held: boolean;
  /** The current carrier waits for room in the partial-frame budget. */
  waiting: boolean;
  /** The current carrier's reading resumed: restart its frame clocks. */
  onResume: (() => void) | null;
}

/** Polling for TCP acknowledgements backs off from 1 ms to this while messages wait. */
const OUTQ_POLL_MAX_MS = 50;

const KEEPALIVE_MS = 5000;
/** How long a graceful close waits for the peer's FIN before resetting. */
const CLOSE_LINGER_MS = 2000;

/** The TCP transport's carrier object of a path. */
const TCP_CARRIER = new CarrierKind<TcpPath>('tcp', () => ({
  sock: null, reader: null, poke: null, portTries: 0, wrote: 0, flushed: 0, track: new Fifo(), provenAt: -1, outqTimer: null,
  outqDelay: 1, run: null, runEnd: 0, inBatch: false, corked: false, held: false, waiting: false, onResume: null,
}));

function tcpPath(cp: RdsConnPath): TcpPath {
  return cp.carrier(TCP_CARRIER);
}

/** net.ipv4.ip_local_port_range, with the low end rounded up to a multiple of 8. */
let portRange: [number, number] | null = null;
function localPortRange(): [number, number] {
  if (portRange === null) {
    let lo = 32768;
    let hi = 60999;
    try {
      const [a, b] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
      if (a! > 0 && b! >= a!) [lo, hi] = [a!, b!];
    } catch { /* not Linux: use the default range */ }
    portRange = [Math.ceil(lo / 8) * 8, hi];
  }
  return portRange;
}

function socketFd(sock: Socket): number {
  const fd = (sock as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : -1;
}

/** net's onread options that read into `reader`'s slabs and hand each read's length to `received`. */
function slabOnread(reader: FrameReader, received: (n: number) => void): OnReadOpts {
  return { buffer: () => reader.readBuffer(), callback: (n: number): boolean => { received(n); return true; } };
}

/**
 * Node offers slab reads (`onread`) only to sockets it connects, never to ones a server accepts.
 * An accepted socket (taken paused, so nothing has been read) hands its handle to a new Socket
 * that reads into `reader`'s slabs, as initiated carriers do. The handle is net's private
 * `_handle`; where this Node has none the accepted socket is returned and the caller reads 'data'.
 */
function withSlabReads(sock: Socket, reader: FrameReader, received: (n: number) => void): Socket | null {
  const s = sock as unknown as { _handle?: { readStart?: unknown } | null };
  const handle = s._handle;
  if (handle === null || handle === undefined || typeof handle.readStart !== 'function') return null;
  s._handle = null;
  // With no handle, destroy() only settles the old stream and the server's connection count.
  sock.destroy();
  return new Socket({ handle, onread: slabOnread(reader, received) } as SocketConstructorOpts);
}

/**
 * Ends a connection we refuse or give up on, with a reset where possible (no TIME_WAIT, the peer
 * learns at once). Never throws: it runs inside event handlers, where a throw kills the process.
 * A TLS socket has no TCP handle of its own (resetAndDestroy throws ERR_INVALID_HANDLE_TYPE on
 * it) and is only destroyed: resetting the TCP socket under a live TLS layer crashes Node 20
 * (segmentation fault). Connections refused before their handshake are plain and are reset.
 */
function refuse(sock: Socket): void {
  try {
    if (sock instanceof tls.TLSSocket || sock.destroyed) sock.destroy();
    else sock.resetAndDestroy();
  } catch {
    sock.destroy();
  }
}

/**
 * An accepted connection's place in the limits: it counts towards maxConnections until it
 * closes, and towards maxUnidentifiedConnections (and, for a known peer, its own allowance)
 * until its first complete frame.
 */
interface AdmissionSlot {
  open: boolean;
  identified: boolean;
  /** The known peer whose allowance this slot uses, or null. */
  knownPeer: string | null;
}

/** Unidentified connections one known peer may hold beyond the shared pool (its lanes, reconnects). */
const KNOWN_PEER_UNIDENTIFIED = 16;

function peerOf(sock: Socket): { local: string | null; remote: string | null } {
  const strip = (a: string | undefined): string | null => {
    if (a === undefined) return null;
    return canonicalAddress(a.startsWith('::ffff:') && a.includes('.') ? a.slice(7) : a);
  };
  return { local: strip(sock.localAddress), remote: strip(sock.remoteAddress) };
}

/**
 * RDS over TCP, wire-compatible with net/rds/tcp*.c: one listener per local address on the RDS/TCP
 * port, the numerically smaller address connects, the larger one only pokes, and the byte stream is
 * a plain sequence of [48-byte header][payload] records.
 */
export interface TcpTransportOptions {
  /**
   * TLS with mutual certificate authentication between rds-socket nodes: key, cert and the ca
   * that signed every node's certificate (node:tls SecureContextOptions). Peers must present a
   * certificate from that ca; the chain is checked, not host names. Off by default: a kernel
   * speaks plain RDS/TCP. The allowlist and connection limits apply to the TCP connection before
   * the handshake, which must finish within headerTimeoutMs.
   */
  tls?: tls.SecureContextOptions;
  /**
   * Where to connect for a peer: by default (peer, stack tcpPort). Tests and the soak use it to
   * route a connection through a fault-injecting proxy.
   */
  dial?: (laddr: string, faddr: string, port: number) => { host: string; port: number };
}

export class TcpTransport implements RdsTransport {
  readonly name = 'tcp';
  readonly transType = RDS_TRANS_TCP;
  readonly mpathCapable = true;
  readonly userSelectable = true;
  private host!: RdsTransportHost;
  /** Rotating group for cp_index-encoded source ports (spec §3.6). */
  private portGroup = 0;
  private readonly listeners = new Map<string, Promise<Server>>();
  private readonly sockets = new Set<Socket>();
  private ref = false;
  private closed = false;
  /** Live carriers, and accepted ones that have not yet sent a complete frame. */
  private carriers = 0;
  private unidentified = 0;
  /** Frames in progress on every carrier, bounded by maxPartialFrameBytes. */
  private partial!: PartialFrameBudget;
  /** Unidentified connections per known peer (see KNOWN_PEER_UNIDENTIFIED). */
  private readonly knownUnidentified = new Map<string, number>();
  /** With TLS: completes handshakes of connections the plain listeners admitted (never listens). */
  private tlsServer: tls.Server | null = null;
  /** Admitted connections whose TLS handshake is under way, by their TCP socket. */
  private readonly handshaking = new WeakMap<Socket, { slot: AdmissionSlot; local: string; remote: string }>();

  constructor(private readonly topts: TcpTransportOptions = {}) {}

  /**
   * Opens a carrier (plain or TLS); `ready` fires once it can carry RDS frames. A plain carrier
   * reads straight into the reader's slabs through `received` (net's onread; `slab` is then true).
   */
  private dialSocket(laddr: string, faddr: string, localPort?: number, reader?: FrameReader, received?: (n: number) => void): { sock: Socket; ready: string; slab: boolean } {
    const opts = { ...this.target(laddr, faddr), localAddress: laddr, ...(localPort === undefined ? {} : { localPort }) };
    if (this.topts.tls) {
      // Authenticate the peer by the shared CA; RDS peers are addressed by IP, not by name.
      const sock = tls.connect({ ...opts, ...this.topts.tls, rejectUnauthorized: true, checkServerIdentity: () => undefined });
      sock.on('error', (e: NodeJS.ErrnoException) => {
        if (!e.code?.startsWith('E')) this.host.counters.add(RDS_CTR.conn_refused_tls);
      });
      return { sock, ready: 'secureConnect', slab: false };
    }
    if (reader === undefined || received === undefined) return { sock: connect(opts), ready: 'connect', slab: false };
    return { sock: connect({ ...opts, onread: slabOnread(reader, received) }), ready: 'connect', slab: true };
  }

  private target(laddr: string, faddr: string): { host: string; port: number } {
    const port = this.host.options.tcpPort;
    return this.topts.dial?.(laddr, faddr, port) ?? { host: faddr, port };
  }

  attach(host: RdsTransportHost): void {
    this.host = host;
    this.partial = new PartialFrameBudget(host.options.maxPartialFrameBytes);
  }

  /** Declared payload bytes of the frames in progress on every carrier (at most maxPartialFrameBytes). */
  get partialFrameBytes(): number {
    return this.partial.held;
  }

  rxPause(cp: RdsConnPath): void {
    const tp = tcpPath(cp);
    tp.held = true;
    this.syncPause(cp, tp);
  }

  rxResume(cp: RdsConnPath): void {
    const tp = tcpPath(cp);
    tp.held = false;
    this.syncPause(cp, tp);
  }

  /**
   * Reads the carrier or not, as the receive limits say. A paused socket stops reading (readStop),
   * so the kernel's receive buffer fills and TCP's window closes on the sender.
   */
  private syncPause(cp: RdsConnPath, tp: TcpPath): void {
    const want = tp.held || tp.waiting;
    if (want === cp.readPaused) return;
    cp.setReadPaused(want);
    if (tp.reader !== null) tp.reader.holdGrowth = want;
    const sock = tp.sock;
    if (sock === null) return;
    if (want) {
      sock.pause();
    } else {
      sock.resume();
      tp.onResume?.();
    }
  }

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
      this.tlsServer = tls.createServer({
        ...this.topts.tls, requestCert: true, rejectUnauthorized: true, handshakeTimeout: this.host.options.headerTimeoutMs,
      }, (s) => this.acceptSecure(s));
      // Failed and timed-out handshakes: Node leaves the socket open when someone listens here.
      // A peer that hung up mid-handshake was not refused (the larger side drops a poke still in
      // flight once our connection reaches it): not counted.
      this.tlsServer.on('tlsClientError', (err: NodeJS.ErrnoException, s) => {
        if (err.code !== 'ECONNRESET' && err.code !== 'EPIPE') this.host.counters.add(RDS_CTR.conn_refused_tls);
        refuse(s);
      });
    }
    return this.tlsServer;
  }

  private listen(laddr: string): Promise<Server> {
    const port = this.host.options.tcpPort;
    return new Promise<Server>((resolve, reject) => {
      const server: Server = createServer({ noDelay: true, keepAlive: true, keepAliveInitialDelay: KEEPALIVE_MS, pauseOnConnect: true }, (s) => this.accept(s));
      server.once('error', (err: NodeJS.ErrnoException) => {
        if (err.code === 'EADDRINUSE') {
          reject(new RdsError('EADDRINUSE', `TCP port ${port} on ${laddr} is already in use (another rds-socket stack, or the kernel's rds_tcp module); give this stack another one with new RdsStack({ tcpPort })`, { cause: err }));
        } else if (err.code === 'EADDRNOTAVAIL') {
          reject(new RdsError('EADDRNOTAVAIL', `${laddr} is not an address of this host`, { cause: err }));
        } else {
          reject(new RdsError('EADDRNOTAVAIL', `cannot listen on ${laddr}:${port}: ${err.message}`, { cause: err }));
        }
      });
      server.listen({ host: laddr, port, exclusive: true, backlog: 64 }, () => {
        server.on('error', (err) => this.host.emit('error', err));
        if (!this.ref) server.unref();
        resolve(server);
      });
    });
  }

  initiates(cp: RdsConnPath): boolean {
    return cp.conn.isInitiator;
  }

  private track(sock: Socket): void {
    this.sockets.add(sock);
    sock.once('close', () => this.sockets.delete(sock));
    if (!this.ref) sock.unref();
    sock.setNoDelay(true);
    sock.setKeepAlive(true, KEEPALIVE_MS);
    // The kernel's RDS/TCP keepalive: 5 s idle, 5 s between probes, 5 probes (dead peer ~30 s).
    // Node sets only the idle time; the addon sets the rest once the socket has a descriptor.
    const full = (): void => {
      const fd = socketFd(sock);
      const n = native();
      if (fd >= 0 && n !== null) {
        try {
          n.tcpKeepalive(fd, KEEPALIVE_MS / 1000, KEEPALIVE_MS / 1000, 5);
        } catch { /* keep Node's setting */ }
      }
    };
    if (socketFd(sock) >= 0) full();
    else sock.once('connect', full);
  }

  connPathConnect(cp: RdsConnPath): void {
    const conn = cp.conn;
    const tp = tcpPath(cp);
    if (!conn.isInitiator) {
      // The larger address never keeps a connection it opened: it only pokes the smaller side,
      // which answers by connecting to us (spec §2.2). Paths > 0 are never poked.
      if (cp.index !== 0) {
        cp.connectFailed();
        return;
      }
      const { sock: poke, ready } = this.dialSocket(conn.laddr, conn.faddr);
      this.track(poke);
      tp.poke = poke;
      let delivered = false;
      poke.once(ready, () => {
        this.host.counters.add(RDS_CTR.conn_poke_sent);
        delivered = true;
        if (this.topts.tls) {
          // A TLS client finishes its handshake before the server has checked our certificate:
          // closing now would look like a failed handshake. The acceptor closes a verified poke.
          const t = setTimeout(() => poke.destroy(), this.host.options.headerTimeoutMs);
          t.unref();
          poke.once('close', () => clearTimeout(t));
          return;
        }
        // As the kernel: the poke reached ESTABLISHED, so the path goes ERROR and is torn down.
        if (tp.poke === poke) {
          tp.poke = null;
          poke.destroy();
          cp.drop('poke delivered');
        } else {
          poke.destroy();
        }
      });
      poke.on('error', () => {});
      poke.once('close', () => {
        if (tp.poke === poke) {
          tp.poke = null;
          if (delivered) cp.drop('poke delivered');
          else cp.connectFailed();
        }
      });
      return;
    }
    this.connectFrom(cp, 0);
  }

  /**
   * The initiator picks a TCP source port with port % 8 == path index (and says so with
   * SPORT_IDX), so the acceptor pairs each connection with the same path after any reconnect.
   */
  private connectFrom(cp: RdsConnPath, attempt: number): void {
    const conn = cp.conn;
    const tp = tcpPath(cp);
    const [lo, hi] = localPortRange();
    const groups = Math.max(1, Math.floor((hi - lo + 1) / 8));
    const group = (this.portGroup++ + attempt * 7919) % groups;
    const localPort = lo + 8 * group + cp.index;
    // The initiator's carrier is identified from the start: its frames go straight up.
    const reader = new FrameReader((h, p) => this.host.recvIncoming(cp, h, p));
    let received = (_n: number): void => {};
    const { sock, ready, slab } = this.dialSocket(conn.laddr, conn.faddr, localPort, reader, (n) => received(n));
    this.track(sock);
    let connected = false;
    sock.once('error', (err: NodeJS.ErrnoException) => {
      // Port taken: try the next group at once, as the kernel does.
      if (!connected && err.code === 'EADDRINUSE' && attempt < 64 && tp.sock === sock) {
        tp.sock = null;
        tp.reader = null;
        sock.destroy();
        this.connectFrom(cp, attempt + 1);
      }
    });
    received = this.attachCarrier(cp, sock, reader, slab);
    sock.once(ready, () => {
      connected = true;
      if (tp.sock === sock) cp.connectComplete();
    });
  }

  /**
   * A TCP connection reached a listener (paused, nothing read yet). Everything that costs nothing
   * is checked here, before any per-peer state or TLS: the allowlist on the source address, a
   * local source, pokes (plain TCP), and the limits. Known peers (see RdsConnection.isKnownPeer)
   * bypass the shared pool of unidentified slots, so a flood of strangers cannot lock them out.
   */
  private accept(raw: Socket): void {
    this.track(raw);
    raw.on('error', () => {});
    const { local, remote } = peerOf(raw);
    if (local === null || remote === null || this.closed) {
      refuse(raw);
      return;
    }
    if (!this.host.peerAllowed(remote)) {
      this.host.counters.add(RDS_CTR.conn_refused_allowlist);
      refuse(raw);
      return;
    }
    if (this.host.isLocalAddress(remote)) {
      // Local destinations use the loopback transport; a TCP connection from one is not ours.
      this.host.counters.add(RDS_CTR.conn_refused_local_peer);
      refuse(raw);
      return;
    }
    const conn = this.host.findConn(local, remote, this);
    const known = conn !== undefined && conn.isKnownPeer();
    const { maxConnections, maxUnidentifiedConnections } = this.host.options;
    if (!this.topts.tls && compareAddresses(remote, local) > 0) {
      // A plain poke holds nothing: answered (or refused) and reset at once. A stranger's poke
      // makes a connection record and has us dial, so it meets the limits like a connection.
      if (!known && (this.unidentified >= maxUnidentifiedConnections || this.carriers >= maxConnections)) {
        this.host.counters.add(RDS_CTR.conn_refused_limit);
        refuse(raw);
        return;
      }
      refuse(raw);
      this.pokeReceived(local, remote);
      return;
    }
    const peerSlots = known ? this.knownUnidentified.get(remote) ?? 0 : 0;
    if (this.carriers >= maxConnections
      || (known ? peerSlots >= KNOWN_PEER_UNIDENTIFIED && this.unidentified >= maxUnidentifiedConnections
        : this.unidentified >= maxUnidentifiedConnections)) {
      this.host.counters.add(RDS_CTR.conn_refused_limit);
      refuse(raw);
      return;
    }
    const slot = this.takeSlot(known && peerSlots < KNOWN_PEER_UNIDENTIFIED ? remote : null);
    if (this.topts.tls) {
      this.handshaking.set(raw, { slot, local, remote });
      raw.once('close', () => this.freeSlot(slot));
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
    if (pending === undefined || this.closed || !pending.slot.open) {
      refuse(sock);
      return;
    }
    this.handshaking.delete(raw as Socket);
    // The carrier is the TLS socket from now on (close() ends it, not the TCP socket under it).
    this.sockets.delete(raw as Socket);
    this.track(sock);
    sock.once('close', () => this.freeSlot(pending.slot));
    if (compareAddresses(pending.remote, pending.local) > 0) {
      // An authenticated poke: close it for the peer (its client side waits for that) and connect.
      this.freeSlot(pending.slot);
      refuse(sock);
      this.pokeReceived(pending.local, pending.remote);
      return;
    }
    this.admit(sock, pending.local, pending.remote, pending.slot);
  }

  /**
   * The peer (larger address) has something for us and we are the one who must connect: at once,
   * whatever backoff was running, so its messages (and ours for it) need not wait.
   */
  private pokeReceived(local: string, remote: string): void {
    this.host.counters.add(RDS_CTR.conn_poke_received);
    this.host.connFor(local, remote, this).paths[0]!.connectNow();
  }

  private takeSlot(knownPeer: string | null): AdmissionSlot {
    this.carriers++;
    this.unidentified++;
    if (knownPeer !== null) this.knownUnidentified.set(knownPeer, (this.knownUnidentified.get(knownPeer) ?? 0) + 1);
    return { open: true, identified: false, knownPeer };
  }

  /** The connection sent its first complete frame: it no longer holds an unidentified slot. */
  private identifySlot(slot: AdmissionSlot): void {
    if (slot.identified) return;
    slot.identified = true;
    this.unidentified--;
    const p = slot.knownPeer;
    if (p !== null) {
      const n = (this.knownUnidentified.get(p) ?? 1) - 1;
      if (n > 0) this.knownUnidentified.set(p, n);
      else this.knownUnidentified.delete(p);
    }
  }

  /** Idempotent: the connection is gone. */
  private freeSlot(slot: AdmissionSlot): void {
    if (!slot.open) return;
    this.identifySlot(slot);
    slot.open = false;
    this.carriers--;
  }

  /** An admitted connection from a smaller address: it becomes a path's carrier. */
  private admit(sock: Socket, local: string, remote: string, slot: AdmissionSlot): void {
    const conn = this.host.connFor(local, remote, this);
    const cp = this.pathForAccepted(conn, sock.remotePort ?? 0);
    if (cp === null) {
      this.host.counters.add(RDS_CTR.tcp_accept_no_free_path);
      this.freeSlot(slot);
      refuse(sock);
      return;
    }
    const tp = tcpPath(cp);
    if (tp.poke !== null) {
      const poke = tp.poke;
      tp.poke = null;
      poke.destroy();
    }
    if (tp.sock !== null) {
      // Simultaneous or replacement connection: the newest carrier wins.
      this.host.counters.add(RDS_CTR.tcp_connect_raced);
      const old = tp.sock;
      tp.sock = null;
      old.destroy();
    }
    const reader = new FrameReader((h, p) => this.host.recvIncoming(cp, h, p));
    let received = (_n: number): void => {};
    const slabSock = this.topts.tls ? null : withSlabReads(sock, reader, (n) => received(n));
    if (slabSock !== null) {
      this.track(slabSock);
      received = this.attachCarrier(cp, slabSock, reader, true, slot);
    } else {
      this.attachCarrier(cp, sock, reader, false, slot);
      if (!cp.readPaused) sock.resume();
    }
    cp.connectComplete();
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
  private pathForAccepted(conn: RdsConnection, srcPort: number): RdsConnPath | null {
    const n = conn.npaths;
    if (n > 1 && conn.peerSportIdx) return conn.paths[srcPort % n]!;
    for (let i = 0; i < Math.max(1, n); i++) {
      const p = conn.paths[i]!;
      if (p.state !== RDS_CONN_UP) return p;
    }
    if (n <= 1 && (!conn.peerSportIdx || srcPort % 8 === 0)) return conn.paths[0]!;
    return null;
  }

  /**
   * Makes `sock` the path's carrier. Bytes arrive as 'data' chunks, or (slab) as counts of bytes
   * read into `reader`'s memory, which the returned function takes.
   */
  private attachCarrier(cp: RdsConnPath, sock: Socket, reader: FrameReader, slab: boolean, accepted?: AdmissionSlot): (n: number) => void {
    const tp = tcpPath(cp);
    tp.sock = sock;
    tp.run = null;
    tp.inBatch = tp.corked = false;
    tp.wrote = 0;
    tp.flushed = 0;
    tp.provenAt = -1;
    tp.track.drain();
    // An accepted carrier counts as unidentified until its first complete frame (its slot was
    // taken when it was admitted); one we initiated is identified from the start.
    const slot = accepted ?? this.takeSlot(null);
    if (accepted === undefined) this.identifySlot(slot);
    let identified = slot.identified;
    tp.reader = reader;
    tp.waiting = false;
    // A new carrier reads unless the core still holds the path (its queue is still over the limit).
    cp.setReadPaused(false);
    this.syncPause(cp, tp);
    let headerTimer: NodeJS.Timeout | null = null;
    const { headerTimeoutMs, frameTimeoutMs } = this.host.options;
    // The frame in progress (its header complete): its share of the partial-frame budget, which
    // frame it is (frames handed up before it), and when its clock started (0: none running).
    let charged = 0;
    let chargedFrame = -1;
    let frameStart = 0;
    let frameTimer: NodeJS.Timeout | null = null;
    let withdraw: (() => void) | null = null;
    const stopFrame = (): void => {
      frameStart = 0;
      if (charged > 0) {
        const n = charged;
        charged = 0;
        this.partial.give(n);
      }
    };
    const armFrameTimer = (ms: number): void => {
      if (frameTimer !== null) return;
      frameTimer = setTimeout(() => {
        frameTimer = null;
        if (tp.sock !== sock || frameStart === 0) return;
        // Our own pause stops the clock; onResume restarts it.
        if (cp.readPaused) return;
        const late = Date.now() - frameStart;
        if (late < frameTimeoutMs) {
          armFrameTimer(frameTimeoutMs - late);
          return;
        }
        this.host.counters.add(RDS_CTR.recv_drop_frame_timeout);
        this.host.reportProtocolError(cp, new Error(`frame payload not complete within ${frameTimeoutMs} ms`));
        refuse(sock);
        cp.drop('frame timeout');
      }, ms);
      frameTimer.unref();
    };
    /** After each read: charge a frame that has just begun, or wait (not reading) for room. */
    const trackFrame = (now: number): void => {
      const len = reader.partialPayload;
      if (len === 0) {
        if (frameStart !== 0) stopFrame();
        return;
      }
      if (frameStart !== 0 && chargedFrame === reader.frames) return; // the same frame, still coming
      stopFrame();
      chargedFrame = reader.frames;
      const share = len > PartialFrameBudget.FREE_BYTES ? len : 0;
      if (share === 0 || this.partial.tryTake(share)) {
        charged = share;
        frameStart = now;
        armFrameTimer(frameTimeoutMs);
        return;
      }
      this.host.counters.add(RDS_CTR.recv_pause_partial_limit);
      tp.waiting = true;
      this.syncPause(cp, tp);
      withdraw = this.partial.wait(len, () => {
        withdraw = null;
        charged = len; // given back by the close handler if this carrier is already replaced
        frameStart = Date.now();
        if (tp.sock !== sock) return;
        tp.waiting = false;
        this.syncPause(cp, tp);
      });
    };
    tp.onResume = () => {
      if (tp.sock !== sock) return;
      if (frameStart !== 0) {
        frameStart = Date.now();
        armFrameTimer(frameTimeoutMs);
      }
      checkHeader();
    };
    // An accepted connection must send a complete frame in time, or it only holds a slot.
    const identifyTimer = identified ? null : setTimeout(() => {
      if (identified || tp.sock !== sock) return;
      this.host.counters.add(RDS_CTR.recv_drop_header_timeout);
      refuse(sock);
      cp.drop('no frame from a new connection');
    }, headerTimeoutMs);
    identifyTimer?.unref();
    sock.once('close', () => {
      if (reader.frames > 0) cp.conn.heardAt = Date.now();
      this.freeSlot(slot);
      if (headerTimer) clearTimeout(headerTimer);
      if (identifyTimer) clearTimeout(identifyTimer);
      if (frameTimer) clearTimeout(frameTimer);
      withdraw?.();
      stopFrame();
      if (tp.sock === sock) tp.onResume = null;
    });
    // A peer that starts a header must finish it: one that sends half and stalls is dropped.
    const checkHeader = (): void => {
      if (reader.partialHeader && !cp.readPaused) {
        if (headerTimer === null) {
          headerTimer = setTimeout(() => {
            headerTimer = null;
            if (tp.sock !== sock || !reader.partialHeader || cp.readPaused) return;
            this.host.counters.add(RDS_CTR.recv_drop_header_timeout);
            this.host.reportProtocolError(cp, new Error(`no complete header within ${headerTimeoutMs} ms`));
            refuse(sock);
            cp.drop('header timeout');
          }, headerTimeoutMs);
          headerTimer.unref();
        }
      } else if (headerTimer !== null) {
        clearTimeout(headerTimer);
        headerTimer = null;
      }
    };
    const received = (input: Buffer | number): void => {
      if (tp.sock !== sock) return;
      this.host.counters.add(RDS_CTR.tcp_data_ready_calls);
      cp.noteRxActivity();
      try {
        if (typeof input === 'number') reader.filled(input);
        else reader.push(input);
        if (!identified && reader.frames > 0) {
          identified = true;
          this.identifySlot(slot);
          cp.conn.heardAt = Date.now();
        }
        if (tp.sock !== sock) return; // a frame made the core drop the path
        if (tp.provenAt < 0 && reader.frames > 0) this.carrierProven(cp, tp);
        trackFrame(cp.lastRxAt);
        checkHeader();
      } catch (e) {
        if (tp.sock !== sock) return;
        this.host.reportProtocolError(cp, e instanceof Error ? e : new Error(String(e)));
        refuse(sock);
        cp.drop('protocol error');
      }
    };
    if (!slab) sock.on('data', received);
    sock.on('drain', () => {
      if (tp.sock !== sock) return;
      this.host.counters.add(RDS_CTR.tcp_write_space_calls);
      cp.kick();
    });
    sock.on('error', () => {});
    sock.once('close', () => {
      if (tp.sock !== sock) return;
      tp.sock = null;
      tp.reader = null;
      if (cp.state === RDS_CONN_CONNECTING) cp.connectFailed();
      else cp.drop('connection closed');
    });
    return received;
  }

  connPathShutdown(cp: RdsConnPath): void {
    const tp = tcpPath(cp);
    const sock = tp.sock;
    tp.sock = null;
    tp.reader = null;
    tp.run = null;
    tp.inBatch = tp.corked = false;
    tp.track.drain();
    if (tp.outqTimer) clearTimeout(tp.outqTimer);
    tp.outqTimer = null;
    sock?.destroy();
  }

  xmitBegin(cp: RdsConnPath): void {
    const tp = tcpPath(cp);
    tp.inBatch = true;
    // Between rds-socket peers a batch is usually one write (the run of frames), which needs no
    // cork; the socket is corked only when a batch makes several writes (see corkBatch).
    if (!cp.conn.ackMode) this.corkBatch(tp);
  }

  xmitEnd(cp: RdsConnPath): void {
    const tp = tcpPath(cp);
    this.writeRun(tp);
    tp.inBatch = false;
    if (tp.corked) {
      tp.corked = false;
      tp.sock?.uncork();
    }
  }

  /** Within a batch, let the writes that follow leave together. */
  private corkBatch(tp: TcpPath): void {
    if (!tp.inBatch || tp.corked || tp.sock === null) return;
    tp.corked = true;
    tp.sock.cork();
  }

  xmit(cp: RdsConnPath, msg: RdsOutgoing): boolean {
    const tp = tcpPath(cp);
    const sock = tp.sock!;
    const w = msg.wire;
    if (msg.zcPayload !== null) return this.xmitZeroCopy(cp, tp, sock, msg);
    tp.wrote += w.length;
    const end = tp.wrote;
    if (cp.conn.ackMode) {
      // A large frame's memory is reused once its message is done: the write holds it.
      if (msg.recycles) return this.writeHeld(tp, sock, msg);
      // An rds-socket peer acknowledges messages itself: no write callback needed, and frames
      // queued back to back (see WireSlab) go to the socket as one buffer.
      // Offsets first: reading .buffer of a typed array is the slower check.
      if (tp.run !== null && w.byteOffset === tp.runEnd && w.buffer === tp.run.buffer) {
        tp.runEnd += w.length;
      } else {
        if (tp.run !== null) this.corkBatch(tp); // a second write in this batch
        this.writeRun(tp);
        tp.run = w;
        tp.runEnd = w.byteOffset + w.length;
      }
      // Past the socket's high-water mark the run goes out now, and the batch stops only if the
      // socket says so: then 'drain' is certain to follow (a write the kernel took whole is not
      // followed by one).
      if (sock.writableLength + tp.runEnd - tp.run.byteOffset < sock.writableHighWaterMark) return true;
      return this.writeRun(tp);
    }
    // Anything else is released once TCP has acknowledged the message's last byte (spec §2.4).
    this.writeRun(tp);
    tp.track.push({ end, seq: msg.seq });
    msg.xmitHold();
    return sock.write(w, (err) => {
      msg.xmitDone();
      if (!err) this.flushedTo(cp, tp, sock, end);
    });
  }

  /** A frame written on its own, held until the socket is done with it (it may be reused). */
  private writeHeld(tp: TcpPath, sock: Socket, msg: RdsOutgoing): boolean {
    this.corkBatch(tp);
    this.writeRun(tp);
    msg.xmitHold();
    return sock.write(msg.wire, () => msg.xmitDone());
  }

  /** The kernel has taken a kernel peer's stream up to `end`: what TCP has acknowledged is done. */
  private flushedTo(cp: RdsConnPath, tp: TcpPath, sock: Socket, end: number): void {
    if (tp.sock !== sock) return;
    if (end > tp.flushed) tp.flushed = end;
    this.releaseAcked(cp);
  }

  /**
   * MSG_ZEROCOPY: the header, then the caller's buffers as they are. The message holds its payload
   * until the last write completes, so a cancelled or acknowledged message is released only once
   * no queued write can still read buffers the caller is about to reuse.
   */
  private xmitZeroCopy(cp: RdsConnPath, tp: TcpPath, sock: Socket, msg: RdsOutgoing): boolean {
    const payload = msg.zcPayload!;
    const writes: Uint8Array[] = [msg.wire];
    for (const part of payload instanceof Uint8Array ? [payload] : payload) if (part.length > 0) writes.push(part);
    this.corkBatch(tp);
    this.writeRun(tp);
    tp.wrote += msg.wire.length + msg.len;
    const end = tp.wrote;
    const ackMode = cp.conn.ackMode;
    if (!ackMode) tp.track.push({ end, seq: msg.seq });
    msg.xmitHold();
    const last = writes.length - 1;
    // Any write refused means 'drain' will come: only then may the batch stop.
    let ok = true;
    for (let i = 0; i < last; i++) ok = sock.write(writes[i]!) && ok;
    ok = sock.write(writes[last]!, (err) => {
      msg.xmitDone();
      if (!ackMode && !err) this.flushedTo(cp, tp, sock, end);
    }) && ok;
    return ok;
  }

  /** Hands the gathered run of frames to the socket; false when the socket wants a 'drain' first. */
  private writeRun(tp: TcpPath): boolean {
    const run = tp.run;
    if (run === null) return true;
    tp.run = null;
    if (tp.sock === null) return true;
    const len = tp.runEnd - run.byteOffset;
    return tp.sock.write(len === run.length ? run : Buffer.from(run.buffer, run.byteOffset, len));
  }

  xmitCong(cp: RdsConnPath, map: Buffer): boolean {
    const tp = tcpPath(cp);
    const sock = tp.sock!;
    const frame = encodeCongUpdate(map);
    this.corkBatch(tp);
    this.writeRun(tp);
    tp.wrote += frame.length;
    const end = tp.wrote;
    // Its write completing counts for releaseAcked too: it may be the byte that follows a proof.
    if (!sock.write(frame, (err) => { if (!err && !cp.conn.ackMode) this.flushedTo(cp, tp, sock, end); })) {
      this.host.counters.add(RDS_CTR.tcp_sndbuf_full);
      return false;
    }
    return true;
  }

  xmitControl(cp: RdsConnPath, header: Buffer, done: () => void): void {
    const tp = tcpPath(cp);
    const sock = tp.sock;
    if (sock === null) {
      done();
      return;
    }
    this.writeRun(tp);
    tp.wrote += header.length;
    sock.write(header, () => done());
  }

  capabilitiesChanged(conn: RdsConnection): void {
    for (const cp of conn.paths) {
      const tp = cp.carrierIf(TCP_CARRIER);
      if (tp === null) continue;
      if (conn.ackMode) tp.track.drain();
      else this.releaseAcked(cp);
    }
  }

  /**
   * The peer's first frame (a kernel's congestion map) arrived on this carrier: the peer has taken
   * it as a path. Messages already written wait until TCP acknowledges a byte written from now on
   * (releaseAcked), so unless more is on its way a congestion map update follows.
   */
  private carrierProven(cp: RdsConnPath, tp: TcpPath): void {
    tp.provenAt = tp.wrote;
    if (tp.track.length === 0 || cp.conn.ackMode) return;
    if (cp.sendQueue.length === 0) cp.queueCongUpdate();
    this.releaseAcked(cp);
  }

  /**
   * Frees messages whose last byte TCP has acknowledged: bytes handed to the kernel minus those
   * it still holds unacknowledged (SIOCOUTQ). Without the native addon, handing the bytes to the
   * kernel is the best Node can see, and counts.
   *
   * Only on a proven carrier, and only once the acknowledgement covers a byte written after the
   * proof. A 6.1 kernel's TCP acknowledges what arrives on a connection it has not accepted yet
   * (spec §3.5-3.6); if its RDS then refuses the connection (the path is still shutting down the
   * previous one) it resets it unread, and if it takes it, it reads what had queued only when its
   * receive worker or the next segment comes. Its first frame shows it took the connection; a
   * segment that arrives after that is read at once, with everything queued before it. Until
   * then, acknowledged messages stay in the retransmit queue and are resent if the carrier dies.
   */
  private releaseAcked(cp: RdsConnPath): void {
    const tp = tcpPath(cp);
    const sock = tp.sock;
    if (sock === null || tp.track.length === 0) return;
    if (cp.conn.ackMode) {
      tp.track.drain();
      return;
    }
    if (tp.provenAt < 0) return; // carrierProven() calls again
    if (cp.conn.releaseOnTransportAck) {
      let acked = tp.flushed;
      const n = native();
      const fd = socketFd(sock);
      if (n !== null && fd >= 0) {
        try {
          acked = tp.flushed - n.tcpOutq(fd);
        } catch {
          acked = tp.flushed;
        }
      }
      let seq = -1;
      if (acked <= tp.provenAt) acked = 0;
      for (let h = tp.track.peek(); h !== undefined && h.end <= acked; h = tp.track.peek()) {
        seq = h.seq;
        tp.track.shift();
      }
      if (seq >= 0) {
        tp.outqDelay = 1;
        cp.ackThrough(seq);
      }
    }
    if (tp.track.length > 0 && tp.outqTimer === null) {
      tp.outqTimer = setTimeout(() => {
        tp.outqTimer = null;
        if (tp.sock === sock) this.releaseAcked(cp);
      }, tp.outqDelay);
      if (!this.ref) tp.outqTimer.unref();
      tp.outqDelay = Math.min(tp.outqDelay * 2, OUTQ_POLL_MAX_MS);
    }
  }

  pathInfo(cp: RdsConnPath): Record<string, unknown> | null {
    const tp = cp.carrierIf(TCP_CARRIER);
    const sock = tp?.sock;
    if (!sock) return null;
    const [hdrRem, dataRem] = tp!.reader?.remaining ?? [0, 0];
    return {
      localPort: sock.localPort, peerPort: sock.remotePort, bytesWritten: sock.bytesWritten,
      bytesRead: sock.bytesRead, writeQueued: sock.writableLength, hdrRemaining: hdrRem, dataRemaining: dataRem,
      // Receive limits: the node has stopped reading this connection (queue limit, or waiting for
      // room for its frame in maxPartialFrameBytes).
      readPaused: cp.readPaused, waitingForFrameRoom: tp!.waiting,
    };
  }

  setRef(ref: boolean): void {
    this.ref = ref;
    for (const p of this.listeners.values()) p.then((s) => (this.ref ? s.ref() : s.unref()), () => {});
    for (const s of this.sockets) (ref ? s.ref() : s.unref());
  }

  /** Stop listening; half-close every carrier so queued bytes still reach the peer, then reset stragglers. */
  async close(): Promise<void> {
    this.closed = true;
    // server.close() only calls back once every accepted connection is gone, so end those at the same time.
    const servers = await Promise.allSettled([...this.listeners.values()]);
    const closing = servers.map((r) => r.status === 'fulfilled'
      ? new Promise<void>((res) => r.value.close(() => res())) : Promise.resolve());
    await Promise.all([...this.sockets].map((s) => new Promise<void>((res) => {
      if (s.destroyed) return res();
      const t = setTimeout(() => s.destroy(), CLOSE_LINGER_MS);
      s.once('close', () => {
        clearTimeout(t);
        res();
      });
      s.resume();
      s.end();
    })));
    await Promise.all(closing);
  }
}
