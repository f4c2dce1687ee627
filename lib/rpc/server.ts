import { RdsError } from '../errors.js';
import type { RdsSocket } from '../core/socket.js';
import type { RdsMessage } from '../core/stack.js';
import {
  RPC_DUPLICATE,
  RPC_ERROR,
  RPC_EXPIRED,
  RPC_HEADER_SIZE,
  RPC_REPLY,
  RPC_REQUEST,
  decodeRpcHeader,
  encodeRpcHeader,
} from './wire.js';

/** Where a request came from and which it is. */
export interface RpcRequestInfo {
  address: string;
  port: number;
  instance: number;
  id: number;
}

/** Answers one request: the reply body (a string is sent as UTF-8); a throw sends an ERROR reply. */
export type RpcHandler = (
  data: Buffer,
  req: RpcRequestInfo,
) => Buffer | Uint8Array | string | undefined | void | Promise<Buffer | Uint8Array | string | undefined | void>;

/** The options of `serve()`. */
export interface RpcServerOptions {
  /** Handlers running at once; while at the limit the server stops reading (senders feel congestion). Default 64. */
  concurrency?: number;
  /** A reply waits at most this long (ms) for send-buffer room or an uncongested client. Default 30000. */
  replyTimeout?: number;
  /**
   * Per client instance, request ids this far below the highest seen are refused as EXPIRED
   * (never run) instead of being remembered forever. Default 65536.
   */
  dedupWindow?: number;
  /** Replies held for answering retransmissions (the most recent ones). Default 1024. */
  replyCacheSize?: number;
  /** A client instance silent this long (ms) is forgotten. Default 600000 (10 minutes). */
  clientIdleMs?: number;
}

/** What a server has seen, for tests and monitoring. */
export interface RpcServerStats {
  /** Requests whose handler was run. */
  handled: number;
  /** Retransmitted requests: never run again (answered from the reply cache, DUPLICATE, or ignored while running). */
  duplicates: number;
  /** Requests refused as older than the duplicate window (EXPIRED). */
  expired: number;
  /** Requests whose handler threw (answered with ERROR). */
  handlerErrors: number;
  /** Replies that could not be sent (the socket was closed, or send() failed or timed out). */
  replyErrors: number;
  /** Messages that did not parse as requests, dropped. */
  malformed: number;
}

interface ClientRecord {
  highest: number;
  /** Ids above highest - dedupWindow that were seen (running or done). */
  seen: Set<number>;
  running: Set<number>;
  lastSeen: number;
}

/**
 * The answering side of rds-socket/rpc: reads requests from `socket` (give it a socket of its
 * own), runs `handler` for each, and sends its result back. Each request id of a client instance
 * runs the handler at most once while this server lives; a retransmission is answered with the
 * held reply (or DUPLICATE once that is evicted) and never runs the handler again.
 */
export class RpcServer {
  readonly stats: RpcServerStats = {
    handled: 0,
    duplicates: 0,
    expired: 0,
    handlerErrors: 0,
    replyErrors: 0,
    malformed: 0,
  };
  private readonly socket: RdsSocket;
  private readonly handler: RpcHandler;
  private readonly concurrency: number;
  private readonly replyTimeout: number;
  private readonly window: number;
  private readonly cacheSize: number;
  private readonly idleMs: number;
  private readonly clients = new Map<string, ClientRecord>();
  /** Held replies by "client key|id", oldest first (Map keeps insertion order). */
  private readonly replies = new Map<string, Buffer[]>();
  private running = 0;
  private closed = false;
  private idleWaiters: (() => void)[] = [];
  private readonly sweeper: NodeJS.Timeout;
  private readonly onReadable = (): void => this.drain();

  constructor(socket: RdsSocket, handler: RpcHandler, opts: RpcServerOptions = {}) {
    if (socket === null || typeof socket !== 'object' || typeof socket.recvmsg !== 'function') {
      throw new RdsError('EINVAL', 'serve() needs a bound RdsSocket');
    }
    if (typeof handler !== 'function') throw new RdsError('EINVAL', 'serve() needs a handler function');
    this.socket = socket;
    this.handler = handler;
    this.concurrency = int(opts.concurrency, 'concurrency', 64);
    this.replyTimeout = int(opts.replyTimeout, 'replyTimeout', 30000);
    this.window = int(opts.dedupWindow, 'dedupWindow', 65536);
    this.cacheSize = int(opts.replyCacheSize, 'replyCacheSize', 1024, 0);
    this.idleMs = int(opts.clientIdleMs, 'clientIdleMs', 600000);
    this.sweeper = setInterval(() => this.sweep(), Math.min(this.idleMs, 60000));
    this.sweeper.unref();
    socket.on('readable', this.onReadable);
    socket.on('close', () => void this.close());
    this.drain();
  }

  /** Handlers running now. */
  get active(): number {
    return this.running;
  }

