import { afterEach } from 'vitest';
import { execFileSync, spawn } from 'node:child_process';
import {
  LoopTransport,
  type PathInfo,
  type RdsCounterName,
  RdsError,
  RdsSocket,
  RdsStack,
  type RdsStackOptions,
  TcpTransport,
  constants,
} from '../lib/index.js';
import { FaultProxy, type FaultProxyOptions } from '../lib/testing/index.js';

/** Port the tests' stacks use for RDS/TCP, away from the kernel's 16385. */
export const TEST_TCP_PORT = 26385;

/**
 * The nodes of a test file: node() makes a stack (RDS/TCP on TEST_TCP_PORT, reconnecting within
 * 50 ms unless `opts` say otherwise) with one socket bound at (address, port); closeAll() closes
 * every stack made since its last call (the file's afterEach).
 */
export function testNodes(): {
  node(address: string, opts?: RdsStackOptions, port?: number): Promise<{ stack: RdsStack; sock: RdsSocket }>;
  closeAll(): Promise<void>;
} {
  const stacks: RdsStack[] = [];
  return {
    async node(address, opts = {}, port = 4000) {
      const stack = new RdsStack({ tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 50, ...opts });
      stacks.push(stack);
      const sock = new RdsSocket({ stack });
      await sock.bind({ address, port });
      return { stack, sock };
    },
    async closeAll() {
      for (const s of stacks.splice(0)) await s.close();
    },
  };
}

export interface Pair {
  a: RdsSocket;
  b: RdsSocket;
  stackA: RdsStack;
  stackB: RdsStack;
  close(): Promise<void>;
}

/**
 * 'attached': TCP between two host nodes served in this process, each socket attached to its node
 * over the control socket. 'attached-process': the same with each node an rds-socketd process.
 */
export type TransportKind = 'tcp' | 'loopback' | 'ib' | 'attached' | 'attached-process';

/**
 * Two addresses of an RDMA device for IB pairs (test/ib/run.sh sets them inside the Soft-RoCE
 * guest); unset elsewhere.
 */
export const IB_ADDRS = (process.env.RDS_IB_ADDRS ?? '').split(',').filter(Boolean);

/** Transports the conformance suite runs over: RDS_CONFORMANCE_KINDS, default TCP, loopback, attached (sockets in a host node of this process) and attached-process (in rds-socketd processes). */
export const CONFORMANCE_KINDS = (process.env.RDS_CONFORMANCE_KINDS ?? 'tcp,loopback,attached,attached-process').split(
  ',',
) as TransportKind[];

/**
 * Two bound sockets that talk over the given transport: for TCP and IB each lives in its own
 * stack (its own node) on its own address; for loopback both live in one stack.
 * `net` is a per-test-file octet so files running in parallel never share an address.
 */
/**
 * A fresh pair for each test of a suite over `kind`, closed after each test. Tests take the next
 * host number of the kind's block (tcp 1-63, attached 65-95, attached-process 97-127, the rest
 * from 129), so no two tests of a file share addresses; `host()` is the current test's.
 */
export function pairPerTest(kind: TransportKind, net: number): { open: () => Promise<Pair>; host: () => number } {
  let pair: Pair | null = null;
  let host = kind === 'tcp' ? 0 : kind === 'attached' ? 64 : kind === 'attached-process' ? 96 : 128;
  afterEach(async () => {
    await pair?.close();
    pair = null;
  });
  return { open: async () => (pair = await makePair(kind, net, ++host)), host: () => host };
}

export async function makePair(kind: TransportKind, net: number, host: number): Promise<Pair> {
  if (kind === 'attached') return makeAttachedPair(net, host);
  if (kind === 'attached-process') return makeDaemonPair(net, host);
  // IB: one pair at a time on the device's two addresses (each test closes its stacks).
  const addrA = kind === 'ib' ? IB_ADDRS[0]! : `127.${net}.${host}.1`;
  const addrB = kind === 'ib' ? IB_ADDRS[1]! : `127.${net}.${host}.2`;
  const stackA = new RdsStack({ tcpPort: TEST_TCP_PORT });
  const stackB = kind === 'loopback' ? stackA : new RdsStack({ tcpPort: TEST_TCP_PORT });
  return bindPair(stackA, stackB, addrA, addrB, kind === 'ib' ? 'ib' : undefined, async () => {
    await stackA.close();
    if (stackB !== stackA) await stackB.close();
  });
}

