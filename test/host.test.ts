import { type ChildProcess, fork, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsError, RdsSocket, RdsStack, constants } from '../lib/index.js';
import { AttachedSocket } from '../lib/host/index.js';
import {
  C_HELLO,
  C_REQ,
  encodeFrame,
  FrameParser,
  N_MSG,
  N_RESP,
  N_SENT,
  PROTOCOL_VERSION,
} from '../lib/host/protocol.js';
import { decodeCount, encodeSend } from '../lib/host/hot-frames.js';
import { runNode, TEST_TCP_PORT, until } from './helpers.js';

// The host node (issue 21). Addresses 127.150.2-9.x.
const WORKER = fileURLToPath(new URL('./fixtures/host-worker.mjs', import.meta.url));
const DAEMON = fileURLToPath(new URL('../dist/cli/rds-socketd.js', import.meta.url));
const RDS_INFO = fileURLToPath(new URL('../dist/cli/rds-info.js', import.meta.url));
const LIAR = fileURLToPath(new URL('./fixtures/host-liar.mjs', import.meta.url));

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

function tmpPath(): string {
  const dir = mkdtempSync(join(tmpdir(), 'rds-host-test-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'node.sock');
}

async function serve(
  path = tmpPath(),
  opts: { maxClientSendBytes?: number } = {},
): Promise<{ stack: RdsStack; path: string; node: Awaited<ReturnType<RdsStack['serve']>> }> {
  const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
  const node = await stack.serve({ path, ...opts });
  cleanup.push(() => stack.close());
  return { stack, path, node };
}

/** A node with a 1 MiB budget per process, and two sockets of one attached process on `address` (ports 5000, 5001). */
async function budgetedPair(address: string, sndbuf: number) {
  const { path, node, stack: nodeStack } = await serve(tmpPath(), { maxClientSendBytes: 1 << 20 });
  const stack = await RdsStack.attach(path);
  cleanup.push(() => stack.close());
  const a = new RdsSocket({ stack });
  const b = new RdsSocket({ stack });
  await a.bind({ address, port: 5000 });
  await b.bind({ address, port: 5001 });
  for (const x of [a, b]) x.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, sndbuf);
  return { node, nodeStack, a, b };
}

async function peerSocket(address: string, port = 9000): Promise<RdsSocket> {
  const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
  cleanup.push(() => stack.close());
  const s = new RdsSocket({ stack });
  await s.bind({ address, port });
  s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 4 << 20);
  return s;
}

