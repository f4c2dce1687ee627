import { randomInt } from 'node:crypto';
import { RdsError, abortError } from '../errors.js';
import type { RdsSocket } from '../core/socket.js';
import type { RdsData } from '../core/socket-types.js';
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

/** A request the server answered with an error (its handler threw), or refused as a duplicate. */
export class RpcRemoteError extends Error {
  /** 'EREMOTE' (the handler failed), 'EDUPLICATE' or 'EEXPIRED' (the server did not run it again). */
  readonly code: 'EREMOTE' | 'EDUPLICATE' | 'EEXPIRED';
  constructor(code: 'EREMOTE' | 'EDUPLICATE' | 'EEXPIRED', message: string) {
    super(`${code}: ${message}`);
    this.name = 'RpcRemoteError';
    this.code = code;
  }
}

/**
 * A request's timeout: `sent` false when it fired while the request still waited for an in-flight
 * slot (never sent: the server never has it), true once sent, when it only means "not confirmed":
 * the server may have the request and may run it (later). Its code is ETIMEDOUT either way.
 */
export class RpcTimeoutError extends RdsError {
  readonly sent: boolean;
  constructor(sent: boolean, message: string) {
    super('ETIMEDOUT', message);
    this.sent = sent;
  }
}

/** The options of `new RpcClient()`. */
export interface RpcClientOptions {
  /**
   * Default per-request timeout in ms, counted from request() (time spent queued included). Default
   * 5000. A timeout after the request was sent means "not confirmed", not "not executed".
   */
  timeout?: number;
  /**
   * Default longest wait in ms for an in-flight slot: a request still queued then is dropped from
   * the queue, never sent, and rejects with an RpcTimeoutError whose `sent` is false. Default: no
   * limit of its own (only `timeout`).
   */
  queueTimeout?: number;
  /** Requests sent and not yet answered at once; more wait in order. Default 64. */
  maxInFlight?: number;
  /** Requests allowed to wait for a slot; beyond this request() rejects with EAGAIN. Default 10000. */
  maxQueued?: number;
}

/** The options of one `request()`. */
export interface RequestOptions {
  /** This request's timeout in ms (overrides the client's). */
  timeout?: number;
  /** This request's longest wait for an in-flight slot in ms (overrides the client's queueTimeout). */
  queueTimeout?: number;
  /** Aborts this request; it is removed from the send queue if the server does not have it yet. */
  signal?: AbortSignal;
}

/** What a client has seen, for tests and monitoring. */
export interface RpcClientStats {
  sent: number;
  replied: number;
  failed: number;
  timedOut: number;
  /** Of timedOut, those that timed out still queued for a slot: never sent. */
  timedOutQueued: number;
  /** Replies for a request no longer waiting (timed out, or a second reply): dropped, never delivered. */
  lateReplies: number;
  /** Messages on the socket that are not rpc replies: dropped. */
  malformed: number;
}

interface Pending {
  resolve(data: Buffer): void;
  reject(err: Error): void;
}

interface SlotWaiter {
  grant(): void;
}

function positive(v: unknown, name: string, dflt: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !(v > 0)) throw new RdsError('EINVAL', `${name} must be a number > 0, got ${String(v)}`);
  return v;
}

/** The abort reason of a request's own timeout (not the caller's signal). */
const OWN_TIMEOUT = Symbol('request timeout');

/**
 * The requesting side of rds-socket/rpc. It reads every message arriving on `socket` (give it a
 * socket of its own) and matches replies to requests by id. Each request is sent with
 * `send({ confirm, signal })`: when its timeout or signal fires before the server has it, the
 * message is removed from the send queue, not just forgotten, and the promise rejects. What the
 * server's node already received still runs there: a timeout means "not confirmed", not "not
 * executed" (docs/rpc.md).
 */
export class RpcClient {
  /** Random, never 0: a restarted client gets a fresh id space on every server. */
  readonly instance = randomInt(1, 0x100000000);
  readonly stats: RpcClientStats = {
    sent: 0,
    replied: 0,
    failed: 0,
    timedOut: 0,
    timedOutQueued: 0,
    lateReplies: 0,
    malformed: 0,
  };
  private readonly socket: RdsSocket;
  private readonly timeout: number;
  private readonly queueTimeout: number | undefined;
  private readonly maxInFlight: number;
  private readonly maxQueued: number;
  private nextId = 1;
  private active = 0;
  private readonly waiting: SlotWaiter[] = [];
  private readonly pending = new Map<number, Pending>();
  private closed = false;
  private readonly onReadable = (): void => this.drain();