/** Port 4000 of `addrA` on `stackA` and of `addrB` on `stackB`, bound: the pair every kind returns. */
async function bindPair(
  stackA: RdsStack,
  stackB: RdsStack,
  addrA: string,
  addrB: string,
  transport: 'ib' | undefined,
  close: () => Promise<void>,
): Promise<Pair> {
  const a = new RdsSocket({ stack: stackA, ...(transport ? { transport } : {}) });
  const b = new RdsSocket({ stack: stackB, ...(transport ? { transport } : {}) });
  await a.bind({ address: addrA, port: 4000 });
  await b.bind({ address: addrB, port: 4000 });
  return { a, b, stackA, stackB, close };
}

let attachedSeq = 0;

/**
 * Like a TCP pair, but each socket lives in a host node (served by a stack of this process) and
 * is attached to it over its control socket. stackA/stackB are the attached stacks (sockets made
 * on them are attached too); read their nodes' counters with counter() (stack.report()).
 */
async function makeAttachedPair(net: number, host: number): Promise<Pair> {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), `rds-attached-${process.pid}-${attachedSeq++}-`));
  const nodeA = new RdsStack({ tcpPort: TEST_TCP_PORT });
  const nodeB = new RdsStack({ tcpPort: TEST_TCP_PORT });
  await nodeA.serve({ path: join(dir, 'a.sock') });
  await nodeB.serve({ path: join(dir, 'b.sock') });
  const stackA = await RdsStack.attach(join(dir, 'a.sock'));
  const stackB = await RdsStack.attach(join(dir, 'b.sock'));
  return bindPair(stackA, stackB, `127.${net}.${host}.1`, `127.${net}.${host}.2`, undefined, async () => {
    await stackA.close();
    await stackB.close();
    await nodeA.close();
    await nodeB.close();
    rmSync(dir, { recursive: true, force: true });
  });
}

/** Two rds-socketd processes (the compiled bin), each socket of the pair attached to one. */
async function makeDaemonPair(net: number, host: number): Promise<Pair> {
  const { existsSync, mkdtempSync, readFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { fileURLToPath } = await import('node:url');
  const daemon = fileURLToPath(new URL('../dist/cli/rds-socketd.js', import.meta.url));
  const dir = mkdtempSync(join(tmpdir(), `rds-attached-proc-${process.pid}-${attachedSeq++}-`));
  const procs = ['a', 'b'].map((n) =>
    spawn(
      process.execPath,
      [daemon, '--path', join(dir, `${n}.sock`), '--tcp-port', String(TEST_TCP_PORT), '--quiet'],
      { stdio: 'ignore' },
    ),
  );
  const serving = (n: string, pid: number | undefined): boolean => {
    try {
      return (
        existsSync(join(dir, `${n}.sock`)) && readFileSync(join(dir, `${n}.sock.pid`), 'utf8').trim() === String(pid)
      );
    } catch {
      return false;
    }
  };
  await until(() => serving('a', procs[0]!.pid) && serving('b', procs[1]!.pid), 'rds-socketd to serve');
  const stackA = await RdsStack.attach(join(dir, 'a.sock'));
  const stackB = await RdsStack.attach(join(dir, 'b.sock'));
  return bindPair(stackA, stackB, `127.${net}.${host}.1`, `127.${net}.${host}.2`, undefined, async () => {
    await stackA.close();
    await stackB.close();
    for (const p of procs) {
      const gone = new Promise((r) => p.once('exit', r));
      p.kill('SIGTERM');
      await gone;
    }
    rmSync(dir, { recursive: true, force: true });
  });
}

/** A counter of the node `stack`'s sockets live in: its own, or its host node's for an attached stack. */
export async function counter(stack: RdsStack, name: RdsCounterName): Promise<number> {
  return (await stack.report()).counters[name];
}

/** The errno-style code `f` throws (an RdsError's), or undefined when it returns. */
export function thrownCode(f: () => unknown): string | undefined {
  try {
    f();
  } catch (e) {
    return (e as { code?: string }).code;
  }
  return undefined;
}

export function timeout(ms = 10000): AbortSignal {
  return AbortSignal.timeout(ms);
}

/** Deterministic payload: message i of a stream has its index in the first 4 bytes. */
export function payload(i: number, size: number, seed = 0): Buffer {
  const b = Buffer.alloc(size);
  for (let k = 0; k < size; k++) b[k] = (i * 31 + k * 7 + seed) & 0xff;
  if (size >= 4) b.writeUInt32BE(i >>> 0, 0);
  return b;
}

/** A socket of `stack` bound to (address, port), with an 8 MiB send buffer (tests queue a lot). */
export async function bigBufferSocket(stack: RdsStack, address: string, port: number): Promise<RdsSocket> {
  const s = new RdsSocket({ stack });
  await s.bind({ address, port });
  raiseSndbuf(s, 8 << 20);
  return s;
}

/** Why tests that make network namespaces cannot run here (null: they can). */
export function netnsUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'needs root';
  try {
    execFileSync('ip', ['netns', 'list'], { stdio: 'ignore' });
  } catch {
    return '`ip netns` is unavailable';
  }
  return null;
}