  /** Stops reading requests; resolves once running handlers have finished and replied. The socket stays open. */
  async close(): Promise<void> {
    if (!this.closed) {
      this.closed = true;
      clearInterval(this.sweeper);
      this.socket.off('readable', this.onReadable);
    }
    if (this.running > 0) await new Promise<void>((r) => this.idleWaiters.push(r));
  }

  private drain(): void {
    while (!this.closed && !this.socket.isClosed && this.running < this.concurrency) {
      const m = this.socket.recvmsg();
      if (m === null) return;
      if (m.address === '') continue;
      this.take(m);
    }
  }

  private take(m: RdsMessage): void {
    const h = decodeRpcHeader(m.data);
    if (h === null || h.type !== RPC_REQUEST) {
      this.stats.malformed++;
      return;
    }
    const key = `${m.address}|${m.port}|${h.instance}`;
    const now = Date.now();
    let c = this.clients.get(key);
    if (c === undefined) {
      c = { highest: 0, seen: new Set(), running: new Set(), lastSeen: now };
      this.clients.set(key, c);
    }
    c.lastSeen = now;
    const dest = { address: m.address, port: m.port };
    // Ids of one instance are issued in increasing order but may arrive slightly out of order
    // (requests wait for send room independently), so remember each id in a window below the highest.
    if (h.id <= c.highest - this.window) {
      this.stats.expired++;
      this.reply(dest, [encodeRpcHeader(RPC_EXPIRED, h.instance, h.id)]);
      return;
    }
    if (c.seen.has(h.id)) {
      this.stats.duplicates++;
      if (c.running.has(h.id)) return; // its reply goes out once the handler finishes
      const held = this.replies.get(`${key}|${h.id}`);
      this.reply(dest, held ?? [encodeRpcHeader(RPC_DUPLICATE, h.instance, h.id)]);
      return;
    }
    c.seen.add(h.id);
    if (h.id > c.highest) {
      c.highest = h.id;
      if (c.seen.size > 2 * this.window) {
        const floor = c.highest - this.window;
        for (const id of c.seen) if (id <= floor && !c.running.has(id)) c.seen.delete(id);
      }
    }
    c.running.add(h.id);
    this.running++;
    this.stats.handled++;
    const info: RpcRequestInfo = { address: m.address, port: m.port, instance: h.instance, id: h.id };
    let result: ReturnType<RpcHandler>;
    try {
      result = this.handler(m.data.subarray(RPC_HEADER_SIZE), info);
    } catch (e) {
      this.finish(key, c, h.instance, h.id, dest, null, e);
      return;
    }
    if (result instanceof Promise) {
      result.then(
        (r) => this.finish(key, c!, h.instance, h.id, dest, r, undefined),
        (e: unknown) => this.finish(key, c!, h.instance, h.id, dest, null, e ?? new Error('handler rejected')),
      );
    } else {
      this.finish(key, c, h.instance, h.id, dest, result, undefined);
    }
  }

  private finish(
    key: string,
    c: ClientRecord,
    instance: number,
    id: number,
    dest: { address: string; port: number },
    result: Buffer | Uint8Array | string | undefined | void | null,
    error: unknown,
  ): void {
    let frame: Buffer[];
    if (error !== undefined) {
      this.stats.handlerErrors++;
      const text = error instanceof Error ? error.message : String(error);
      frame = [encodeRpcHeader(RPC_ERROR, instance, id), Buffer.from(text, 'utf8')];
    } else {
      const body =
        typeof result === 'string'
          ? Buffer.from(result, 'utf8')
          : result instanceof Uint8Array
            ? result
            : Buffer.alloc(0);
      frame = [encodeRpcHeader(RPC_REPLY, instance, id), body as Buffer];
    }
    c.running.delete(id);
    if (this.cacheSize > 0) {
      this.replies.set(`${key}|${id}`, frame);
      if (this.replies.size > this.cacheSize) this.replies.delete(this.replies.keys().next().value!);
    }
    this.reply(dest, frame);
    this.running--;
    if (this.running === 0 && this.idleWaiters.length > 0) for (const w of this.idleWaiters.splice(0)) w();
    this.drain();
  }

  private reply(dest: { address: string; port: number }, frame: Buffer[]): void {
    if (this.socket.isClosed) {
      this.stats.replyErrors++;
      return;
    }
    this.socket.send(frame, dest, { timeout: this.replyTimeout }).catch(() => {
      this.stats.replyErrors++;
    });
  }

  private sweep(): void {
    const limit = Date.now() - this.idleMs;
    for (const [k, c] of this.clients) if (c.lastSeen < limit && c.running.size === 0) this.clients.delete(k);
  }
}

/** Starts an RpcServer answering requests on `socket` with `handler`. */
export function serve(socket: RdsSocket, handler: RpcHandler, opts?: RpcServerOptions): RpcServer {
  return new RpcServer(socket, handler, opts);
}

function int(v: unknown, name: string, dflt: number, min = 1): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min)
    throw new RdsError('EINVAL', `${name} must be an integer >= ${min}, got ${String(v)}`);
  return v;
}
