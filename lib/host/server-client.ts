// The host node's side of one attached client: its control socket, the calls it makes on its
// sockets, and the pump that hands received messages to it within its window.
import type { Socket } from 'node:net';
import { RDS_MAX_MSG_SIZE, SO_RDS_TRANSPORT, SO_RCVBUF, SO_SNDBUF, SOL_RDS, SOL_SOCKET } from '../constants.js';
import { RdsError } from '../errors.js';
import { RdsSocket } from '../core/socket.js';
import type { Receipt } from '../core/stack.js';
import { Fifo } from '../core/fifo.js';
import {
  C_ABORT,
  C_CREDIT,
  C_HELLO,
  C_REQ,
  C_SEND,
  encodeFrame,
  type Frame,
  FrameParser,
  FrameWriter,
  N_EVENT,
  N_MSG,
  N_RESP,
  N_SENT,
  N_WELCOME,
  writeBatch,
  num,
  PROTOCOL_VERSION,
  ProtocolError,
  str,
} from './protocol.js';
import type { HostNode } from './server.js';
import {
  type Item,
  MAX_CLIENT_WRITE_BACKLOG,
  MAX_OUTSTANDING_PER_CLIENT,
  MAX_SOCKETS_PER_CLIENT,
  type NodeSock,
  recvWindow,
  closeNodeSock,
  wireError,
} from './client-state.js';

let nextClientId = 1;

/** A client connection: one attached process (or thread). @internal */
export class Client {
  readonly id = nextClientId++;
  pid = 0;
  private hello = false;
  private readonly parser = new FrameParser();
  readonly writer: FrameWriter;
  readonly sockets = new Map<number, NodeSock>();
  private outstanding = 0;
  private gone = false;
  private infoAsked = false;

  constructor(
    private readonly node: HostNode,
    private readonly conn: Socket,
  ) {
    this.writer = new FrameWriter((parts) => {
      if (this.gone) return;
      if (conn.writableLength > MAX_CLIENT_WRITE_BACKLOG) {
        this.drop('it does not read its control socket');
        return;
      }
      writeBatch(conn, parts);
    });
    conn.on('data', (chunk: Buffer) => {
      if (this.gone) return;
      // rds-info speaks its line protocol to every control socket it finds, this one included.
      if (!this.hello && !this.infoAsked && chunk.length >= 5 && chunk.toString('latin1', 0, 5) === 'info\n') {
        this.infoAsked = true;
        this.gone = true;
        this.node.forget(this);
        conn.end(`${JSON.stringify(this.node.info())}\n`);
        return;
      }
      try {
        for (const f of this.parser.push(chunk)) {
          this.frame(f);
          if (this.gone) return;
        }
      } catch (e) {
        if (e instanceof ProtocolError) {
          this.node.counters.malformed++;
          this.drop(`protocol error: ${e.message}`);
        } else {
          this.drop(`internal error: ${(e as Error).message}`);
        }
      }
    });
    conn.on('error', () => {});
    conn.on('close', () => this.release('detached'));
  }

  sockCount(): { id: number; bound: string }[] {
    return [...this.sockets.values()].map((s) => ({ id: s.id, bound: s.bound }));
  }

  /** The node-side sockets of this client (for rds-info's pid column). */
  realSockets(): RdsSocket[] {
    return [...this.sockets.values()].map((s) => s.real);
  }

  /** Ends this client: its sockets close at once (ports released, unacknowledged messages discarded). */
  drop(why: string): void {
    if (this.gone) return;
    this.node.counters.dropped++;
    this.node.log(`client ${this.id} (pid ${this.pid}) dropped: ${why}`);
    this.release(null);
    this.conn.destroy();
  }

  private release(how: string | null): void {
    if (this.gone) return;
    this.gone = true;
    if (how !== null) {
      this.node.counters.detached++;
      this.node.log(`client ${this.id} (pid ${this.pid}) ${how}, ${this.sockets.size} socket(s) closed`);
    }
    for (const s of this.sockets.values()) closeNodeSock(s);
    this.sockets.clear();
    this.node.forget(this);
  }

  private send(type: number, sock: number, id: number, meta: object | null, data?: Buffer): void {
    if (!this.gone) this.writer.write(encodeFrame(type, sock, id, meta, data));
  }

