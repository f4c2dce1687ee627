import { connect, type Socket } from 'node:net';
import { RdsError, type RdsErrorCode } from '../errors.js';
import {
  C_HELLO,
  C_REQ,
  encodeFrame,
  type Frame,
  FrameWriter,
  N_EVENT,
  N_MSG,
  N_RESP,
  N_SENT,
  N_WELCOME,
  writeBatch,
  PROTOCOL_VERSION,
  ProtocolError,
} from './protocol.js';
import { decodeCount } from './hot-frames.js';
import { widenSendBuffer } from './unix-peer.js';
import { SlabFrameParser } from './frame-slab.js';
import type { NodeBackend } from './node-backend.js';
import type { ResolvedStackOptions } from '../core/options.js';
import { optionsFromWire } from './node-options.js';

function errorFrom(meta: unknown): RdsError {
  const e = (meta ?? {}) as { code?: unknown; message?: unknown };
  const code = (typeof e.code === 'string' ? e.code : 'EPROTO') as RdsErrorCode;
  return new RdsError(code, typeof e.message === 'string' ? e.message : 'the host node refused the call');
}

/** The connection of this process (or thread) to a host node. @internal */
export class NodeLink {
  private readonly conn: Socket;
  private readonly parser = new SlabFrameParser();
  readonly writer: FrameWriter;
  private readonly reqs = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private nextId = 1;
  private nextSock = 1;
  readonly sockets = new Map<number, NodeBackend>();
  downError: RdsError | null = null;
  /** The node has welcomed this link. */
  private welcomed = false;
  readonly ready: Promise<void>;
  /** The node's pid, from its welcome. */
  nodePid = 0;
  /**
   * What the node holds for this process at most (its maxClientSendBytes, from the welcome), and
   * what this process's sockets have sent and not been given back, all together.
   */
  sendBudget = Number.POSITIVE_INFINITY;
  sndBytes = 0;
  /** The options of the node's stack, from its welcome (null until then, or from a node that does not send them). */
  nodeOptions: ResolvedStackOptions | null = null;
  /** The node forwards its stack's events on request (its welcome says so). */
  nodeEvents = false;
  /** The node takes SEND frames in the RDS wire format (protocol 4, F_WIRE in hot-frames.ts). */
  wireSends = false;
  /** Where the node's stack events go (the attached stack's watch, attached-events.ts). */
  onStackEvent: ((meta: Record<string, unknown>) => void) | null = null;
  /** Sockets that found the process's budget used up: told when there is room again. */
  private readonly budgetWaiters = new Set<NodeBackend>();

  constructor(readonly path: string) {
    let ok!: () => void;
    let ko!: (e: Error) => void;
    this.ready = new Promise<void>((res, rej) => {
      ok = res;
      ko = rej;
    });
    this.ready.catch(() => {});
    // Reads go into the parser's slabs (frame-slab.ts): no allocation per read, and a large MSG
    // is read straight into a buffer of its own.
    this.conn = connect({
      path,
      onread: {
        buffer: () => this.parser.readBuffer(),
        callback: (n: number): boolean => {
          this.received(n, path, ok);
          return true;
        },
      },
    });
    this.conn.once('connect', () => widenSendBuffer(this.conn));
    this.writer = new FrameWriter(
      (parts, written) => {
        if (this.downError !== null) return false;
        return writeBatch(this.conn, parts, written);
      },
      () => this.welcomed && this.conn.writableLength === 0,
    );
    this.writer.write(encodeFrame(C_HELLO, 0, 0, { v: PROTOCOL_VERSION, pid: process.pid }));
    this.writer.flush();
    this.conn.on('error', () => {});
    this.conn.on('close', () => {
      const err = this.welcomed
        ? new RdsError('ENETDOWN', `the RDS node at ${path} went away`)
        : new RdsError('ENETDOWN', `no RDS node answers at ${path}`);
      ko(err);
      this.down(err);
    });
  }

  private received(n: number, path: string, ok: () => void): void {
    try {
      for (const f of this.parser.filled(n)) this.frame(f, ok);
    } catch (e) {
      this.down(new RdsError('ENETDOWN', `the RDS node at ${path} sent a malformed frame (${(e as Error).message})`));
    }
  }

