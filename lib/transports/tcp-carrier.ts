import type { Socket } from 'node:net';
import type * as tls from 'node:tls';
import { CarrierKind, CarrierSlot } from '../core/carrier.js';
import { Fifo } from '../core/fifo.js';
import type { TransportPath } from '../core/transport-path.js';
import type { TransportHost } from '../core/transport.js';
import type { RdsTransport } from '../core/transport.js';
import { native } from '../native.js';
import { checkOption } from '../core/options.js';
import { applySndbuf } from './tcp-sndbuf.js';
import { socketFd } from './tcp-socket.js';
import type { FrameReader } from '../wire/frame-reader.js';

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
  /**
   * TCP's own knobs: the port listened on and connected to (default 16385), the cap on TCP
   * connections (default 4096), the deadline for each header and each step of a new
   * connection (default 10000 ms) and each connection's kernel send buffer (default 'auto');
   * see RdsStackOptions for what each does. Given here they win
   * over the stack's spelling of them (still accepted: `new RdsStack({ tcpPort })`).
   */
  tcpPort?: number;
  maxConnections?: number;
  headerTimeoutMs?: number;
  tcpSndbuf?: number | 'auto';
}

/** The knobs TcpTransportOptions shares with RdsStackOptions (checked by the stack's rules). */
export const TCP_KNOBS = ['tcpPort', 'maxConnections', 'headerTimeoutMs', 'tcpSndbuf'] as const;

/** Polling for TCP acknowledgements backs off from 1 ms to this while messages wait. */
const OUTQ_POLL_MAX_MS = 50;

/**
 * The TCP transport's carrier object of a path: the carrier socket, its reassembly and send
 * bookkeeping. The transport's parts change it only through the methods below, each named for
 * what happened.
 */
export class TcpPath {
  /** The current carrier socket (see CarrierSlot: events of a replaced one are ignored). */
  readonly slot: CarrierSlot<Socket>;
  /** Messages on this carrier waiting for TCP's acknowledgement: stream offset of their last byte. */
  readonly track = new Fifo<{ end: number; seq: number }>();
  private rd: FrameReader | null = null;
  private pokeSock: Socket | null = null;
  private written = 0;
  private flushedBytes = 0;
  private proven = -1;
  private outqTimer: NodeJS.Timeout | null = null;
  private outqDelay = 1;
  /**
   * Frames of the current batch not yet handed to the socket: `run` is the first, and the run
   * extends to `runEnd` (an offset in run.buffer) while each next frame follows in memory.
   */
  private run: Buffer | null = null;
  private runEnd = 0;
  private inBatch = false;
  private corked = false;
  private isHeld = false;
  private heldSince = 0;
  private heldTotal = 0;
  private isWaiting = false;
  private onResume: (() => void) | null = null;

  constructor(cp: TransportPath) {
    this.slot = new CarrierSlot<Socket>(cp);
  }

  get sock(): Socket | null {
    return this.slot.current;
  }

  /** The current carrier's frame reassembly. */
  get reader(): FrameReader | null {
    return this.rd;
  }

  // ---- the carrier's life ----

  /** `sock` becomes the carrier, read by `reader`: nothing is written, proven or waiting on it yet. */
  attach(sock: Socket, reader: FrameReader, provenAt: number): void {
    this.slot.set(sock);
    this.run = null;
    this.inBatch = this.corked = false;
    this.written = 0;
    this.flushedBytes = 0;
    this.proven = provenAt;
    this.track.drain();
    this.rd = reader;
    this.isWaiting = false;
  }

  /** The carrier closed, or one being connected is given up: its reader goes with it. */
  readerGone(): void {
    this.rd = null;
  }

  /** A carrier being connected is given up (its source port was taken): returns it. */
  abandon(): Socket | null {
    const sock = this.slot.clear();
    this.rd = null;
    return sock;
  }

  /** connPathShutdown: the carrier is forgotten with everything in flight on it; returns it. */
  shutdown(): Socket | null {
    const sock = this.abandon();
    this.run = null;
    this.inBatch = this.corked = false;
    this.track.drain();
    if (this.outqTimer) clearTimeout(this.outqTimer);
    this.outqTimer = null;
    return sock;
  }

  /** The larger side's short-lived poke connection, if one is in flight. */
  get poke(): Socket | null {
    return this.pokeSock;
  }

  pokeSent(poke: Socket): void {
    this.pokeSock = poke;
  }

  /** `poke` is over: true if it was still this path's poke (now forgotten). */
  pokeEnded(poke: Socket): boolean {
    if (this.pokeSock !== poke) return false;
    this.pokeSock = null;
    return true;
  }

  // ---- send bookkeeping (TcpSender) ----

  /** Bytes written to this carrier (a stream offset). */
  get wrote(): number {
    return this.written;
  }

  /** How many of the bytes written the kernel has taken. */
  get flushed(): number {
    return this.flushedBytes;
  }

  /**
   * -1 until the peer's first frame arrived on this carrier, then `wrote` at that moment. A peer
   * that releases on TCP acknowledgement (a kernel) has that acknowledgement count only once it
   * covers a byte written after this point: see TcpSender.releaseAcked.
   */
  get provenAt(): number {
    return this.proven;
  }

  /** `n` more bytes were handed to the socket: returns the stream offset of their end. */
  addWritten(n: number): number {
    this.written += n;
    return this.written;
  }

  /** The kernel has taken the stream up to `end`. */
  flushedTo(end: number): void {
    if (end > this.flushedBytes) this.flushedBytes = end;
  }