/** A child process running the worker fixture; `next(t)` waits for its next message of type t. */
function worker(
  cfg: object,
  env: Record<string, string> = {},
): { child: ChildProcess; next: (t: string) => Promise<Record<string, unknown>>; got: Set<number> } {
  const child = fork(WORKER, [], {
    env: { ...process.env, HOST_WORKER: JSON.stringify(cfg), ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  cleanup.push(() => child.kill('SIGKILL'));
  const q: Record<string, unknown>[] = [];
  const got = new Set<number>();
  let wake: (() => void) | null = null;
  child.on('message', (m: Record<string, unknown>) => {
    if (m.t === 'got') got.add(m.seq as number);
    else q.push(m);
    wake?.();
  });
  const next = async (t: string): Promise<Record<string, unknown>> => {
    const deadline = Date.now() + 20000;
    for (;;) {
      const i = q.findIndex((m) => m.t === t || m.t === 'error');
      if (i >= 0) {
        const m = q.splice(i, 1)[0]!;
        if (m.t === 'error') throw new Error(`worker: ${String(m.code)} ${String(m.message)}`);
        return m;
      }
      if (Date.now() > deadline) throw new Error(`worker sent no ${t}`);
      await new Promise<void>((r) => {
        wake = r;
        setTimeout(r, 100);
      });
    }
  };
  return { child, next, got };
}

/** Sends n sequence-numbered messages to `to` and checks their echoes come back once, in order. */
async function echoes(peer: RdsSocket, to: { address: string; port: number }, n: number, from = 0): Promise<void> {
  const got = (async () => {
    for (let i = from; i < from + n; i++) {
      const m = await peer.recv({ timeout: 10000 });
      expect(m.data.readUInt32BE(0)).toBe(i);
    }
  })();
  for (let i = from; i < from + n; i++) {
    const b = Buffer.alloc(100);
    b.writeUInt32BE(i, 0);
    await peer.send(b, to, { timeout: 10000 });
  }
  await got;
}

describe('host node', () => {
  it('a second process attaches through RDS_SOCKET_NODE; its port is EADDRINUSE for every other process; SIGKILL frees it at once', async () => {
    const { stack, path, node } = await serve();
    const peer = await peerSocket('127.150.2.2');
    const w = worker({ address: '127.150.2.1', port: 7000 }, { RDS_SOCKET_NODE: path });
    expect(await w.next('bound')).toMatchObject({ kind: 'AttachedSocket' });
    const mine = new RdsSocket({ stack: await RdsStack.attach(path) });
    await expect(mine.bind({ address: '127.150.2.1', port: 7000 })).rejects.toMatchObject({ code: 'EADDRINUSE' });
    await expect(new RdsSocket({ stack }).bind({ address: '127.150.2.1', port: 7000 })).rejects.toMatchObject({
      code: 'EADDRINUSE',
    });
    await echoes(peer, { address: '127.150.2.1', port: 7000 }, 1000);
    expect(
      node.clients().some((c) => c.pid === w.child.pid && c.sockets.some((s) => s.bound === '127.150.2.1:7000')),
    ).toBe(true);
    // rds-info asks the host node like any node, and sees every process's sockets with their pid.
    const info = await runNode([RDS_INFO, '--socket', path, '-k'], 20000);
    expect(info.code).toBe(0);
    expect(info.out).toMatch(new RegExp(`127\\.150\\.2\\.1\\s+7000 .* ${w.child.pid}\\s+\\d+\\s+peer\\s*$`, 'm'));
    w.child.kill('SIGKILL');
    await until(() => !node.clients().some((c) => c.pid === w.child.pid), 'the node to notice the client died');
    await mine.bind({ address: '127.150.2.1', port: 7000 });
    expect(mine.address()).toEqual({ address: '127.150.2.1', port: 7000 });
    expect(node.counters.detached).toBeGreaterThanOrEqual(1);
    await mine.stack.close();
  });

  it('the node going away fails pending calls and iterators with ENETDOWN naming it; attach works again once a node is back', async () => {
    const { stack, path } = await serve();
    const attached = await RdsStack.attach(path);
    const s = new RdsSocket({ stack: attached });
    expect(s).toBeInstanceOf(AttachedSocket);
    await s.bind({ address: '127.150.3.1', port: 5000 });
    const pending = s.recv();
    const iter = (async () => {
      for await (const _ of s) {
        /* nothing arrives */
      }
    })();
    await stack.close();
    await expect(pending).rejects.toMatchObject({
      code: 'ENETDOWN',
      message: expect.stringContaining(`the RDS node at ${path} went away`),
    });
    await expect(iter).rejects.toMatchObject({ code: 'ENETDOWN' });
    expect(() => s.sendmsg(Buffer.from('x'), { address: '127.150.3.2', port: 1 })).toThrow(RdsError);
    await expect(RdsStack.attach(path)).rejects.toMatchObject({ code: 'ENETDOWN' });
    // A node again at the same path: the same attached stack re-attaches for new sockets.
    await serve(path);
    const again = new RdsSocket({ stack: attached });
    await again.bind({ address: '127.150.3.1', port: 5000 });
    const peer = await peerSocket('127.150.3.2');
    peer.sendmsg(Buffer.from('back'), again.address());
    expect((await again.recv({ timeout: 5000 })).data.toString()).toBe('back');
    await attached.close();
  });

  it('new RdsSocket() attaches when a node answers at RDS_SOCKET_NODE and stays embedded when its pid is dead or the variable is none', async () => {
    const { path } = await serve();
    const saved = process.env.RDS_SOCKET_NODE;
    cleanup.push(() => {
      if (saved === undefined) delete process.env.RDS_SOCKET_NODE;
      else process.env.RDS_SOCKET_NODE = saved;
    });
    process.env.RDS_SOCKET_NODE = path;
    const a = new RdsSocket();
    expect(a).toBeInstanceOf(AttachedSocket);
    expect(a).toBeInstanceOf(RdsSocket);
    await a.close();
    process.env.RDS_SOCKET_NODE = 'none';
    const b = new RdsSocket();
    expect(b).not.toBeInstanceOf(AttachedSocket);
    await b.close();
    // A node killed with SIGKILL leaves its socket and pid files: a dead pid means no node.
    const stale = tmpPath();
    writeFileSync(stale, '');
    const dead = spawn(process.execPath, ['-e', '0']);
    await new Promise((r) => dead.on('exit', r));
    writeFileSync(`${stale}.pid`, `${dead.pid}\n`);
    process.env.RDS_SOCKET_NODE = stale;
    const c = new RdsSocket();
    expect(c).not.toBeInstanceOf(AttachedSocket);
    await c.close();
  });

  it('an attached sender whose node first ran out of send buffer still gets ENOBUFS once the destination is congested', async () => {
    // The node's own sendmsg fails with EAGAIN first (an 8 KiB SO_SNDBUF fills before the map
    // comes back) and its send() then waits for the port to clear: the attached process must
    // still learn of the congestion, as a kernel socket would.
    const { path } = await serve();
    const attached = await RdsStack.attach(path);
    const a = new RdsSocket({ stack: attached });
    await a.bind({ address: '127.150.8.1', port: 5000 });
    a.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 8192);
    const b = await peerSocket('127.150.8.2');
    b.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 4096);
    let code = '';
    const deadline = Date.now() + 10_000;
    while (code !== 'ENOBUFS' && Date.now() < deadline) {
      try {
        a.sendmsg(Buffer.alloc(1000), b.address());
      } catch (e) {
        code = (e as { code?: string }).code ?? '';
        if (code === 'EAGAIN') await new Promise((r) => setTimeout(r, 2));
      }
    }
    expect(code).toBe('ENOBUFS');
    await attached.close();
  });

  it('send({ confirm }) to an attached socket resolves once the application has read it, not when the node has; unread at close is ECONNRESET', async () => {
    const { path } = await serve();
    const attached = await RdsStack.attach(path);
    const b = new RdsSocket({ stack: attached });
    await b.bind({ address: '127.150.7.2', port: 5000 });
    const a = await peerSocket('127.150.7.1');
    // Not read: the node has it (handed to the client), the application has not.
    await expect(a.send(Buffer.from('one'), b.address(), { confirm: true, timeout: 500 })).rejects.toMatchObject({
      code: 'ETIMEDOUT',
    });
    const two = a.send(Buffer.from('two'), b.address(), { confirm: true, timeout: 5000 });
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('one');
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('two');
    await two;
    const three = a.send(Buffer.from('three'), b.address(), { confirm: true, timeout: 5000 });
    await until(() => b.poll() !== constants.POLLOUT + constants.POLLWRNORM, 'three to reach the client');
    await b.close();
    await expect(three).rejects.toMatchObject({ code: 'ECONNRESET' });
    await attached.close();
  });

  it('rds-socketd killed and started again: traffic resumes, no message confirmed to the sender is lost', async () => {
    const path = tmpPath();
    const startDaemon = async (): Promise<ChildProcess> => {
      const d = spawn(process.execPath, [DAEMON, '--path', path, '--tcp-port', String(TEST_TCP_PORT), '--quiet'], {
        stdio: 'ignore',
      });
      cleanup.push(() => d.kill('SIGKILL'));
      await until(() => {
        try {
          return existsSync(`${path}.pid`) && readFileSync(`${path}.pid`, 'utf8').trim() === String(d.pid);
        } catch {
          return false;
        }
      }, 'rds-socketd to serve');
      return d;
    };
    let daemon = await startDaemon();
    // The peer has the smaller address: it is the side that dials (spec: the smaller address
    // initiates), so it reconnects to the restarted node by itself.
    const w = worker({ address: '127.150.4.2', port: 7000, explicit: true, path, reattach: true, report: true });
    await w.next('bound');
    const peer = await peerSocket('127.150.4.1');
    const to = { address: '127.150.4.2', port: 7000 };
    const confirmed = new Set<number>();
    const N = 600;
    const echoDrain = (async () => {
      for (;;) {
        try {
          await peer.recv();
        } catch {
          return;
        }
      }
    })();
    let next = 0;
    const sendOne = async (i: number): Promise<void> => {
      const b = Buffer.alloc(64);
      b.writeUInt32BE(i, 0);
      for (let attempt = 0; attempt < 400; attempt++) {
        try {
          await peer.send(b, to, { confirm: true, timeout: 2000 });
          confirmed.add(i);
          return;
        } catch (e) {
          if (!(e instanceof RdsError)) throw e;
          await new Promise((r) => setTimeout(r, 20));
        }
      }
      throw new Error(`message ${i} never confirmed`);
    };
    const senders = Array.from({ length: 8 }, async () => {
      while (next < N) await sendOne(next++);
    });
    await until(() => confirmed.size >= N / 3, 'a third confirmed', 30000);
    daemon.kill('SIGKILL');
    await w.next('gone');
    daemon = await startDaemon();
    await w.next('bound');
    await Promise.all(senders);
    // The worker reports what it read over IPC, which may trail the confirmations by a little.
    await until(
      () => [...confirmed].every((i) => w.got.has(i)),
      'every confirmed message to be among those the worker read',
      5000,
    );
    expect(confirmed.size).toBe(N);
    await peer.close();
    await echoDrain;
  }, 60_000);

  it("records the kernel's credentials of an attached process (SO_PEERCRED), not the pid it claims, and rds-info shows them", async () => {
    const { path, node } = await serve();
    const liar = spawn(process.execPath, [LIAR], {
      env: { ...process.env, HOST_LIAR_PATH: path, HOST_LIAR_ADDRESS: '127.131.1.1', HOST_LIAR_PORT: '7100' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    cleanup.push(() => liar.kill('SIGKILL'));
    let out = '';
    liar.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    await until(() => out.includes('\n'), 'the lying client to bind', 15000);
    expect(out).toBe('bound\n');
    const c = node.clients().find((x) => x.sockets.some((s) => s.bound === '127.131.1.1:7100'));
    expect(c).toMatchObject({
      pid: liar.pid,
      claimedPid: 1,
      verified: true,
      uid: process.getuid!(),
      gid: process.getgid!(),
    });
    const info = await runNode([RDS_INFO, '--socket', path, '-k'], 20000);
    expect(info.code).toBe(0);
    expect(info.out).toMatch(
      new RegExp(`127\\.131\\.1\\.1\\s+7100 .* ${liar.pid}\\s+${process.getuid!()}\\s+peer\\s*$`, 'm'),
    );
  });

  it('gives a client its send budget back without a SENT frame per message: per quarter of SO_SNDBUF, or with other frames', async () => {
    const { path } = await serve();
    const peer = await peerSocket('127.131.2.2');
    const raw = await rawClient(path);
    raw.send(encodeFrame(C_REQ, 1, 1, { op: 'open' }));
    raw.send(encodeFrame(C_REQ, 1, 2, { op: 'bind', address: '127.131.2.1', port: 5001 }));
    expect(await raw.response(2)).toMatchObject({ ok: true });
    // getsockopt reports twice the budget: a quarter of the budget is an eighth of it.
    const quarter = new RdsSocket({ stack: peer.stack }).getsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF) / 8;
    const msg = Buffer.alloc(100, 3);
    const n = Math.floor(quarter / 100) - 1;
    let got = 0;
    const reading = (async () => {
      for (; got < n; got++) await peer.recv({ timeout: 10000 });
    })();
    reading.catch(() => {});
    // One message per event-loop turn: the node used to answer each with a SENT frame. Now a
    // SENT frame only rides along with another frame (here: the node's congestion-map notices
    // as the paths come up), under a quarter of SO_SNDBUF.
    const othersBefore = raw.others;
    for (let i = 0; i < n; i++) {
      raw.send(encodeSend(1, 0, '127.131.2.2', 9000, 0, false, undefined, msg));
      await new Promise((r) => setImmediate(r));
    }
    await until(() => got >= n, 'the peer to read them');
    expect(raw.sent.length).toBeLessThanOrEqual(raw.others - othersBefore);
    expect(raw.sent.length).toBeLessThan(n / 10);
    // Past a quarter of SO_SNDBUF unreported, a report comes on its own.
    const unreported = n * 100 - raw.sent.reduce((a, b) => a + b, 0);
    const sentBefore = raw.sent.length;
    const more = Math.ceil((quarter - unreported) / 100) + 1;
    for (let i = 0; i < more; i++) raw.send(encodeSend(1, 0, '127.131.2.2', 9000, 0, false, undefined, msg));
    for (let i = 0; i < more; i++) await peer.recv({ timeout: 10000 });
    await until(() => raw.sent.length > sentBefore, 'a SENT frame');
    // A call's answer carries the rest: every byte is given back.
    raw.send(encodeFrame(C_REQ, 1, 3, { op: 'flush' }));
    expect(await raw.response(3)).toMatchObject({ ok: true });
    expect(raw.sent.reduce((a, b) => a + b, 0)).toBe((n + more) * 100);
    await reading;
    raw.destroy();
  });

  it('bounds a client: one sending past its send buffer is dropped and counted, the others go on', async () => {
    const { path, node } = await serve();
    const good = new RdsSocket({ stack: await RdsStack.attach(path) });
    await good.bind({ address: '127.150.5.1', port: 5000 });
    const peer = await peerSocket('127.150.5.2');
    const raw = await rawClient(path);
    raw.send(encodeFrame(C_REQ, 1, 1, { op: 'open' }));
    raw.send(encodeFrame(C_REQ, 1, 2, { op: 'bind', address: '127.150.5.1', port: 5001 }));
    await raw.response(2);
    // Nobody listens at 127.150.5.9: the node's socket fills, then its backlog; 8 MiB is far past either.
    const chunk = Buffer.alloc(60000);
    for (let i = 0; i < 140 && !raw.closed; i++)
      raw.send(encodeSend(1, 0, '127.150.5.9', 1, 0, false, undefined, chunk));
    await until(() => raw.closed, 'the node to drop the client', 20000);
    expect(node.counters.dropped).toBe(1);
    peer.sendmsg(Buffer.from('still here'), good.address());
    expect((await good.recv({ timeout: 5000 })).data.toString()).toBe('still here');
    await good.stack.close();
  });

  it("counts an attached socket's SO_SNDBUF until the peer acknowledges, as the kernel does, not until the node has the bytes", async () => {
    const { path } = await serve();
    const s = new RdsSocket({ stack: await RdsStack.attach(path) });
    cleanup.push(() => s.stack.close());
    await s.bind({ address: '127.131.7.1', port: 5000 });
    s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 64 << 10);
    // Nobody listens at 127.131.7.2: nothing is ever acknowledged.
    const to = { address: '127.131.7.2', port: 9000 };
    const msg = Buffer.alloc(4096);
    let sent = 0;
    for (let i = 0; i < 100; i++) {
      try {
        s.sendmsg(msg, to);
        sent += msg.length;
      } catch (e) {
        expect(e).toMatchObject({ code: 'EAGAIN', message: expect.stringMatching(/not yet acknowledged/) });
        break;
      }
    }
    expect(sent).toBe(64 << 10);
    // The node's own socket has room for all of it (its SO_SNDBUF is the same 64 KiB), but that
    // gives nothing back: the next send waits until the peer acknowledges, here past its timeout.
    await expect(s.send(msg, to, { timeout: 400 })).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    // RDS_CANCEL_SENT_TO drops them in the node: the budget comes back.
    s.setsockopt(constants.SOL_RDS, constants.RDS_CANCEL_SENT_TO, to);
    await s.send(msg, to, { timeout: 5000 });
  });

  it('bounds what one process may have the node hold, all its sockets together: EAGAIN at the budget, delivered once the peer reads', async () => {
    const { node, a, b } = await budgetedPair('127.131.8.1', 4 << 20);
    const peer = await peerSocket('127.131.8.2');
    peer.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 16 << 20);
    const to = peer.address();
    const chunk = Buffer.alloc(64 << 10);
    // Each socket's 4 MiB would take far more; the process's 1 MiB stops both, once it is reached.
    let sent = 0;
    let refusal: unknown = null;
    for (let i = 0; i < 64 && refusal === null; i++) {
      try {
        (i % 2 === 0 ? a : b).sendmsg(chunk, to);
        sent++;
      } catch (e) {
        refusal = e;
      }
    }
    expect(refusal).toMatchObject({ code: 'EAGAIN', message: expect.stringMatching(/budget for this process/) });
    expect(sent).toBe(16);
    expect(a.poll() & constants.POLLOUT).toBe(0);
    expect(b.poll() & constants.POLLOUT).toBe(0);
    // Once the peer reads, both go on, and every message arrives once.
    const more = [a.send(chunk, to, { timeout: 10000 }), b.send(chunk, to, { timeout: 10000 })];
    for (let i = 0; i < sent + 2; i++) await peer.recv({ timeout: 10000 });
    await Promise.all(more);
    expect(node.counters.dropped).toBe(0);
  });

  it('gives a process back what the peer acknowledged, so one socket may use the budget another freed', async () => {
    const { nodeStack, a, b } = await budgetedPair('127.131.10.1', 8 << 20);
    const reader = await peerSocket('127.131.10.2');
    const chunk = Buffer.alloc(64 << 10);
    // Half the budget to a reader: acknowledged, far below a quarter of a's SO_SNDBUF.
    for (let i = 0; i < 8; i++) a.sendmsg(chunk, reader.address());
    for (let i = 0; i < 8; i++) await reader.recv({ timeout: 10000 });
    await until(() => {
      const q = nodeStack.info();
      return ![...q.sendQueue, ...q.retransQueue].some((m) => m.localPort === 5000);
    }, 'the node to have the acknowledgements');
    // The whole budget to nobody (never acknowledged): b gets all of it once the node says a's half
    // left, and not a byte more.
    const dead = { address: '127.131.10.9', port: 9 };
    for (let i = 0; i < 16; i++) await b.send(chunk, dead, { timeout: 5000 });
    await expect(b.send(chunk, dead, { timeout: 300 })).rejects.toMatchObject({ code: 'ETIMEDOUT' });
  });

  it("drops a process that sends past the node's budget for it, however large its SO_SNDBUF, and serves the others", async () => {
    const { path, node } = await serve(tmpPath(), { maxClientSendBytes: 1 << 20 });
    const good = new RdsSocket({ stack: await RdsStack.attach(path) });
    cleanup.push(() => good.stack.close());
    await good.bind({ address: '127.131.9.1', port: 5000 });
    const peer = await peerSocket('127.131.9.2');
    const raw = await rawClient(path);
    raw.send(encodeFrame(C_REQ, 1, 1, { op: 'open' }));
    raw.send(encodeFrame(C_REQ, 1, 2, { op: 'bind', address: '127.131.9.1', port: 5001 }));
    raw.send(
      encodeFrame(C_REQ, 1, 3, {
        op: 'setsockopt',
        level: constants.SOL_SOCKET,
        name: constants.SO_SNDBUF,
        value: 64 << 20,
      }),
    );
    expect(await raw.response(3)).toMatchObject({ ok: true });
    // Nobody listens at 127.131.9.9: nothing is acknowledged; 3 MiB is within SO_SNDBUF, past the budget.
    const chunk = Buffer.alloc(64 << 10);
    for (let i = 0; i < 48 && !raw.closed; i++)
      raw.send(encodeSend(1, 0, '127.131.9.9', 1, 0, false, undefined, chunk));
    await until(() => raw.closed, 'the node to drop the client', 20000);
    expect(node.counters.malformed).toBe(1);
    peer.sendmsg(Buffer.from('still here'), good.address());
    expect((await good.recv({ timeout: 5000 })).data.toString()).toBe('still here');
  });

  it("fuzz: hostile bytes on the control socket never crash the node nor reach another client's messages", async () => {
    const { path, node } = await serve();
    const good = new RdsSocket({ stack: await RdsStack.attach(path) });
    await good.bind({ address: '127.150.6.1', port: 5000 });
    const peer = await peerSocket('127.150.6.2');
    let seed = 12345;
    const rnd = (n: number): number => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    const leaked: string[] = [];
    for (let round = 0; round < 60; round++) {
      const raw = await rawClient(path, round % 3 !== 0);
      raw.onMsg = (d) => leaked.push(d.toString());
      // A valid prefix sometimes (open a socket, try to bind the good client's port), then garbage
      // or frames with random types, ids, socket numbers and meta.
      raw.send(encodeFrame(C_REQ, 7, 1, { op: 'open' }));
      raw.send(encodeFrame(C_REQ, 7, 2, { op: 'bind', address: '127.150.6.1', port: 5000 }));
      for (let k = 0; k < 20; k++) {
        const kind = rnd(4);
        if (kind === 0) {
          const b = Buffer.alloc(1 + rnd(64));
          for (let j = 0; j < b.length; j++) b[j] = rnd(256);
          raw.send([b]);
        } else if (kind === 1) {
          raw.send(
            encodeFrame(
              rnd(32),
              rnd(10),
              rnd(5),
              {
                op: ['open', 'bind', 'close', 'flush', 'setsockopt', 'x'][rnd(6)],
                a: 1,
                level: rnd(300),
                name: rnd(70),
                value: rnd(1 << 20),
              },
              Buffer.alloc(rnd(100)),
            ),
          );
        } else if (kind === 2) {
          const f = Buffer.concat(encodeFrame(C_REQ, rnd(10), rnd(10), { op: 'open' }));
          f.writeUInt32BE(rnd(2) === 0 ? 0xffffffff : rnd(40), 0);
          raw.send([f]);
        } else {
          raw.send(
            encodeSend(rnd(10), rnd(3), '127.150.6.2', 9000, 0, rnd(2) === 1, undefined, Buffer.from('hostile')),
          );
        }
      }
      peer.sendmsg(Buffer.from(`for good ${round}`), good.address());
      expect((await good.recv({ timeout: 5000 })).data.toString()).toBe(`for good ${round}`);
      raw.destroy();
    }
    expect(leaked.filter((s) => s.startsWith('for good'))).toEqual([]);
    expect(node.counters.malformed).toBeGreaterThan(0);
    // Still serving.
    const late = new RdsSocket({ stack: await RdsStack.attach(path) });
    await late.bind({ address: '127.150.6.1', port: 5001 });
    await late.stack.close();
    await good.stack.close();
  });
});

interface Raw {
  /** Bytes each SENT frame gave back, in order; and how many frames of other types came. */
  sent: number[];
  others: number;
  send(parts: Buffer[]): void;
  response(id: number): Promise<Record<string, unknown>>;
  closed: boolean;
  onMsg: ((d: Buffer) => void) | null;
  destroy(): void;
}

/** A client speaking the protocol by hand (hello included unless `hello` is false). */
async function rawClient(path: string, hello = true): Promise<Raw> {
  const c: Socket = connect(path);
  await new Promise<void>((res, rej) => {
    c.once('connect', () => res());
    c.once('error', rej);
  });
  c.on('error', () => {});
  const parser = new FrameParser();
  const resps = new Map<number, Record<string, unknown>>();
  const raw: Raw = {
    sent: [],
    others: 0,
    closed: false,
    onMsg: null,
    send: (parts) => {
      if (!raw.closed) for (const p of parts) c.write(p);
    },
    response: async (id) => {
      await until(() => resps.has(id) || raw.closed, `response ${id}`);
      return resps.get(id) ?? {};
    },
    destroy: () => c.destroy(),
  };
  c.on('close', () => (raw.closed = true));
  c.on('data', (d: Buffer) => {
    try {
      for (const f of parser.push(d)) {
        if (f.type === N_RESP) resps.set(f.id, f.meta);
        if (f.type === N_MSG) raw.onMsg?.(f.data);
        if (f.type === N_SENT) raw.sent.push(decodeCount(f.bin).n);
        else raw.others++;
      }
    } catch {
      /* the test's own client; ignore */
    }
  });
  if (hello) raw.send(encodeFrame(C_HELLO, 0, 0, { v: PROTOCOL_VERSION, pid: 1 }));
  return raw;
}
