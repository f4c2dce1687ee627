import { chmodSync, chownSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { dirname } from 'node:path';
import { RDS_MAX_MSG_SIZE } from '../constants.js';
import { RdsError } from '../errors.js';
import type { AttachedClientInfo, HostNodeHandle, ServeOptions } from '../core/ext/host-hooks.js';
import type { RdsStack } from '../core/stack.js';
import { defaultNodePath, pidFileOf } from './paths.js';
import { Client } from './server-client.js';
import { DEFAULT_MAX_CLIENT_SEND_BYTES } from './client-state.js';

/**
 * Frame memory a host node's stack keeps for reuse (WireSlab.widenPool): its processes' large
 * SENDs are read into it and it comes back when they are acknowledged. 16 MiB holds what a
 * stream with an 8 MiB send buffer has in flight twice over (at 4 MiB the sending node still ran a
 * full collection every 600 ms at 64 KiB; at 16 MiB every 3 s).
 */
const NODE_WIRE_POOL_BYTES = 16 << 20;

export {
  DEFAULT_MAX_CLIENT_SEND_BYTES,
  MAX_CLIENT_WRITE_BACKLOG,
  MAX_OUTSTANDING_PER_CLIENT,
  MAX_SOCKETS_PER_CLIENT,
} from './client-state.js';

/** The node side: serves `stack` to attached processes on a Unix socket. */
export class HostNode implements HostNodeHandle {
  readonly counters = { attached: 0, detached: 0, dropped: 0, malformed: 0, sendFailed: 0, stateRefused: 0 };
  private readonly clientSet = new Set<Client>();
  private closed = false;
  private congGen: number;

  private constructor(
    readonly stack: RdsStack,
    readonly path: string,
    private readonly server: Server,
    readonly log: (line: string) => void,
    /** See ServeOptions.maxClientSendBytes. */
    readonly maxClientSendBytes: number,
  ) {
    this.congGen = stack.congGeneration;
    stack.addCongWaiter(this.watchCong);
  }

  /**
   * Congestion waiters are woken on every received map (and local change) and then forgotten:
   * re-registered each time, this tells attached sockets of each map, for their poll().
   */
  private readonly watchCong = (): void => {
    if (this.closed) return;
    const g = this.stack.congGeneration;
    if (g !== this.congGen) {
      this.congGen = g;
      for (const c of this.clientSet) c.congMapReceived();
    }
    this.stack.addCongWaiter(this.watchCong);
  };

  static async serve(stack: RdsStack, opts: ServeOptions = {}): Promise<HostNode> {
    if (stack.hostNode !== null)
      throw new RdsError('EINVAL', `this stack already serves the node at ${stack.hostNode.path}`);
    if (stack.closing) throw new RdsError('EBADF', 'the stack is closed');
    const path = opts.path ?? defaultNodePath();
    const log = opts.log ?? (() => {});
    const budget = opts.maxClientSendBytes ?? DEFAULT_MAX_CLIENT_SEND_BYTES;
    if (!Number.isSafeInteger(budget) || budget < RDS_MAX_MSG_SIZE)
      throw new RdsError(
        'EINVAL',
        `maxClientSendBytes must be an integer of at least ${RDS_MAX_MSG_SIZE} (one largest message), got ${budget}`,
      );
    mkdirSync(dirname(path), { recursive: true, mode: opts.group !== undefined ? 0o750 : 0o700 });
    if (await answers(path))
      throw new RdsError(
        'EADDRINUSE',
        `a host node already answers at ${path}; attach to it with RdsStack.attach() or stop it`,
      );
    takeOverStale(path, log);
    stack.wireSlab.widenPool(NODE_WIRE_POOL_BYTES);
    let node: HostNode | null = null;
    // Taken paused: the client reads them into its parser's memory (server-client.ts).
    const server = createServer({ pauseOnConnect: true }, (c) => node?.accept(c));
    await new Promise<void>((res, rej) => {
      server.once('error', (e) =>
        rej(new RdsError('EADDRINUSE', `cannot listen at ${path}: ${e.message}`, { cause: e })),
      );
      server.listen(path, () => res());
    });
    chmodSync(path, opts.mode ?? 0o660);
    if (opts.group !== undefined) {
      const gid = groupId(opts.group);
      chownSync(path, -1, gid);
      chownSync(dirname(path), -1, gid);
    }
    writeFileSync(pidFileOf(path), `${process.pid}\n`, { mode: 0o644 });
    node = new HostNode(stack, path, server, log, budget);
    server.unref();
    stack.hostNodeChanged(node);
    log(`serving the RDS node at ${path} (pid ${process.pid})`);
    return node;
  }

  private accept(c: Socket): void {
    if (this.closed) {
      c.destroy();
      return;
    }
    const client = new Client(this, c);
    this.clientSet.add(client);
  }

  /** A client is gone: stop serving it. @internal */
  forget(c: Client): void {
    this.clientSet.delete(c);
  }

  clients(): AttachedClientInfo[] {
    return [...this.clientSet].map((c) => ({
      id: c.id,
      pid: c.pid,
      uid: c.uid,
      gid: c.gid,
      verified: c.verified,
      claimedPid: c.claimedPid,
      sockets: c.sockCount(),
    }));
  }

  /**
   * What rds-info shows: the stack's info, each socket with the process it belongs to (pid, uid,
   * and `cred`: 'peer' when they are the kernel's SO_PEERCRED, 'claimed' when only the client's
   * word, without the native addon); the node's own sockets are this process's.
   */
  info(): unknown {
    const ownerOf = new Map<number, { pid: number; uid: number; cred: string }>();
    for (const c of this.clientSet) {
      const owner = { pid: c.pid, uid: c.uid, cred: c.verified ? 'peer' : 'claimed' };
      for (const r of c.realSockets()) ownerOf.set(r.info().inode, owner);
    }
    const self = { pid: process.pid, uid: process.getuid?.() ?? -1, cred: 'self' };
    const info = this.stack.info();
    return {
      pid: process.pid,
      ...info,
      sockets: info.sockets.map((s) => ({ ...s, ...(ownerOf.get(s.inode) ?? self) })),
      hostNode: { path: this.path, clients: this.clients(), counters: this.counters },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stack.removeCongWaiter(this.watchCong);
    this.stack.hostNodeChanged(null);
    for (const c of [...this.clientSet]) c.drop('the node is closing');
    await new Promise<void>((res) => this.server.close(() => res()));
    for (const f of [this.path, pidFileOf(this.path)]) {
      try {
        unlinkSync(f);
      } catch {
        /* gone */
      }
    }
    this.log(`stopped serving ${this.path}`);
  }
}

/**
 * Removes what a node that died (SIGKILL, a crash) left at `path`, its socket and pid files, and
 * says so: sockets made while they were there run embedded, each process warned once (docs/host-node.md).
 */
function takeOverStale(path: string, log: (line: string) => void): void {
  let pid = '';
  try {
    pid = readFileSync(pidFileOf(path), 'utf8').trim();
  } catch {
    /* none */
  }
  let left = false;
  try {
    unlinkSync(path);
    left = true;
  } catch {
    /* none */
  }
  if (left || pid !== '')
    log(
      `taking over stale ${path}${pid !== '' ? ` and ${pidFileOf(path)} (left by pid ${pid}, which no longer answers there: killed or crashed)` : ' (nothing answers there)'}; sockets made while they were stale are embedded in their own processes' nodes`,
    );
}

/** Whether something accepts connections at `path` (a stale socket file refuses them). */
function answers(path: string): Promise<boolean> {
  return new Promise((res) => {
    const c = connect(path);
    c.once('connect', () => {
      c.destroy();
      res(true);
    });
    c.once('error', () => res(false));
  });
}

function groupId(group: string | number): number {
  if (typeof group === 'number') return group;
  if (/^\d+$/.test(group)) return Number(group);
  let text = '';
  try {
    text = readFileSync('/etc/group', 'utf8');
  } catch {
    /* none */
  }
  for (const line of text.split('\n')) {
    const [name, , gid] = line.split(':');
    if (name === group && gid !== undefined) return Number(gid);
  }
  throw new RdsError('EINVAL', `no group named ${group} in /etc/group`);
}