export function raiseSndbuf(s: RdsSocket, bytes: number): void {
  s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, bytes);
}

/** Resolves when `pred` holds, checking on every stack state event and after each turn; bounded. */
export async function until(pred: () => boolean, what: string, ms = 10000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Runs `node <args>` and resolves with its exit code and combined output; kills it after `ms`. */
export function runNode(args: string[], ms: number): Promise<{ code: number; out: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout!.on('data', (d) => (out += d));
    p.stderr!.on('data', (d) => (out += d));
    const t = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`node ${args.join(' ')} did not finish in ${ms} ms:\n${out}`));
    }, ms);
    p.on('exit', (code) => {
      clearTimeout(t);
      resolve({ code: code ?? 1, out });
    });
  });
}

/**
 * Sends 2000-byte messages from `s` to `dst` every 20 ms until sendmsg says ENOBUFS (the
 * destination's port is congested; EAGAIN, a full send buffer, is waited out) or `ms` pass:
 * how many went out, and whether congestion came.
 */
export async function sendUntilCongested(
  s: RdsSocket,
  dst: { address: string; port: number },
  ms: number,
): Promise<{ sent: number; congested: boolean }> {
  let sent = 0;
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    try {
      s.sendmsg(Buffer.alloc(2000, 1), dst);
      sent++;
    } catch (e) {
      if (!(e instanceof RdsError)) throw e;
      if (e.code === 'ENOBUFS') return { sent, congested: true };
      if (e.code !== 'EAGAIN') throw e;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return { sent, congested: false };
}

/**
 * Two stacks of a multipath test: A on `${base}.1` (the smaller address, so it connects) and B on
 * `${base}.2`, both reconnecting within 20 ms. With `viaProxy` A dials B through a FaultProxy on
 * `${base}.100`, which the test can reset or pause. `defer` registers each close for afterEach.
 */
export async function proxiedStacks(
  base: string,
  optsA: RdsStackOptions,
  optsB: RdsStackOptions,
  viaProxy: boolean,
  defer: (close: () => Promise<void>) => void,
): Promise<{ A: RdsStack; B: RdsStack; proxy: FaultProxy | null }> {
  let proxy: FaultProxy | null = null;
  if (viaProxy) {
    const p = await FaultProxy.start({
      listen: { host: `${base}.100`, port: 0 },
      target: { host: `${base}.2`, port: TEST_TCP_PORT },
      sourceAddress: `${base}.1`,
    });
    defer(() => p.close());
    proxy = p;
  }
  const A = new RdsStack({
    tcpPort: TEST_TCP_PORT,
    reconnectMaxDelayMs: 20,
    ...optsA,
    ...(proxy ? { transports: [new TcpTransport({ dial: () => proxy.address }), new LoopTransport()] } : {}),
  });
  const B = new RdsStack({ tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 20, ...optsB });
  defer(() => A.close());
  defer(() => B.close());
  return { A, B, proxy };
}

/**
 * Two stacks joined by one lane and a rail: A on `${base}.1` (the smaller address, it dials), B on
 * `${base}.2`, the rail between `${railNet}.1` and `${railNet}.2`. No heartbeats (only the test
 * takes paths down), a 100 ms failover grace period, reconnects within 20 ms. `pathOf(S, i)` is
 * path `i` of stack S's connection to the other (ConnectionInfo). `defer` registers each close.
 */
export function railedStacks(
  base: string,
  railNet: string,
  defer: (close: () => Promise<void>) => void,
): { A: RdsStack; B: RdsStack; a1: string; b1: string; pathOf(S: RdsStack, i: number): PathInfo | undefined } {
  const a1 = `${base}.1`;
  const b1 = `${base}.2`;
  const common = {
    tcpPort: TEST_TCP_PORT,
    reconnectMaxDelayMs: 20,
    failoverGraceMs: 100,
    heartbeatIntervalMs: 0,
    npaths: 1,
  };
  const A = new RdsStack({ ...common, rails: [{ peer: b1, local: `${railNet}.1`, remote: `${railNet}.2` }] });
  const B = new RdsStack({ ...common, rails: [{ peer: a1, local: `${railNet}.2`, remote: `${railNet}.1` }] });
  defer(() => A.close());
  defer(() => B.close());
  const pathOf = (S: RdsStack, i: number) =>
    S.connections()
      .find((c) => c.transport === 'tcp' && c.peerAddress === (S === A ? b1 : a1))
      ?.paths.find((p) => p.index === i);
  return { A, B, a1, b1, pathOf };
}

/** Memory regions of this process the kernel knows of (`rdma resource show mr`; IB guest tests). */
export function processMrs(): number {
  const out = execFileSync('rdma', ['resource', 'show', 'mr'], { encoding: 'utf8' });
  return out.split('\n').filter((l) => new RegExp(`\\bpid ${process.pid}\\b`).test(l)).length;
}

/**
 * Closers run after each test of the calling file, the last registered first (its afterEach):
 * `const cleanups = cleanupsPerTest();` at the top, then `cleanups.push(() => x.close())`.
 */
export function cleanupsPerTest(): { push(close: () => Promise<void> | void): void } {
  let list: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    const run = list.reverse();
    list = [];
    for (const c of run) await c();
  });
  return { push: (c) => void list.push(c) };
}

