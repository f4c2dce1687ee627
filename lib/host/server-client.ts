// The host node's side of one attached client: its control socket, the calls it makes on its
// sockets; node-deliver.ts hands received messages to it within its window.
import type { Socket } from 'node:net';
import { nodeInfoAnswer, nodeReportAnswer } from './attached-info.js';
import {
  SIOCRDSSETTOS,
  SO_RDS_MSG_RXPATH_LATENCY,
  SO_RDS_TRANSPORT,
  SO_RCVBUF,
  SOL_RDS,
  SOL_SOCKET,
} from '../constants.js';
import { unpackRxTrace } from '../core/rx-trace.js';
import { RdsError } from '../errors.js';
import { RdsSocket } from '../core/socket.js';
import { LocalBackend } from '../core/local-backend.js';
import {
  C_ABORT,
  C_CREDIT,
  C_HELLO,
  C_REQ,
  C_SEND,
  encodeFrame,
  type Frame,
  FrameWriter,
  N_EVENT,
  N_RESP,
  N_WELCOME,
  writeBatch,
  num,
  MIN_CLIENT_VERSION,
  PROTOCOL_VERSION,
  ProtocolError,
  str,
} from './protocol.js';
import type { HostNode } from './server.js';
import { decodeCount } from './hot-frames.js';
import { cutThrough, type DeliveryTarget, pump } from './node-deliver.js';
import { peerCredentials, widenSendBuffer } from './unix-peer.js';
import { feedChunk, nodeFrameParser } from './frame-slab.js';
import { adoptWithOnread } from '../onread.js';
import { controlAnswer } from '../core/ext/control-commands.js';
import { SendSide } from './node-send.js';
import {
  MAX_CLIENT_WRITE_BACKLOG,
  MAX_OUTSTANDING_PER_CLIENT,
  MAX_SOCKETS_PER_CLIENT,
  wireError,
} from './client-state.js';
import { NodeSock, NodeStateError } from './node-sock.js';
import { optionsToWire } from './node-options.js';
import { StackWatch } from './stack-watch.js';

let nextClientId = 1;

/** A client connection: one attached process (or thread). @internal */
export class Client implements DeliveryTarget {
  readonly id = nextClientId++;
  /** The client's process: from SO_PEERCRED when the addon is there, else as its hello claims. */
  pid = 0;
  /** Its user and group (SO_PEERCRED), -1 when unknown. */
  uid = -1;
  gid = -1;
  /** The pid its hello claimed. */
  claimedPid = 0;
  /** pid, uid and gid come from the kernel, not from the client. */
  readonly verified: boolean;
  private hello = false;
  private readonly parser = nodeFrameParser((n) => this.node.stack.wireSlab.alloc(n));
  private readonly conn: Socket;
  readonly writer: FrameWriter;
  private readonly sends: SendSide;
  readonly sockets = new Map<number, NodeSock>();
  private outstanding = 0;
  private gone = false;
  /** Its hello's protocol version (0 before the hello). */
  version = 0;
  private infoAsked = false;
  /** The stack events this client asked for (an attached stack with listeners), or null. */
  private watch: StackWatch | null = null;

  /** `accepted`: the control socket as the server accepted it, paused (nothing read yet). */
  constructor(
    readonly node: HostNode,
    accepted: Socket,
  ) {
    // Reads go into the parser's slabs (frame-slab.ts); where Node cannot hand the accepted
    // handle over, its chunks are fed to the same parser.
    const conn =
      adoptWithOnread(accepted, {
        buffer: () => this.parser.readBuffer(),
        callback: (n: number, buf: Uint8Array): boolean => {
          this.received(buf as Buffer, n);
          return true;
        },
      }) ?? accepted;
    this.conn = conn;
    if (conn === accepted)
      conn.on('data', (chunk: Buffer) => feedChunk(this.parser, chunk, (b, n) => this.received(b, n)));
    const cred = peerCredentials(conn);
    this.verified = cred !== null;
    if (cred !== null) ({ pid: this.pid, uid: this.uid, gid: this.gid } = cred);
    widenSendBuffer(conn);
    this.writer = new FrameWriter(
      (parts, written) => {
        if (this.gone) return false;
        if (conn.writableLength > MAX_CLIENT_WRITE_BACKLOG) {
          this.drop('it does not read its control socket');
          return false;
        }
        return writeBatch(conn, parts, written);
      },
      () => this.hello && conn.writableLength === 0,
    );
    this.sends = new SendSide(this);
    // SENT reports ride along with whatever goes to the client anyway.
    this.writer.piggyback = this.sends.reportSent;
    conn.on('error', () => {});
    conn.on('close', () => this.release('detached'));
  }

