import { randomInt } from 'node:crypto';
import { RdsError, abortError } from '../errors.js';
import type { RdsSocket, RdsData } from '../core/socket.js';
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

/** The options of `new RpcClient()`. */
export interface RpcClientOptions {
  /** Default per-request timeout in ms, counted from request() (time spent queued included). Default 5000. */
  timeout?: number;
  /** Requests sent and not yet answered at once; more wait in order. Default 64. */
  maxInFlight?: number;
  /** Requests allowed to wait for a slot; beyond this request() rejects with EAGAIN. Default 10000. */
  maxQueued?: number;
}

/** The options of one `request()`. */
export interface RequestOptions {
  /** This request's timeout in ms (overrides the client's). */
  timeout?: number;
  /** Aborts this request; it is removed from the send queue if the server does not have it yet. */
  signal?: AbortSignal;
}

/** What a client has seen, for tests and monitoring. */
export interface RpcClientStats {
  sent: number;
  replied: number;
  failed: number;
  timedOut: number;
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

const TIMEOUT_NAME = 'TimeoutError';

/**
 * The requesting side of rds-socket/rpc. It reads every message arriving on `socket` (give it a
 * socket of its own) and matches replies to requests by id. Each request is sent with
 * `send({ confirm, signal })`: when its timeout or signal fires before the server has it, the
 * message is removed from the send queue, not just forgotten, and the promise rejects.
 */
export class RpcClient {
  /** Random, never 0: a restarted client gets a fresh id space on every server. */
  readonly instance = randomInt(1, 0x100000000);
  readonly stats: RpcClientStats = { sent: 0, replied: 0, failed: 0, timedOut: 0, lateReplies: 0, malformed: 0 };
  private readonly socket: RdsSocket;
  private readonly timeout: number;
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
   * Sends `data` to the server at `dest` and resolves with its reply. Rejects with ETIMEDOUT
   * (timeout), ECANCELED (signal, or close()), EAGAIN (too many queued), the send's error (e.g.
   * the destination refused it), or an RpcRemoteError (the handler threw).
   */
  async request(dest: { address: string; port: number }, data: RdsData, opts: RequestOptions = {}): Promise<Buffer> {
    if (this.closed) throw new RdsError('EBADF', 'request() on a closed RpcClient; make a new one');
    const ms = positive(opts?.timeout, 'timeout', this.timeout);
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(new DOMException(`request timed out after ${ms} ms`, TIMEOUT_NAME)), ms);
    const user = opts?.signal;
    const onUserAbort = (): void => ctl.abort(user!.reason);
    if (user !== undefined) {
      if (user.aborted) ctl.abort(user.reason);
      else user.addEventListener('abort', onUserAbort, { once: true });
    }
    const signal = ctl.signal;
    let holding = false;
    let id = 0;
    try {
      await this.acquire(signal);
      holding = true;
      id = this.nextId++;
      const header = encodeRpcHeader(RPC_REQUEST, this.instance, id);
      const body = Array.isArray(data) ? data : [data as Uint8Array];
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
        const onAbort = (): void => finish(abortError(signal, 'request()'));
        this.pending.set(id, { resolve: (r) => finish(null, r), reject: (e) => finish(e) });
        signal.addEventListener('abort', onAbort, { once: true });
        this.stats.sent++;
        // confirm + signal: an aborted request that the server has not read is cancelled in the
        // send queue (as RDS_CANCEL_SENT_TO would), so it is never (re)transmitted afterwards.
        this.socket.send([header, ...body], dest, { confirm: true, signal }).catch((e: Error) => {
          finish(signal.aborted ? abortError(signal, 'request()') : e);
        });
      });
    } catch (e) {
      if (e instanceof RdsError && e.code === 'ETIMEDOUT') this.stats.timedOut++;
      else this.stats.failed++;
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

  private acquire(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.reject(abortError(signal, 'request()'));
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
      const w: SlotWaiter = {
        grant: () => {
          signal.removeEventListener('abort', onAbort);
          if (this.closed) {
            reject(new RdsError('ECANCELED', 'the RpcClient was closed'));
            return;
          }
          this.active++;
          resolve();
        },
      };
      const onAbort = (): void => {
        const i = this.waiting.indexOf(w);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(abortError(signal, 'request()'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
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
