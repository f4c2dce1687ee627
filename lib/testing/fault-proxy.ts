import { connect, createServer, type Server, type Socket } from 'node:net';
import { RDS_HEADER_SIZE } from '../constants.js';

/** A direction through the proxy: forward (client to target) or backward. */
export type Direction = 'forward' | 'backward';
/** Where a reset lands: inside the next header, inside the next payload, exactly between two messages. */
export type CutKind = 'header' | 'payload' | 'between';

/** The options of `FaultProxy.start()`. */
export interface FaultProxyOptions {
  /** Where the proxy listens. */
  listen: { host: string; port: number };
  /** Where it connects to. */
  target: { host: string; port: number };
  /** Source address of the proxy's outgoing connections: the real initiator's RDS address, so the acceptor sees the right peer. */
  sourceAddress: string;
  /** Deterministic choice of cut offsets. */
  random?: () => number;
  /**
   * A stall is a peer whose process does not read (SIGSTOPped): when one end closes while bytes
   * it sent are held by a stall, the other end still gets them at the resume, then the close (its
   * kernel had them, and the FIN after them). Default false: the close ends both sides at once
   * and the held bytes are dropped.
   */
  closeAfterHeld?: boolean;
}

/** Tracks RDS frame boundaries in one direction of a stream without copying payloads. */
class FrameCursor {
  private header = Buffer.alloc(RDS_HEADER_SIZE);
  hdrFill = 0;
  payloadLeft = 0;
  payloadLen = 0;
  frames = 0;

  get atBoundary(): boolean {
    return this.hdrFill === 0 && this.payloadLeft === 0;
  }

  /** Advances over `chunk`; returns the offset within it where `cut` falls (bytes before it pass), or -1. */
  advance(chunk: Buffer, cut: { kind: CutKind; at: number } | null): number {
    let off = 0;
    while (off < chunk.length) {
      if (this.payloadLeft === 0) {
        if (cut?.kind === 'between' && this.hdrFill === 0 && off > 0) return off;
        const need = RDS_HEADER_SIZE - this.hdrFill;
        const n = Math.min(need, chunk.length - off);
        // cut.at is 1..47: that many header bytes pass, the rest never do.
        if (cut?.kind === 'header' && cut.at > this.hdrFill && cut.at <= this.hdrFill + n) {
          return off + (cut.at - this.hdrFill);
        }
        chunk.copy(this.header, this.hdrFill, off, off + n);
        this.hdrFill += n;
        off += n;
        if (this.hdrFill === RDS_HEADER_SIZE) {
          this.hdrFill = 0;
          this.payloadLen = this.header.readUInt32BE(16);
          this.payloadLeft = this.payloadLen;
          if (this.payloadLeft === 0) this.frames++;
          if (cut?.kind === 'between' && this.payloadLeft === 0 && off < chunk.length) return off;
        }
      } else {
        const n = Math.min(this.payloadLeft, chunk.length - off);
        const pos = this.payloadLen - this.payloadLeft;
        if (cut?.kind === 'payload' && this.payloadLen >= 2) {
          const at = 1 + Math.floor(cut.at * (this.payloadLen - 1));
          if (at > pos && at < pos + n) return off + (at - pos);
        }
        this.payloadLeft -= n;
        off += n;
        if (this.payloadLeft === 0) {
          this.frames++;
          if (cut?.kind === 'between' && off < chunk.length) return off;
        }
      }
    }
    return -1;
  }
}

interface Pair {
  client: Socket;
  server: Socket;
  /** The client's source port mod 8: with SPORT_IDX, the multipath lane this connection carries. */
  residue: number;
}

/**
 * A TCP proxy for RDS/TCP that injects faults a real network produces: a connection reset at a
 * chosen kind of byte offset, a stall (bytes held, connection open), added delay, or a black hole
 * (bytes silently dropped, no FIN, no RST). Used by the tests and by `npm run soak`.
 */
export class FaultProxy {
  private readonly server: Server;
  private readonly pairs = new Set<Pair>();
  private readonly cursors = new Map<Socket, FrameCursor>();
  private pendingCut: { dir: Direction; kind: CutKind; at: number; done: () => void } | null = null;
  private stalled = new Set<Direction>();
  private blackholed = new Set<Direction>();
  private delayMs = 0;
  private cutResidues = new Set<number>();
  /** Directions a partition blocks (see partition()); empty: none. */
  private cutOff = new Set<Direction>();
  /** Pairs one end of which closed behind a partition: the other end hears of it at the heal. */
  private deadBehind = new Map<Pair, Socket>();
  /** Bytes held for each receiving socket (by a stall or a partition), and the direction they go. */
  private held = new Map<Socket, { dir: Direction; q: Buffer[] }>();
  /** Sockets that get their held bytes, then a close (closeAfterHeld). */
  private endAfterHeld = new Set<Socket>();
  /** Resets carried out. */
  resets = 0;
  /** Connections accepted. */
  accepted = 0;
  /** Connections refused because their lane was cut. */
  refused = 0;
  private readonly rnd: () => number;