  /** `n` bytes were read into `buf` (the parser's memory). */
  private received(buf: Buffer, n: number): void {
    if (this.gone) return;
    // rds-info and rds-ctl speak their line protocol to every control socket they find, this
    // one included: a request line instead of the attach protocol's hello.
    const line = !this.hello && !this.infoAsked ? controlLine(buf.subarray(0, n)) : null;
    if (line !== null) {
      this.infoAsked = true;
      this.gone = true;
      this.node.forget(this);
      this.conn.end(`${JSON.stringify(this.controlRequest(line))}\n`);
      return;
    }
    try {
      for (const f of this.parser.filled(n)) {
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
    for (const s of this.sockets.values()) {
      try {
        s.close();
      } catch (e) {
        // Counted (counters.stateRefused); the client is going anyway: close the others.
        if (!(e instanceof NodeStateError)) throw e;
      }
    }
    this.sockets.clear();
    this.watch?.close();
    this.node.forget(this);
  }

  private send(type: number, sock: number, id: number, meta: object | null, data?: Buffer): void {
    if (!this.gone) this.writer.write(encodeFrame(type, sock, id, meta, data));
  }

  /** @internal */ isGone(): boolean {
    return this.gone;
  }

  /** @internal */ countCall(): void {
    if (++this.outstanding > MAX_OUTSTANDING_PER_CLIENT) throw new ProtocolError('too many outstanding calls');
  }

  /** @internal */ openSockets(): Iterable<NodeSock> {
    return this.sockets.values();
  }

  /** @internal */ event(sid: number, meta: Record<string, unknown>): void {
    this.send(N_EVENT, sid, 0, meta);
  }

  /** The node received a congestion map: every socket of this client reports POLLWRBAND once. @internal */
  congMapReceived(): void {
    if (this.hello && this.sockets.size > 0) this.send(N_EVENT, 0, 0, { ev: 'congmap' });
  }

  /** @internal */ answer(id: number, value: unknown): void {
    this.outstanding--;
    this.send(N_RESP, 0, id, { ok: true, v: value ?? null });
  }

  /** @internal */ fail(id: number, e: unknown): void {
    this.outstanding--;
    this.send(N_RESP, 0, id, { err: wireError(e) });
  }

  /**
   * A tool's request on the node's socket: 'info' for anyone allowed to attach; the operator's
   * controls (rds-ctl: reconnect, disconnect, reset-stats) only for the node's own user or root,
   * as the kernel's SO_PEERCRED says (the socket's group may attach, not steer the node's paths).
   */
  private controlRequest(line: string): unknown {
    if (line === 'info') return this.node.info();
    const me = process.getuid?.() ?? -1;
    if (!this.verified || (this.uid !== me && this.uid !== 0))
      return {
        error: `only the node's user (uid ${me}) or root may ${line.split(' ')[0]} (${this.verified ? `you are uid ${this.uid}` : 'peer credentials unavailable: the native addon is not built'})`,
        code: 'EPERM',
      };
    try {
      return controlAnswer(this.node.stack, line);
    } catch (e) {
      return { error: (e as Error).message, code: (e as { code?: string }).code };
    }
  }

  private frame(f: Frame): void {
    if (!this.hello) {
      if (f.type !== C_HELLO) throw new ProtocolError('the first frame must be HELLO');
      const v = num(f.meta.v, 'v');
      this.claimedPid = typeof f.meta.pid === 'number' && Number.isInteger(f.meta.pid) ? f.meta.pid : 0;
      if (!this.verified) this.pid = this.claimedPid;
      if (v < MIN_CLIENT_VERSION || v > PROTOCOL_VERSION) {
        this.send(N_WELCOME, 0, 0, {
          v: PROTOCOL_VERSION,
          err: {
            code: 'EPROTO',
            message: `protocol version ${v} is not one this node serves (${MIN_CLIENT_VERSION} to ${PROTOCOL_VERSION}); run rds-socket of the same version as the node`,
          },
        });
        this.writer.flush();
        throw new ProtocolError(`unsupported protocol version ${v}`);
      }
      this.hello = true;
      this.version = v;
      this.node.counters.attached++;
      this.node.log(
        this.verified
          ? `client ${this.id} attached (pid ${this.pid}, uid ${this.uid}, gid ${this.gid})`
          : `client ${this.id} attached (pid ${this.pid} as claimed: no SO_PEERCRED without the native addon)`,
      );
      // `options` and `events`: what an attached stack answers for its node (attached-stack.ts).
      this.send(N_WELCOME, 0, 0, {
        v: PROTOCOL_VERSION,
        pid: process.pid,
        budget: this.node.maxClientSendBytes,
        options: optionsToWire(this.node.stack.options),
        events: true,
      });
      return;
    }
    switch (f.type) {
      case C_REQ:
        if (++this.outstanding > MAX_OUTSTANDING_PER_CLIENT) throw new ProtocolError('too many outstanding calls');
        this.request(f);
        return;
      case C_SEND:
        this.sends.accept(f, this.sockets.get(f.sock));
        return;
      case C_CREDIT: {
        const s = this.sockets.get(f.sock);
        if (s === undefined) return; // closed meanwhile
        const { n, k } = decodeCount(f.raw, f.metaStart, f.metaEnd);
        // The application has read these: now the senders may hear so (send({ confirm })).
        s.credit(n, k);
        pump(this, s);
        return;
      }
      case C_ABORT: {
        const s = this.sockets.get(f.sock);
        if (s === undefined) return;
        this.sends.abort(s, f.id);
        return;
      }
      default:
        throw new ProtocolError(`unknown frame type ${f.type}`);
    }
  }

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
          const local = new LocalBackend(this.node.stack);
          const real = new RdsSocket({ stack: this.node.stack, backend: local });
          const s = new NodeSock(f.sock, real, local, this.node.counters);
          this.sockets.set(f.sock, s);
          real.on('readable', () => pump(this, s));
          // Received messages go to this client at once while nothing waits (node-deliver.ts).
          local.rx.handoff = cutThrough(this, s);
          // The client's budget comes back as its messages leave the real socket's queue.
          local.on('send-done', () => this.sends.done(s));
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
          // A TOS set before bind (with SO_RDS_TRANSPORT: the socket had a map) comes with it.
          if (f.meta.tos !== undefined) s.real.ioctl(SIOCRDSSETTOS, num(f.meta.tos, 'tos'));
          s.real.bind({ address, port }).then(
            () => {
              const a = s.real.address();
              s.boundTo(a.address, a.port);
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
            this.sends.cancelBacklog(s, address, port);
            s.real.setsockopt(level, name, { address, port } as never);
          } else {
            if (typeof value !== 'number' && typeof value !== 'boolean')
              throw new ProtocolError('option value must be a number, boolean or address');
            // SO_RDS_MSG_RXPATH_LATENCY comes as its struct packed into a number (node-backend.ts).
            if (level === SOL_RDS && name === SO_RDS_MSG_RXPATH_LATENCY && typeof value === 'number')
              s.real.setsockopt(level, name, unpackRxTrace(value));
            else s.real.setsockopt(level, name, value);
            if (level === SOL_SOCKET && name === SO_RCVBUF) pump(this, s);
          }
          this.answer(f.id, null);
          return;
        }
        case 'ioctl': {
          // SIOCRDSSETTOS once bind() was asked (before, the TOS comes with 'bind').
          this.sockOf(f).real.ioctl(num(f.meta.request, 'request'), num(f.meta.arg, 'arg'));
          this.answer(f.id, null);
          return;
        }
        case 'flush': {
          const s = this.sockOf(f);
          // What the client sent before this call is in the backlog or beyond: once all of it is
          // with the real socket, the real socket's flush covers it.
          this.sends
            .whenDrained(s)
            .then(() => s.real.flush())
            .then(
              () => this.answer(f.id, null),
              (e) => this.fail(f.id, e),
            );
          return;
        }
        case 'close': {
          const s = this.sockets.get(f.sock);
          if (s !== undefined) {
            this.sockets.delete(f.sock);
            for (const it of s.backlog())
              if (it.id !== 0)
                this.fail(it.id, new RdsError('ECANCELED', 'the socket was closed before the peer had the message'));
            this.sends.forget(s);
            s.close();
          }
          this.answer(f.id, null);
          return;
        }
        case 'info': {
          // RDS_INFO_* of an attached socket (sock.rdsInfo()), or on socket 0 an attached stack's
          // report(): the node's records, in the data.
          const a =
            f.sock === 0 && f.meta.report === true
              ? nodeReportAnswer(this.node.stack)
              : nodeInfoAnswer(this.sockOf(f).real, f.meta);
          this.outstanding--;
          this.send(N_RESP, 0, f.id, { ok: true, v: a.meta, data: true }, a.data);
          return;
        }
        case 'watch':
          // An attached stack's listeners for the node's path and peer events (stack-watch.ts).
          this.watch ??= new StackWatch(this.node.stack, (meta) => this.send(N_EVENT, 0, 0, meta));
          this.watch.set(f.meta.events);
          this.answer(f.id, null);
          return;
        default:
          throw new ProtocolError(`unknown op ${op}`);
      }
    } catch (e) {
      // A node bug (an illegal socket state move) ends this client, as a protocol error does.
      if (e instanceof ProtocolError || e instanceof NodeStateError) throw e;
      this.fail(f.id, e);
    }
  }
}

/** The words a tool's request line may start with (see control-commands.ts). */
const CONTROL_WORDS = ['info', 'reconnect', 'disconnect', 'reset-stats'];

/** A first chunk that is one tool request line (not the attach protocol's binary hello), or null. */
function controlLine(chunk: Buffer): string | null {
  const nl = chunk.indexOf(0x0a);
  if (nl < 0 || nl > 512) return null;
  const line = chunk.toString('latin1', 0, nl).trim();
  const word = line.split(' ')[0];
  return word !== undefined && CONTROL_WORDS.includes(word) ? line : null;
}