  constructor(socket: RdsSocket, opts: RpcClientOptions = {}) {
    if (socket === null || typeof socket !== 'object' || typeof socket.recvmsg !== 'function') {
      throw new RdsError('EINVAL', 'RpcClient needs a bound RdsSocket');
    }
    this.socket = socket;
    this.timeout = positive(opts.timeout, 'timeout', 5000);
    this.queueTimeout = opts.queueTimeout === undefined ? undefined : positive(opts.queueTimeout, 'queueTimeout', 0);
    this.maxInFlight = Math.floor(positive(opts.maxInFlight, 'maxInFlight', 64));
    this.maxQueued = Math.floor(positive(opts.maxQueued, 'maxQueued', 10000));
    socket.on('readable', this.onReadable);
    socket.on('close', () => this.close());
    this.drain();
  }

  /** Requests sent and not yet settled. */
  get inFlight(): number {
    return this.active;
  }

  /** Requests waiting for an in-flight slot. */
  get queued(): number {
    return this.waiting.length;
  }

  /**
   * Sends `data` (a string goes as UTF-8) to the server at `dest` and resolves with its reply.
   * Rejects with ETIMEDOUT (an RpcTimeoutError: `sent` says whether it had left the queue),
   * ECANCELED (signal, or close()), EAGAIN (too many queued), the send's error (e.g. the
   * destination refused it), or an RpcRemoteError (the handler threw). A timeout or a cancel of a
   * sent request means "not confirmed", not "not executed": the server may still run it.
   */
  async request(
    dest: { address: string; port: number },
    data: RdsData | string,
    opts: RequestOptions = {},
  ): Promise<Buffer> {
    if (this.closed) throw new RdsError('EBADF', 'request() on a closed RpcClient; make a new one');
    const ms = positive(opts?.timeout, 'timeout', this.timeout);
    const queueMs =
      opts?.queueTimeout !== undefined ? positive(opts.queueTimeout, 'queueTimeout', 0) : this.queueTimeout;
    const body =
      typeof data === 'string' ? [Buffer.from(data, 'utf8')] : Array.isArray(data) ? data : [data as Uint8Array];
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(OWN_TIMEOUT), ms);
    const user = opts?.signal;
    const onUserAbort = (): void => ctl.abort(user!.reason);
    if (user !== undefined) {
      if (user.aborted) ctl.abort(user.reason);
      else user.addEventListener('abort', onUserAbort, { once: true });
    }
    const signal = ctl.signal;
    const to = `${dest?.address}:${dest?.port}`;
    /** Why the request failed once `signal` fired: its own timeout (queued or sent) or the caller's signal. */
    const aborted = (sent: boolean): Error => {
      if (signal.reason !== OWN_TIMEOUT) return abortError(signal, 'request()');
      return sent
        ? new RpcTimeoutError(
            true,
            `request() to ${to} timed out after ${ms} ms: not confirmed, which is not "not executed": the server may have it and may still run it (make the handler idempotent or deduplicate before retrying)`,
          )
        : new RpcTimeoutError(
            false,
            `request() to ${to} timed out after ${ms} ms still queued behind ${this.maxInFlight} requests in flight (maxInFlight): never sent`,
          );
    };
    let holding = false;
    let id = 0;
    try {
      await this.acquire(signal, queueMs, aborted, to);
      holding = true;
      id = this.nextId++;
      const header = encodeRpcHeader(RPC_REQUEST, this.instance, id);
      return await new Promise<Buffer>((resolve, reject) => {
        let settled = false;
        const finish = (err: Error | null, reply?: Buffer): void => {
          if (settled) return;
          settled = true;
          this.pending.delete(id);
          signal.removeEventListener('abort', onAbort);
          if (err) reject(err);
          else resolve(reply!);
        };
        const onAbort = (): void => finish(aborted(true));
        this.pending.set(id, { resolve: (r) => finish(null, r), reject: (e) => finish(e) });
        signal.addEventListener('abort', onAbort, { once: true });
        this.stats.sent++;
        // confirm + signal: an aborted request that the server has not read is cancelled in the
        // send queue (as RDS_CANCEL_SENT_TO would), so it is not (re)transmitted afterwards; what
        // the server already read (or what TCP already carries to it) still runs there.
        this.socket.send([header, ...body], dest, { confirm: true, signal }).catch((e: Error) => {
          finish(signal.aborted ? aborted(true) : e);
        });
      });
    } catch (e) {
      if (e instanceof RdsError && e.code === 'ETIMEDOUT') {
        this.stats.timedOut++;
        if (e instanceof RpcTimeoutError && !e.sent) this.stats.timedOutQueued++;
      } else this.stats.failed++;
      throw e;
    } finally {
      clearTimeout(timer);
      user?.removeEventListener('abort', onUserAbort);
      if (holding) this.release();
    }
  }

  /** Rejects every pending and queued request with ECANCELED and stops reading the socket (which stays open). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.socket.off('readable', this.onReadable);
    const err = new RdsError('ECANCELED', 'the RpcClient was closed');
    for (const p of [...this.pending.values()]) p.reject(err);
    for (const w of this.waiting.splice(0)) w.grant();
  }

  /** An in-flight slot, waiting in order for one; `queueMs` bounds the wait (the request is then never sent). */
  private acquire(
    signal: AbortSignal,
    queueMs: number | undefined,
    aborted: (sent: boolean) => Error,
    to: string,
  ): Promise<void> {
    if (signal.aborted) return Promise.reject(aborted(false));
    if (this.closed) return Promise.reject(new RdsError('ECANCELED', 'the RpcClient was closed'));
    if (this.active < this.maxInFlight && this.waiting.length === 0) {
      this.active++;
      return Promise.resolve();
    }
    if (this.waiting.length >= this.maxQueued) {
      return Promise.reject(
        new RdsError('EAGAIN', `${this.maxQueued} requests already wait for a slot; raise maxQueued or slow down`),
      );
    }
    return new Promise<void>((resolve, reject) => {
      let queueTimer: NodeJS.Timeout | undefined;
      const leave = (err: Error): void => {
        signal.removeEventListener('abort', onAbort);
        clearTimeout(queueTimer);
        const i = this.waiting.indexOf(w);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(err);
      };
      const w: SlotWaiter = {
        grant: () => {
          signal.removeEventListener('abort', onAbort);
          clearTimeout(queueTimer);
          if (this.closed) {
            reject(new RdsError('ECANCELED', 'the RpcClient was closed'));
            return;
          }
          this.active++;
          resolve();
        },
      };
      const onAbort = (): void => leave(aborted(false));
      signal.addEventListener('abort', onAbort, { once: true });
      if (queueMs !== undefined)
        queueTimer = setTimeout(
          () =>
            leave(
              new RpcTimeoutError(
                false,
                `request() to ${to} waited ${queueMs} ms (queueTimeout) for one of ${this.maxInFlight} in-flight slots (maxInFlight): dropped from the queue, never sent`,
              ),
            ),
          queueMs,
        );
      this.waiting.push(w);
    });
  }

  private release(): void {
    this.active--;
    if (this.active < this.maxInFlight) this.waiting.shift()?.grant();
  }

  private drain(): void {
    if (this.closed || this.socket.isClosed) return;
    for (;;) {
      const m = this.socket.recvmsg();
      if (m === null) return;
      if (m.address === '') continue; // a zero-copy completion or congestion notice, not a message
      const h = decodeRpcHeader(m.data);
      if (h === null || h.type === RPC_REQUEST || h.instance !== this.instance) {
        this.stats.malformed++;
        continue;
      }
      const p = this.pending.get(h.id);
      if (p === undefined) {
        this.stats.lateReplies++;
        continue;
      }
      const body = m.data.subarray(RPC_HEADER_SIZE);
      if (h.type === RPC_REPLY) {
        this.stats.replied++;
        p.resolve(body);
      } else if (h.type === RPC_ERROR) {
        p.reject(new RpcRemoteError('EREMOTE', `${m.address}:${m.port} failed the request: ${body.toString('utf8')}`));
      } else if (h.type === RPC_DUPLICATE) {
        p.reject(
          new RpcRemoteError(
            'EDUPLICATE',
            `${m.address}:${m.port} already handled request ${h.id} and no longer holds its reply`,
          ),
        );
      } else if (h.type === RPC_EXPIRED) {
        p.reject(
          new RpcRemoteError(
            'EEXPIRED',
            `${m.address}:${m.port} refused request ${h.id}: older than its duplicate window, not run`,
          ),
        );
      }
    }
  }
}