  private answer(id: number, value: unknown): void {
    this.outstanding--;
    this.send(N_RESP, 0, id, { ok: true, v: value ?? null });
  }

  private fail(id: number, e: unknown): void {
    this.outstanding--;
    this.send(N_RESP, 0, id, { err: wireError(e) });
  }

  private frame(f: Frame): void {
    if (!this.hello) {
      if (f.type !== C_HELLO) throw new ProtocolError('the first frame must be HELLO');
      const v = num(f.meta.v, 'v');
      this.pid = typeof f.meta.pid === 'number' && Number.isInteger(f.meta.pid) ? f.meta.pid : 0;
      if (v !== PROTOCOL_VERSION) {
        this.send(N_WELCOME, 0, 0, {
          v: PROTOCOL_VERSION,
          err: { code: 'EPROTO', message: `protocol version ${v} is not ${PROTOCOL_VERSION}` },
        });
        this.writer.flush();
        throw new ProtocolError(`unsupported protocol version ${v}`);
      }
      this.hello = true;
      this.node.counters.attached++;
      this.node.log(`client ${this.id} attached (pid ${this.pid}, not verified)`);
      this.send(N_WELCOME, 0, 0, { v: PROTOCOL_VERSION, pid: process.pid });
      return;
    }
    switch (f.type) {
      case C_REQ:
        if (++this.outstanding > MAX_OUTSTANDING_PER_CLIENT) throw new ProtocolError('too many outstanding calls');
        this.request(f);
        return;
      case C_SEND:
        this.sendFrame(f);
        return;
      case C_CREDIT: {
        const s = this.sockets.get(f.sock);
        if (s === undefined) return; // closed meanwhile
        const n = num(f.meta.n, 'n');
        const k = num(f.meta.k, 'k');
        if (n < 0 || n > s.inflight || k < 0 || k > s.held.length)
          throw new ProtocolError('credit for more than was delivered');
        s.inflight -= n;
        // The application has read these: now the senders may hear so (send({ confirm })).
        for (let i = 0; i < k; i++) {
          const r = s.held.shift();
          if (r) r.owner.consumed(r);
        }
        this.pump(s);
        return;
      }
      case C_ABORT: {
        const s = this.sockets.get(f.sock);
        if (s === undefined) return;
        for (const it of s.backlog) if (it.id === f.id) it.ac?.abort();
        const c = this.confirming.get(f.id);
        c?.abort();
        return;
      }
      default:
        throw new ProtocolError(`unknown frame type ${f.type}`);
    }
  }

  /** AbortControllers of confirm sends handed to the real socket, by request id. */
  private readonly confirming = new Map<number, AbortController>();

  private sockOf(f: Frame): NodeSock {
    const s = this.sockets.get(f.sock);
    if (s === undefined) throw new RdsError('EBADF', `no socket ${f.sock} (closed)`);
    return s;
  }

