import { connect, createServer, type Server, type Socket } from 'node:net';
import { constants, wire } from '../lib/index.js';

/** Waits until `ready()` holds, re-checking whenever a waiter registered with `waiters` fires; bounded by `ms`. */
async function waitUntil(ready: () => boolean, waiters: (() => void)[], ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ready()) {
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(`raw peer: timed out waiting for ${what}`);
    await new Promise<void>((res) => {
      const t = setTimeout(res, left);
      waiters.push(() => {
        clearTimeout(t);
        res();
      });
    });
  }
}

export interface Frame {
  header: ReturnType<typeof wire.decodeHeader>;
  payload: Buffer;
}

/** The capabilities a raw peer plays an rds-socket node with that reports reads, on one path. */
export const READ_REPORTING_CAPS =
  constants.RDSSOCK_CAP_ACK |
  constants.RDSSOCK_CAP_CONFIRM |
  constants.RDSSOCK_CAP_NO_HELLO |
  (1 << constants.RDSSOCK_CAP_PATHS_SHIFT);

/** The capabilities a raw peer plays an rds-socket node with that runs 8 lanes, opened on demand. */
export const LAZY_LANES_CAPS =
  constants.RDSSOCK_CAP_ACK |
  constants.RDSSOCK_CAP_HEARTBEAT |
  constants.RDSSOCK_CAP_NO_HELLO |
  constants.RDSSOCK_CAP_LAZY_LANES |
  (8 << constants.RDSSOCK_CAP_PATHS_SHIFT);

/** A multipath probe (sport 1 -> dport 0), or rds-socket's hello. */
export const isProbe = (f: Frame): boolean => f.header.sport === 1 && f.header.dport === 0;

/** A byte-level RDS/TCP peer for tests: reads frames, writes hand-built ones. */
export class RawConn {
  private frames: Frame[] = [];
  private waiters: (() => void)[] = [];
  closed = false;

  private txSeq = 1;

  /**
   * `kernelLike`: answer multipath probes as a 6.1 kernel does (probe pong with NPATHS=8 and no
   * rds-socket capabilities), so the peer knows it talks to a kernel.
   */
  constructor(
    readonly sock: Socket,
    public kernelLike = true,
  ) {
    const r = new wire.FrameReader((h, p) => {
      const f = { header: wire.decodeHeader(h), payload: p };
      if (this.kernelLike && f.header.sport === 1 && f.header.dport === 0) {
        this.send({ sequence: this.txSeq++, sport: 0, dport: 1, exthdr: Uint8Array.of(5, 0, 8) });
      }
      this.frames.push(f);
      this.waiters.splice(0).forEach((w) => w());
    });
    sock.on('data', (c: Buffer) => r.push(c));
    sock.on('error', () => {});
    sock.on('close', () => {
      this.closed = true;
      this.waiters.splice(0).forEach((w) => w());
    });
  }

  async next(ms = 5000): Promise<Frame> {
    await waitUntil(() => this.frames.length > 0 || this.closed, this.waiters, ms, 'a frame');
    if (this.frames.length === 0) throw new Error('raw peer: connection closed');
    return this.frames.shift()!;
  }

  /**
   * The first frame of a carrier from an rds-socket node that just started: its congestion map,
   * then its multipath probe, the first sequenced frame of its life (no unsequenced hello: a
   * kernel would count it in recv_drop_old_seq).
   */
  async mapThenProbe(ms = 5000): Promise<Frame> {
    const map = await this.next(ms);
    if (map.header.flags !== 1) throw new Error(`expected the congestion map first, got ${JSON.stringify(map.header)}`);
    const f = await this.next(ms);
    if (
      !(
        f.header.sport === 1 &&
        f.header.dport === 0 &&
        f.header.flags === 0 &&
        f.payload.length === 0 &&
        f.header.sequence > 0
      )
    ) {
      throw new Error(`expected the sequenced probe next, got ${JSON.stringify(f.header)}`);
    }
    return f;
  }

  /** Next frame that is not a congestion map. */
  async nextData(ms = 5000): Promise<Frame> {
    for (;;) {
      const f = await this.next(ms);
      if (f.header.flags !== 1) return f;
    }
  }

  /** Next frame that is neither a map, a handshake probe/pong nor an ack-only frame. */
  async nextUser(ms = 5000): Promise<Frame> {
    for (;;) {
      const f = await this.next(ms);
      const h = f.header;
      if (h.flags === 1 || (h.sport === 1 && h.dport === 0) || (h.sport === 0 && h.dport === 1)) continue;
      if (h.sequence === 0 && h.sport === 0 && h.dport === 0) continue;
      return f;
    }
  }

  /** The node's next multipath probe, skipping other frames. */
  nextProbe(ms = 5000): Promise<Frame> {
    return this.nextMatching(isProbe, ms);
  }

  /** The sequence numbers of the node's next `count` user messages (see nextUser). */
  async userSeqs(count: number, ms = 5000): Promise<number[]> {
    const seqs: number[] = [];
    while (seqs.length < count) seqs.push((await this.nextUser(ms)).header.sequence);
    return seqs;
  }

  /** Next frame matching `pred`, skipping others. */
  async nextMatching(pred: (f: Frame) => boolean, ms = 5000): Promise<Frame> {
    for (;;) {
      const f = await this.next(ms);
      if (pred(f)) return f;
    }
  }