  private frame(f: Frame, ok: () => void): void {
    switch (f.type) {
      case N_WELCOME:
        if (f.meta.err !== undefined) throw new ProtocolError(String((f.meta.err as { message?: unknown }).message));
        this.welcomed = true;
        this.nodePid = typeof f.meta.pid === 'number' ? f.meta.pid : 0;
        if (typeof f.meta.budget === 'number' && f.meta.budget > 0) this.sendBudget = f.meta.budget;
        if (f.meta.options !== undefined) this.nodeOptions = optionsFromWire(f.meta.options);
        this.nodeEvents = f.meta.events === true;
        this.wireSends = typeof f.meta.v === 'number' && f.meta.v >= 4;
        if (this.sockets.size === 0) this.conn.unref();
        ok();
        return;
      case N_RESP: {
        const r = this.reqs.get(f.id);
        if (r === undefined) return;
        this.reqs.delete(f.id);
        if (f.meta.err !== undefined) r.reject(errorFrom(f.meta.err));
        // An answer with records in its data (the 'info' request) resolves with both.
        else r.resolve(f.meta.data === true ? { v: f.meta.v, data: Buffer.from(f.data) } : f.meta.v);
        return;
      }
      case N_MSG:
        this.sockets.get(f.sock)?.fromNode(f);
        return;
      case N_SENT: {
        const s = this.sockets.get(f.sock);
        if (s === undefined) return;
        s.handed(decodeCount(f.raw, f.metaStart, f.metaEnd).n);
        return;
      }
      case N_EVENT:
        // Socket 0: an event for every socket of this process (the node received a congestion map).
        if (f.sock === 0 && f.meta.ev === 'congmap') for (const s of this.sockets.values()) s.congMapReceived();
        // Socket 0, 'stack': one of the node's stack events this process watches (stack-watch.ts).
        else if (f.sock === 0 && f.meta.ev === 'stack') this.onStackEvent?.(f.meta);
        else this.sockets.get(f.sock)?.event(f.meta);
        return;
      default:
        throw new ProtocolError(`unknown frame type ${f.type}`);
    }
  }

  private down(err: RdsError): void {
    if (this.downError !== null) return;
    this.downError = err;
    this.conn.destroy();
    for (const r of this.reqs.values()) r.reject(err);
    this.reqs.clear();
    for (const s of [...this.sockets.values()]) s.nodeGone(err);
  }

  /** The node has welcomed this link and it is not down: a request written now reaches it. */
  get up(): boolean {
    return this.welcomed && this.downError === null;
  }

  /** This process's sockets together hold the whole budget: none may send. */
  get budgetFull(): boolean {
    return this.sndBytes >= this.sendBudget;
  }

  /** The process's budget is used up: `s` waits for room (its waiters and 'writable'). */
  waitForBudget(s: NodeBackend): void {
    this.budgetWaiters.add(s);
  }

  /** Bytes came back (SENT) or a socket closed with them: sockets waiting for the budget may go on. */
  released(bytes: number): void {
    this.sndBytes -= bytes;
    if (this.budgetWaiters.size === 0 || this.budgetFull) return;
    const waiting = [...this.budgetWaiters];
    this.budgetWaiters.clear();
    for (const s of waiting) s.budgetFreed();
  }

  addSocket(s: NodeBackend): number {
    const id = this.nextSock++;
    this.sockets.set(id, s);
    if (this.sockets.size === 1) this.conn.ref();
    return id;
  }

  removeSocket(id: number): void {
    const s = this.sockets.get(id);
    if (s !== undefined) this.budgetWaiters.delete(s);
    this.sockets.delete(id);
    if (this.sockets.size === 0 && this.welcomed) this.conn.unref();
  }

  newId(): number {
    const id = this.nextId;
    this.nextId = this.nextId >= 0xfffffff0 ? 1 : this.nextId + 1;
    return id;
  }

  /** A call answered by the node. */
  request(op: string, sock: number, meta: Record<string, unknown> = {}): Promise<unknown> {
    if (this.downError !== null) return Promise.reject(this.downError);
    const id = this.newId();
    this.writer.write(encodeFrame(C_REQ, sock, id, { op, ...meta }));
    return new Promise((resolve, reject) => this.reqs.set(id, { resolve, reject }));
  }

  /** A confirm send's answer, registered under `id`. */
  expect(id: number): Promise<unknown> {
    if (this.downError !== null) return Promise.reject(this.downError);
    return new Promise((resolve, reject) => this.reqs.set(id, { resolve, reject }));
  }

  forget(id: number): void {
    this.reqs.delete(id);
  }

  write(frame: Buffer[]): void {
    if (this.downError === null) this.writer.write(frame);
  }

  end(): void {
    this.writer.flush();
    this.conn.end();
  }
}