/**
 * Two stacks joined by `lanes` lanes that go through a FaultProxy (A, `127.29.${net}.1`, the
 * smaller address, dials B, `.2`, through `.100`) and by a rail dialled directly (`127.29.${net +
 * 1}.1` - `.2`). No heartbeats (a stalled carrier stays UP: only the test takes paths down), a 150
 * ms failover grace period, reconnects within 20 ms; B has a socket `b` on port 4000 with big
 * buffers. `path(i)`, `up(i)`: A's path `i` to B. `proxyOpts`: further FaultProxy options.
 */
export async function proxiedRailStacks(
  net: number,
  lanes: number,
  defer: (close: () => Promise<void>) => void,
  proxyOpts: Partial<FaultProxyOptions> = {},
) {
  const base = `127.29.${net}`;
  const railNet = `127.29.${net + 1}`;
  const a1 = `${base}.1`;
  const b1 = `${base}.2`;
  const proxy = await FaultProxy.start({
    listen: { host: `${base}.100`, port: 0 },
    target: { host: b1, port: TEST_TCP_PORT },
    sourceAddress: a1,
    ...proxyOpts,
  });
  defer(() => proxy.close());
  const common = {
    tcpPort: TEST_TCP_PORT,
    reconnectMaxDelayMs: 20,
    failoverGraceMs: 150,
    heartbeatIntervalMs: 0,
    npaths: lanes,
  };
  const A = new RdsStack({
    ...common,
    transports: [
      new TcpTransport({ dial: (_l, f, port) => (f === b1 ? proxy.address : { host: f, port }) }),
      new LoopTransport(),
    ],
    rails: [{ peer: b1, local: `${railNet}.1`, remote: `${railNet}.2` }],
  });
  const B = new RdsStack({ ...common, rails: [{ peer: a1, local: `${railNet}.2`, remote: `${railNet}.1` }] });
  defer(() => A.close());
  defer(() => B.close());
  const b = await bigBufferSocket(B, b1, 4000);
  const conn = () => A.connections().find((c) => c.transport === 'tcp' && c.peerAddress === b1)!;
  const path = (i: number) => conn()?.paths.find((p) => p.index === i);
  const up = (i: number) => path(i)?.state === 'UP';
  return { A, B, proxy, b, a1, b1, conn, path, up };
}