  private request(f: Frame): void {
    const op = str(f.meta.op, 'op');
    try {
      switch (op) {
        case 'open': {
          if (this.sockets.has(f.sock)) throw new ProtocolError(`socket id ${f.sock} already open`);
          if (this.sockets.size >= MAX_SOCKETS_PER_CLIENT)
            throw new RdsError('ENOBUFS', `at most ${MAX_SOCKETS_PER_CLIENT} sockets per attached process`);
          const real = new RdsSocket({ stack: this.node.stack });
          const s: NodeSock = {
            id: f.sock,
            real,
            backlog: [],
            backlogBytes: 0,
            running: false,
            closed: false,
            inflight: 0,
            sentAcc: 0,
            sentMsgs: 0,
            held: new Fifo(),
            takeReceipt: () => null,
            bound: '',
          };
          this.sockets.set(f.sock, s);
          let last: Receipt | null = null;
          real.holdReceipt = (r) => (last = r);
          s.takeReceipt = () => {
            const r = last;
            last = null;
            return r;
          };
          real.on('readable', () => this.pump(s));
          real.on('peer-down', (ev) => this.send(N_EVENT, s.id, 0, { ev: 'peer-down', ...ev }));
          real.on('peer-up', (ev) => this.send(N_EVENT, s.id, 0, { ev: 'peer-up', ...ev }));
          this.answer(f.id, null);
          return;
        }
        case 'bind': {
          const s = this.sockOf(f);
          const address = str(f.meta.address, 'address');
          const port = num(f.meta.port, 'port');
          if (f.meta.transport !== undefined)
            s.real.setsockopt(SOL_RDS, SO_RDS_TRANSPORT, num(f.meta.transport, 'transport'));
          s.real.bind({ address, port }).then(
            () => {
              const a = s.real.address();
              s.bound = `${a.address}:${a.port}`;
              this.answer(f.id, {
                address: a.address,
                port: a.port,
                transport: s.real.getsockopt(SOL_RDS, SO_RDS_TRANSPORT),
              });
            },
            (e) => this.fail(f.id, e),
          );
          return;
        }
        case 'setsockopt': {
          const s = this.sockOf(f);
          const level = num(f.meta.level, 'level');
          const name = num(f.meta.name, 'name');
          const value = f.meta.value;
          if (value !== null && typeof value === 'object') {
            // RDS_CANCEL_SENT_TO: messages still waiting here go first, as the real socket drops its own.
            const d = value as { address?: unknown; port?: unknown };
            const address = str(d.address, 'address');
            const port = num(d.port, 'port');
            this.cancelBacklog(s, address, port);
            s.real.setsockopt(level, name, { address, port } as never);
          } else {
            if (typeof value !== 'number' && typeof value !== 'boolean')
              throw new ProtocolError('option value must be a number, boolean or address');
            s.real.setsockopt(level, name, value);
            if (level === SOL_SOCKET && name === SO_RCVBUF) this.pump(s);
          }
          this.answer(f.id, null);
          return;
        }
        case 'flush': {
          const s = this.sockOf(f);
          s.real.flush().then(
            () => this.answer(f.id, null),
            (e) => this.fail(f.id, e),
          );
          return;
        }
        case 'close': {
          const s = this.sockets.get(f.sock);
          if (s !== undefined) {
            this.sockets.delete(f.sock);
            for (const it of s.backlog)
              if (it.id !== 0)
                this.fail(it.id, new RdsError('ECANCELED', 'the socket was closed before the peer had the message'));
            closeNodeSock(s);
          }
          this.answer(f.id, null);
          return;
        }
        default:
          throw new ProtocolError(`unknown op ${op}`);
      }
    } catch (e) {
      if (e instanceof ProtocolError) throw e;
      this.fail(f.id, e);
    }
  }

  private cancelBacklog(s: NodeSock, address: string, port: number): void {
    const keep: Item[] = [];
    for (const it of s.backlog) {
      if (it.dest.address === address && it.dest.port === port) {
        if (it.ac !== null) {
          it.ac.abort(); // the head, waiting inside real.send(): it leaves the backlog itself
          keep.push(it);
          continue;
        }
        this.handed(s, it);
        if (it.id !== 0)
          this.fail(it.id, new RdsError('ECANCELED', `cancelled by RDS_CANCEL_SENT_TO ${address}:${port}`));
      } else {
        keep.push(it);
      }
    }
    s.backlog = keep;
  }

  private sendFrame(f: Frame): void {
    const s = this.sockets.get(f.sock);
    const confirm = f.meta.cf === 1;
    if (confirm && ++this.outstanding > MAX_OUTSTANDING_PER_CLIENT)
      throw new ProtocolError('too many outstanding calls');
    if (s === undefined) {
      // Closed by a call already in flight: answer as a closed socket would.
      if (confirm) this.fail(f.id, new RdsError('EBADF', 'sendmsg() on a closed socket; make a new RdsSocket'));
      return;
    }
    const it: Item = {
      data: f.data,
      dest: { address: str(f.meta.a, 'a'), port: num(f.meta.p, 'p') },
      flags: typeof f.meta.f === 'number' ? f.meta.f : 0,
      cookie: typeof f.meta.c === 'number' ? f.meta.c : undefined,
      confirm,
      id: confirm ? f.id : 0,
      ac: null,
    };
    s.backlog.push(it);
    s.backlogBytes += it.data.length;
    // A client keeps at most SO_SNDBUF bytes in flight to us; allow one message of slack.
    const limit = s.real.getsockopt(SOL_SOCKET, SO_SNDBUF) + RDS_MAX_MSG_SIZE;
    if (s.backlogBytes > limit)
      throw new ProtocolError(`socket ${s.id} sent ${s.backlogBytes} bytes past its send buffer`);
    if (!s.running) void this.run(s);
  }

