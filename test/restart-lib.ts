import { type ChildProcess, fork, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { TEST_TCP_PORT, until } from './helpers.js';

// Nodes in processes of their own that a test kills (SIGKILL) and starts again on the same
// address (test/restart.test.ts, test/host-restart.test.ts; fixture restart-node.mjs).

const NODE = fileURLToPath(new URL('./fixtures/restart-node.mjs', import.meta.url));
const DAEMON = fileURLToPath(new URL('../dist/cli/rds-socketd.js', import.meta.url));

export interface Addr {
  address: string;
  port: number;
}

/** What a node process answered for a confirmed send. */
export interface SendResult {
  id: number;
  ms: number;
  code?: string;
  peers?: unknown;
}

/** One node process: a socket bound at `addr`, in its own stack or attached to a host node. */
export class NodeProc {
  readonly child: ChildProcess;
  readonly got: string[] = [];
  private readyAt = 0;
  private readonly results = new Map<number, SendResult & { at: number }>();
  private seq = 0;
  /** Processes that go with this node (its host node): killed with it, after it. */
  readonly companions: ChildProcess[] = [];

  private constructor(
    readonly addr: Addr,
    cfg: object,
  ) {
    this.child = fork(NODE, [], {
      env: { ...process.env, RESTART_NODE: JSON.stringify({ bind: addr.address, port: addr.port, ...cfg }) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.child.on('message', (m: { t: string; data?: string } & SendResult) => {
      if (m.t === 'ready') this.readyAt = Date.now();
      else if (m.t === 'got') this.got.push(m.data!);
      else if (m.t === 'sent') this.results.set(m.id, { ...m, at: Date.now() });
    });
  }

  /**
   * Starts a node on `addr` and resolves once its socket is bound, with when that was.
   * `attach`: the socket attaches to the host node at that path; else the process runs its own
   * stack with `opts` (default options otherwise: the reconnect timing under test is the default)
   * on `tcpPort` (default TEST_TCP_PORT).
   */
  static async start(addr: Addr, cfg: { attach?: string; opts?: object; tcpPort?: number } = {}): Promise<NodeProc> {
    const n = new NodeProc(addr, { tcpPort: TEST_TCP_PORT, ...cfg });
    await until(() => n.readyAt > 0 || n.child.exitCode !== null, `node ${addr.address} to bind`, 15000);
    if (n.readyAt === 0) throw new Error(`node ${addr.address} exited with ${n.child.exitCode}`);
    return n;
  }

  get boundAt(): number {
    return this.readyAt;
  }

  /** Asks for a confirmed send of `data` to `to`; the result's promise also gives when it came. */
  send(to: Addr, data: string, timeout = 8000): Promise<SendResult & { at: number }> {
    const id = this.seq++;
    this.child.send({ t: 'send', id, to, data, timeout });
    return (async () => {
      await until(() => this.results.has(id) || this.child.exitCode !== null, `send ${id} to end`, timeout + 5000);
      const r = this.results.get(id);
      if (r === undefined) throw new Error(`node ${this.addr.address} exited before its send ended`);
      return r;
    })();
  }

  /** SIGKILL, and wait until the process is gone (its sockets closed by the OS). */
  async kill(): Promise<void> {
    for (const p of [this.child, ...this.companions]) await killHard(p);
  }
}

async function killHard(p: ChildProcess): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return;
  const gone = new Promise((r) => p.once('exit', r));
  p.kill('SIGKILL');
  await gone;
}

/**
 * Starts rds-socketd (default options but the test port) serving `path`; resolves once it serves
 * (its pid file names it). Logs go to `log` lines if given, else the daemon runs --quiet.
 */
export async function startDaemon(path: string, log?: (line: string) => void): Promise<ChildProcess> {
  const args = [DAEMON, '--path', path, '--tcp-port', String(TEST_TCP_PORT)];
  const d = spawn(process.execPath, log ? args : [...args, '--quiet'], {
    stdio: ['ignore', log ? 'pipe' : 'ignore', 'inherit'],
  });
  if (log) {
    let buf = '';
    d.stdout!.on('data', (b: Buffer) => {
      buf += b.toString();
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        log(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    });
  }
  try {
    await until(() => {
      if (d.exitCode !== null) throw new Error(`rds-socketd exited with ${d.exitCode}`);
      try {
        return existsSync(`${path}.pid`) && readFileSync(`${path}.pid`, 'utf8').trim() === String(d.pid);
      } catch {
        return false;
      }
    }, 'rds-socketd to serve');
  } catch (e) {
    await killHard(d);
    throw e;
  }
  return d;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/**
 * The restart scenario of issue 33: `sender` has a confirmed exchange with the node on
 * `restartedAddr`, which is then SIGKILLed and started again (`restart`) `rounds` times. In odd
 * rounds the sender's message is sent while the peer is gone (queued), in even ones after it is
 * back; both must be confirmed (read by the new process), and the restarted node's own message to
 * the sender must be confirmed too. Returns, per round, ms from the restarted node being bound to
 * the sender's confirmation.
 */
export async function restartRounds(
  sender: NodeProc,
  start: () => Promise<NodeProc>,
  rounds: number,
  track: (n: NodeProc) => void,
): Promise<{ delays: number[]; last: NodeProc }> {
  let peer = await start();
  track(peer);
  const first = await sender.send(peer.addr, 'hello');
  if (first.code !== undefined) throw new Error(`the first send failed: ${first.code}`);
  const delays: number[] = [];
  for (let r = 0; r < rounds; r++) {
    await peer.kill();
    const queued = r % 2 === 0;
    const early = queued ? sender.send(peer.addr, `round ${r}`) : null;
    peer = await start();
    track(peer);
    const res = await (early ?? sender.send(peer.addr, `round ${r}`));
    if (res.code !== undefined)
      throw new Error(
        `round ${r} (${queued ? 'queued while down' : 'sent after restart'}): ${res.code} after ${res.ms} ms; peers ${JSON.stringify(res.peers)}`,
      );
    delays.push(res.at - peer.boundAt);
    if (!peer.got.includes(`round ${r}`)) throw new Error(`round ${r}: confirmed but not read by the new process`);
    const back = await peer.send(sender.addr, `reply ${r}`);
    if (back.code !== undefined) throw new Error(`round ${r}: the restarted node's reply failed: ${back.code}`);
  }
  return { delays, last: peer };
}