  private constructor(
    private readonly opts: FaultProxyOptions,
    server: Server,
  ) {
    this.server = server;
    this.rnd = opts.random ?? Math.random;
    server.on('connection', (c) => this.onClient(c));
  }

  /** Starts a proxy listening at `opts.listen` that forwards to `opts.target`. */
  static async start(opts: FaultProxyOptions): Promise<FaultProxy> {
    const server = createServer();
    await new Promise<void>((res, rej) => {
      server.once('error', rej);
      server.listen({ host: opts.listen.host, port: opts.listen.port }, () => res());
    });
    return new FaultProxy(opts, server);
  }

  get address(): { host: string; port: number } {
    const a = this.server.address() as { address: string; port: number };
    return { host: a.address, port: a.port };
  }

  get connections(): number {
    return this.pairs.size;
  }

  private onClient(client: Socket): void {
    this.accepted++;
    const residue = (client.remotePort ?? 0) % 8;
    if (this.cutResidues.has(residue) || this.cutOff.size > 0) {
      this.refused++;
      client.on('error', () => {});
      client.resetAndDestroy();
      return;
    }
    const server = this.dial(residue);
    const pair: Pair = { client, server, residue };
    this.pairs.add(pair);
    this.cursors.set(client, new FrameCursor());
    this.cursors.set(server, new FrameCursor());
    client.setNoDelay(true);
    server.setNoDelay(true);
    const end = (): void => {
      if (!this.pairs.delete(pair)) return;
      client.destroy();
      server.destroy();
    };
    // Behind a partition a close does not cross it: the other end stays open (and its held bytes
    // with it) until the heal, when it is reset as the peer's stack would on its next segment.
    const closed = (dir: Direction, other: Socket) => (): void => {
      if (!this.pairs.has(pair)) return;
      if (this.cutOff.has(dir) && !other.destroyed) {
        this.pairs.delete(pair);
        this.deadBehind.set(pair, other);
        return;
      }
      if (this.opts.closeAfterHeld === true && this.stalled.has(dir) && this.held.has(other) && !other.destroyed) {
        this.pairs.delete(pair);
        this.endAfterHeld.add(other);
        (other === server ? client : server).destroy();
        return;
      }
      end();
    };
    client.on('error', closed('forward', server)).on('close', closed('forward', server));
    server.on('error', closed('backward', client)).on('close', closed('backward', client));
    client.on('data', (d: Buffer) => this.forward(pair, 'forward', client, server, d));
    server.on('data', (d: Buffer) => this.forward(pair, 'backward', server, client, d));
  }

  /**
   * Connects to the target from a source port with the same residue mod 8 as the client's, so a
   * peer that pairs connections with paths by source port (SPORT_IDX) still can.
   */
  private dial(residue: number): Socket {
    // A taken port fails this pair like any connect error; the RDS initiator simply reconnects.
    const base = 40000 + 8 * Math.floor(Math.random() * 2000);
    return connect({
      host: this.opts.target.host,
      port: this.opts.target.port,
      localAddress: this.opts.sourceAddress,
      localPort: base + residue,
    });
  }

  private forward(pair: Pair, dir: Direction, from: Socket, to: Socket, chunk: Buffer): void {
    if (!this.pairs.has(pair)) return;
    if (this.blackholed.has(dir)) return;
    const cursor = this.cursors.get(from)!;
    const cut = this.pendingCut && this.pendingCut.dir === dir ? this.pendingCut : null;
    if (cut?.kind === 'between' && cursor.atBoundary) {
      this.reset(pair);
      return;
    }
    const at = cursor.advance(chunk, cut);
    if (at >= 0) {
      this.send(to, dir, chunk.subarray(0, at));
      this.reset(pair);
      return;
    }
    this.send(to, dir, chunk);
  }

  private send(to: Socket, dir: Direction, data: Buffer): void {
    if (data.length === 0) return;
    if (this.stalled.has(dir) || this.cutOff.has(dir)) {
      const h = this.held.get(to);
      if (h === undefined) this.held.set(to, { dir, q: [data] });
      else h.q.push(data);
      return;
    }
    if (this.delayMs > 0) {
      const copy = Buffer.from(data);
      setTimeout(() => to.destroyed || to.write(copy), this.delayMs);
      return;
    }
    to.write(data);
  }