  /** A message left the backlog (queued by the real socket, failed or cancelled): the client's budget has it back. */
  private handed(s: NodeSock, it: Item): void {
    s.backlogBytes -= it.data.length;
    if (s.sentMsgs === 0) {
      this.writer.beforeFlush(() => {
        this.send(N_SENT, s.id, 0, { n: s.sentAcc, k: s.sentMsgs });
        s.sentAcc = 0;
        s.sentMsgs = 0;
      });
    }
    s.sentAcc += it.data.length;
    s.sentMsgs++;
  }

  /** Hands the backlog to the real socket in order; waits (without blocking other sockets) for room or an uncongested port. */
  private async run(s: NodeSock): Promise<void> {
    s.running = true;
    try {
      while (s.backlog.length > 0 && !s.closed) {
        const it = s.backlog[0]!;
        const opts =
          it.cookie !== undefined
            ? { flags: it.flags, zcopyCookie: it.cookie }
            : it.flags !== 0
              ? { flags: it.flags }
              : undefined;
        if (it.confirm) {
          s.backlog.shift();
          this.handed(s, it);
          const ac = new AbortController();
          this.confirming.set(it.id, ac);
          s.real.send(it.data, it.dest, { ...opts, confirm: true, signal: ac.signal }).then(
            () => {
              this.confirming.delete(it.id);
              this.answer(it.id, null);
            },
            (e) => {
              this.confirming.delete(it.id);
              this.fail(it.id, e);
            },
          );
          continue;
        }
        let congested = false;
        try {
          s.real.sendmsg(it.data, it.dest, opts);
          s.backlog.shift();
          this.handed(s, it);
          continue;
        } catch (e) {
          const code = e instanceof RdsError ? e.code : '';
          if (code !== 'EAGAIN' && code !== 'ENOBUFS') {
            // Checked by the client before it sent; what is left (a closed or unbound socket) has nobody to tell.
            s.backlog.shift();
            this.handed(s, it);
            this.node.counters.sendFailed++;
            continue;
          }
          congested = code === 'ENOBUFS';
        }
        if (congested) this.send(N_EVENT, s.id, 0, { ev: 'cong', a: it.dest.address, p: it.dest.port });
        it.ac = new AbortController();
        // send() may wait for room first (EAGAIN) and then for the port to clear: tell the client
        // as soon as the destination is congested, whichever came first, or its sendmsg() only
        // ever sees EAGAIN and never the ENOBUFS the kernel's API gives.
        const stack = this.node.stack;
        const dest = it.dest;
        let waiting = true;
        const watch = (): void => {
          if (!waiting || congested) return;
          if (stack.congMap(dest.address).test(dest.port)) {
            congested = true;
            this.send(N_EVENT, s.id, 0, { ev: 'cong', a: dest.address, p: dest.port });
          } else stack.addCongWaiter(watch);
        };
        watch();
        try {
          await s.real.send(it.data, it.dest, { ...opts, signal: it.ac.signal });
        } catch {
          this.node.counters.sendFailed++;
        } finally {
          waiting = false;
          stack.removeCongWaiter(watch);
        }
        if (congested) this.send(N_EVENT, s.id, 0, { ev: 'uncong', a: it.dest.address, p: it.dest.port });
        if (s.backlog[0] === it) s.backlog.shift();
        this.handed(s, it);
      }
    } finally {
      s.running = false;
    }
  }

  /** Moves received messages to the client while its window has room. */
  private pump(s: NodeSock): void {
    if (s.closed) return;
    const window = recvWindow(s);
    while (s.inflight < window) {
      const m = s.real.recvmsg();
      if (m === null) return;
      const meta: Record<string, unknown> = { a: m.address, p: m.port };
      if (m.timestamp !== undefined) meta.ts = m.timestamp;
      if (m.zcopyCompletions !== undefined) meta.zc = m.zcopyCompletions;
      if (m.congestionUpdate !== undefined) meta.cu = m.congestionUpdate.toString();
      s.inflight += m.data.length;
      s.held.push(s.takeReceipt());
      this.send(N_MSG, s.id, 0, meta, m.data);
    }
  }
}