  send(h: Partial<wire.RdsHeader>, payload: Buffer = Buffer.alloc(0)): void {
    // A kernel numbers its pongs in the same sequence as its data: the automatic pong must come
    // after whatever the test sent by hand, or it would look like a restart to the receiver.
    if (h.sequence !== undefined && Number(h.sequence) >= this.txSeq) this.txSeq = Number(h.sequence) + 1;
    const b = Buffer.alloc(48 + payload.length);
    wire.encodeHeader(b, 0, { ...h, len: h.len ?? payload.length });
    payload.copy(b, 48);
    this.sock.write(b);
  }

  waitClosed(ms = 5000): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((res, rej) => {
      const t = setTimeout(() => rej(new Error('raw peer: connection not closed')), ms);
      this.sock.once('close', () => {
        clearTimeout(t);
        res();
      });
    });
  }
}

/** A raw listener on address:port handing out RawConns. */
export class RawListener {
  readonly conns: RawConn[] = [];
  private waiters: (() => void)[] = [];
  private server: Server;

  private constructor(server: Server, kernelLike: boolean) {
    this.server = server;
    server.on('connection', (s) => {
      this.conns.push(new RawConn(s, kernelLike));
      this.waiters.splice(0).forEach((w) => w());
    });
  }

  /** `kernelLike`: see RawConn; false for a listener that plays rds-socket and answers probes itself. */
  static async listen(address: string, port: number, kernelLike = true): Promise<RawListener> {
    const server = createServer();
    await new Promise<void>((res, rej) => {
      server.once('error', rej);
      server.listen({ host: address, port }, () => res());
    });
    return new RawListener(server, kernelLike);
  }

  async accept(index: number, ms = 5000): Promise<RawConn> {
    await waitUntil(() => this.conns.length > index, this.waiters, ms, 'a connection');
    return this.conns[index]!;
  }

  /**
   * Connection `index` once the node has sent its multipath probe on it (the first steps of a raw
   * peer that plays the node's receiver): the connection and the probe.
   */
  async acceptProbed(index = 0, ms = 5000): Promise<{ c: RawConn; probe: Frame }> {
    const c = await this.accept(index, ms);
    return { c, probe: await c.nextProbe(ms) };
  }

  async close(): Promise<void> {
    for (const c of this.conns) c.sock.destroy();
    await new Promise<void>((res) => this.server.close(() => res()));
  }
}

/** `kernelLike`: see RawConn; false for a peer that plays rds-socket and never answers probes. */
/** A 6.1 kernel's first frame on every connection it takes as a path: its congestion map. */
export function kernelMap(c: RawConn): void {
  c.send({ sequence: 0, flags: 1, sport: 0, dport: 0 }, Buffer.alloc(8192));
}

export async function rawConnect(from: string, to: string, port: number, kernelLike = true): Promise<RawConn> {
  const s = connect({ host: to, port, localAddress: from });
  await new Promise<void>((res, rej) => {
    s.once('connect', res);
    s.once('error', rej);
  });
  return new RawConn(s, kernelLike);
}

/**
 * Connects from `from` as an rds-socket initiator dials path `lane` (SPORT_IDX): from a source port
 * with port % 8 == lane, trying the next group of eight while a port is taken.
 */
export async function rawConnectLane(
  from: string,
  to: string,
  port: number,
  lane: number,
  kernelLike = true,
): Promise<RawConn> {
  for (let g = 0; g < 200; g++) {
    const s = connect({ host: to, port, localAddress: from, localPort: 41000 + 8 * g + lane });
    try {
      await new Promise<void>((res, rej) => {
        s.once('connect', res);
        s.once('error', rej);
      });
      return new RawConn(s, kernelLike);
    } catch (e) {
      s.destroy();
      if ((e as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw e;
    }
  }
  throw new Error(`raw peer: no free source port for lane ${lane}`);
}

/** One RDS/TCP frame's bytes: `h` encoded (its `len` defaults to the payload's), then the payload. */
export function frameBytes(h: Partial<wire.RdsHeader>, payload: Buffer = Buffer.alloc(0)): Buffer {
  const b = Buffer.alloc(48 + payload.length);
  wire.encodeHeader(b, 0, { ...h, len: h.len ?? payload.length });
  payload.copy(b, 48);
  return b;
}

/**
 * Plain TCP sockets to a node's RDS port for tests that play a hostile or broken peer at the byte
 * level; `destroyAll()` (in afterEach) closes every one opened since the last call.
 */
export function plainSockets(port: number) {
  let open: Socket[] = [];
  /** Connects from `from` to `to` without waiting; the socket swallows its errors. */
  const start = (from: string, to: string, opts: { discardReads?: boolean } = {}): Socket => {
    const s = connect({ host: to, port, localAddress: from });
    s.on('error', () => {});
    if (opts.discardReads) s.on('data', () => {});
    open.push(s);
    return s;
  };
  return {
    start,
    /** Connects and resolves once the connection is up. */
    async connect(from: string, to: string, opts: { discardReads?: boolean } = {}): Promise<Socket> {
      const s = start(from, to, opts);
      await new Promise<void>((res, rej) => {
        s.once('connect', res);
        s.once('error', rej);
      });
      return s;
    },
    /** Counts a socket made elsewhere in the test so destroyAll() closes it too. */
    track(s: Socket): void {
      open.push(s);
    },
    destroyAll(): void {
      for (const s of open) s.destroy();
      open = [];
    },
  };
}