  /** The peer's first frame arrived on this carrier. */
  markProven(): void {
    this.proven = this.written;
  }

  beginBatch(): void {
    this.inBatch = true;
  }

  /** Within a batch, let the writes that follow leave together. */
  corkBatch(): void {
    if (!this.inBatch || this.corked || this.sock === null) return;
    this.corked = true;
    this.sock.cork();
  }

  endBatch(): void {
    this.inBatch = false;
    if (this.corked) {
      this.corked = false;
      this.sock?.uncork();
    }
  }

  /** A run of frames is gathered. */
  get hasRun(): boolean {
    return this.run !== null;
  }

  /** Bytes in the gathered run. */
  get runLength(): number {
    return this.run === null ? 0 : this.runEnd - this.run.byteOffset;
  }

  /** Adds `w` to the run if it follows it in memory; false if it does not, or there is no run. */
  extendRun(w: Buffer): boolean {
    // Offsets first: reading .buffer of a typed array is the slower check.
    if (this.run === null || w.byteOffset !== this.runEnd || w.buffer !== this.run.buffer) return false;
    this.runEnd += w.length;
    return true;
  }

  /** `w` starts a new run (the previous one has been taken). */
  startRun(w: Buffer): void {
    this.run = w;
    this.runEnd = w.byteOffset + w.length;
  }

  /** Takes the gathered run for writing: its frames as one buffer, or null if there is none. */
  takeRun(): Buffer | null {
    const run = this.run;
    if (run === null) return null;
    this.run = null;
    const len = this.runEnd - run.byteOffset;
    return len === run.length ? run : Buffer.from(run.buffer, run.byteOffset, len);
  }

  /** TCP acknowledged more: poll quickly again. */
  outqProgress(): void {
    this.outqDelay = 1;
  }

  /** While messages wait for TCP's acknowledgement, run `check` again later, backing off to OUTQ_POLL_MAX_MS. */
  pollOutq(check: () => void, ref: boolean): void {
    if (this.track.length === 0 || this.outqTimer !== null) return;
    this.outqTimer = setTimeout(() => {
      this.outqTimer = null;
      check();
    }, this.outqDelay);
    if (!ref) this.outqTimer.unref();
    this.outqDelay = Math.min(this.outqDelay * 2, OUTQ_POLL_MAX_MS);
  }

  // ---- receive pauses (TcpReceiver) ----

  /** The core stopped reading this path (receive queue limit); outlives a carrier change. */
  get held(): boolean {
    return this.isHeld;
  }

  setHeld(held: boolean): void {
    if (held === this.isHeld) return;
    const now = Date.now();
    if (held) this.heldSince = now;
    else this.heldTotal += now - this.heldSince;
    this.isHeld = held;
  }

  /** Milliseconds the receive limits have held this path's reading, in all (frame clocks leave them out). */
  heldMs(now: number): number {
    return this.heldTotal + (this.isHeld ? now - this.heldSince : 0);
  }

  /** The current carrier waits for room in the partial-frame budget. */
  get waiting(): boolean {
    return this.isWaiting;
  }

  setWaiting(waiting: boolean): void {
    this.isWaiting = waiting;
  }

  /** What restarts the current carrier's frame clocks when its reading resumes (null: none). */
  setOnResume(fn: (() => void) | null): void {
    this.onResume = fn;
  }

  /** A closed carrier's hook goes (it holds that carrier's reader), unless a newer one replaced it. */
  dropOnResume(fn: () => void): void {
    if (this.onResume === fn) this.onResume = null;
  }

  /** Reading the carrier resumed. */
  resumed(): void {
    this.onResume?.();
  }
}

export const TCP_CARRIER = new CarrierKind<TcpPath>('tcp', (cp) => new TcpPath(cp));

export function tcpPath(cp: TransportPath): TcpPath {
  return cp.carrier(TCP_CARRIER);
}

const KEEPALIVE_MS = 5000;

/** What the parts of the TCP transport share: the host, the options, every socket it holds. */
export class TcpShared {
  host!: TransportHost;
  private referenced = false;
  private isClosed = false;
  readonly sockets = new Set<Socket>();

  constructor(
    readonly topts: TcpTransportOptions,
    readonly transport: RdsTransport,
  ) {
    for (const k of TCP_KNOBS) checkOption(k, topts[k], 'TcpTransport');
  }

  attach(host: TransportHost): void {
    // The transport's own knobs over the stack's: the host it reads options from says so.
    const own = Object.fromEntries(TCP_KNOBS.filter((k) => this.topts[k] !== undefined).map((k) => [k, this.topts[k]]));
    this.host = Object.create(host, {
      options: { value: Object.freeze({ ...host.options, ...own }) },
    }) as TransportHost;
  }

  get ref(): boolean {
    return this.referenced;
  }

  get closed(): boolean {
    return this.isClosed;
  }

  setRef(ref: boolean): void {
    this.referenced = ref;
    for (const s of this.sockets) ref ? s.ref() : s.unref();
  }

  markClosed(): void {
    this.isClosed = true;
  }

  /** Holds `sock` for close() and setRef(), with the kernel's RDS/TCP socket options. */
  track(sock: Socket): void {
    this.sockets.add(sock);
    sock.once('close', () => this.sockets.delete(sock));
    if (!this.referenced) sock.unref();
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
        } catch {
          /* keep Node's setting */
        }
        applySndbuf(sock, this.host.options.tcpSndbuf);
      }
    };
    if (socketFd(sock) >= 0) full();
    else sock.once('connect', full);
  }
}

export { KEEPALIVE_MS };