  private reset(pair: Pair): void {
    const cut = this.pendingCut;
    this.pendingCut = null;
    this.kill(pair);
    cut?.done();
  }

  private kill(pair: Pair): void {
    this.resets++;
    this.pairs.delete(pair);
    pair.client.resetAndDestroy();
    pair.server.resetAndDestroy();
  }

  /**
   * Resets the connection (RST both ways) at the next point of the given kind in direction `dir`.
   * Resolves once it has happened.
   */
  resetAt(dir: Direction, kind: CutKind): Promise<void> {
    return new Promise((resolve) => {
      this.pendingCut = {
        dir,
        kind,
        at: kind === 'header' ? 1 + Math.floor(this.rnd() * (RDS_HEADER_SIZE - 1)) : this.rnd(),
        done: resolve,
      };
    });
  }

  /** Resets every connection now. */
  resetAll(): void {
    for (const p of [...this.pairs]) this.reset(p);
  }

  /**
   * Takes one multipath lane down and keeps it down: resets its connection (the client's source
   * port mod 8 is the lane under SPORT_IDX) and refuses reconnects from that residue until
   * `cutLane(lane, false)`. Other lanes are untouched.
   */
  cutLane(lane: number, on = true): void {
    if (!on) {
      this.cutResidues.delete(lane);
      return;
    }
    this.cutResidues.add(lane);
    for (const p of [...this.pairs]) if (p.residue === lane) this.kill(p);
  }

  /** Holds bytes in a direction (the connection stays open) until resume(). */
  stall(dir: Direction): void {
    this.stalled.add(dir);
  }

  /**
   * Stops holding that direction for stall(), and lets the bytes held in it through, unless a
   * partition still holds it (a stall and a partition are separate holds; each ends on its own).
   */
  resume(dir: Direction): void {
    this.stalled.delete(dir);
    this.release(dir);
  }

  /** Bytes held in `dir` now (by a stall or a partition), not yet delivered. */
  heldBytes(dir: Direction): number {
    let n = 0;
    for (const h of this.held.values()) if (h.dir === dir) for (const d of h.q) n += d.length;
    return n;
  }

  /** Delivers the bytes held in `dir`, once nothing holds that direction any more. */
  private release(dir: Direction): void {
    if (this.stalled.has(dir) || this.cutOff.has(dir)) return;
    for (const [to, h] of this.held) {
      if (h.dir !== dir) continue;
      this.held.delete(to);
      if (to.destroyed) continue;
      for (const d of h.q) to.write(d);
      if (this.endAfterHeld.delete(to)) to.end();
    }
  }

  /**
   * A network partition between the two sides, both ways or only `oneWay` (the bytes a side sends
   * that way are held, as TCP would keep resending them), until `partition(false)`: new
   * connections are refused (as a SYN that never gets an answer ends), and a connection closed on
   * one side stays open on the other until the heal, when it is reset and the bytes held for it
   * are dropped. The bytes held for live connections are delivered at the heal, except in a
   * direction a separate stall() still holds (they go at its resume()).
   */
  partition(on: boolean, oneWay?: Direction): void {
    if (on) {
      for (const d of oneWay ? [oneWay] : (['forward', 'backward'] as Direction[])) this.cutOff.add(d);
      return;
    }
    this.cutOff.clear();
    for (const [pair, other] of this.deadBehind) {
      this.held.delete(other);
      this.held.delete(other === pair.server ? pair.client : pair.server);
      pair.client.resetAndDestroy();
      pair.server.resetAndDestroy();
    }
    this.deadBehind.clear();
    this.release('forward');
    this.release('backward');
  }

  /** Drops every byte in both directions without closing anything: a peer that vanished. */
  blackhole(on = true): void {
    for (const d of ['forward', 'backward'] as Direction[]) on ? this.blackholed.add(d) : this.blackholed.delete(d);
  }

  /** Delays every chunk forwarded from now on by `ms` (0: no delay). */
  delay(ms: number): void {
    this.delayMs = ms;
  }

  /** Closes every connection and the listener. */
  async close(): Promise<void> {
    for (const p of [...this.pairs, ...this.deadBehind.keys()]) {
      p.client.destroy();
      p.server.destroy();
    }
    for (const s of this.endAfterHeld) s.destroy();
    this.endAfterHeld.clear();
    this.pairs.clear();
    this.deadBehind.clear();
    await new Promise<void>((res) => this.server.close(() => res()));
  }
}
