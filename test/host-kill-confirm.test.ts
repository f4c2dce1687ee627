// send({ confirm }) to a socket of an attached process that is killed (SIGKILL) with the message
// handed to it by its host node but not read, from a remote node and from a process attached to
// the same node (issue 35, the nemesis's "confirmations after a restart" and "co-located
// confirmations"): the confirmation rejects (ECONNRESET), also once a new life of the process has
// bound the same port again; what the new life reads is confirmed. Addresses 127.151.x.
import { fork } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack } from '../lib/index.js';
import { counter, TEST_TCP_PORT } from './helpers.js';

const READER = fileURLToPath(new URL('./fixtures/host-reader-log.mjs', import.meta.url));
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

/** An attached process on `port` that logs what it reads (host-reader-log.mjs); `read`: from the start. */
function reader(cfg: { path: string; address: string; port: number; log: string; read: boolean }) {
  const child = fork(READER, [], {
    env: { ...process.env, HOST_READER: JSON.stringify(cfg) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  cleanup.push(() => child.kill('SIGKILL'));
  const bound = new Promise<void>((resolve, reject) => {
    child.once('message', () => resolve());
    child.once('exit', (code) => reject(new Error(`reader exited (${code}) before binding`)));
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return { child, bound, exited };
}

/** A host node (in this process), a remote node's socket, and a socket of a process attached to the node. */
async function cluster(net: number) {
  const dir = mkdtempSync(join(tmpdir(), 'rds-kill-confirm-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'node.sock');
  const nodeStack = new RdsStack({ tcpPort: TEST_TCP_PORT });
  await nodeStack.serve({ path });
  cleanup.push(() => nodeStack.close());
  const remoteStack = new RdsStack({ tcpPort: TEST_TCP_PORT });
  cleanup.push(() => remoteStack.close());
  const remote = new RdsSocket({ stack: remoteStack });
  await remote.bind({ address: `127.151.${net}.1`, port: 9000 });
  const coStack = await RdsStack.attach(path);
  cleanup.push(() => coStack.close());
  const colocated = new RdsSocket({ stack: coStack });
  await colocated.bind({ address: `127.151.${net}.2`, port: 9001 });
  return { dir, path, nodeStack, remote, colocated, dest: { address: `127.151.${net}.2`, port: 5000 } };
}

const numbered = (i: number, size = 64): Buffer => {
  const b = Buffer.alloc(size);
  b.writeUInt32BE(i, 0);
  return b;
};

/** The outcome of a send(): 'ok' or its error code. */
const outcome = (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => 'ok',
    (e: { code?: string }) => e.code ?? String(e),
  );

describe('confirm to an attached process killed with the message unread (issue 35)', () => {
  it('rejects (ECONNRESET) for a remote and a co-located sender, also after a new life binds the port; the new life confirms what it reads', async () => {
    const { dir, path, nodeStack, remote, colocated, dest } = await cluster(1);
    const log = join(dir, 'read.log');
    const life1 = reader({ path, log, read: false, ...dest });
    await life1.bound;
    const before = await counter(nodeStack, 'recv_delivered');
    const fromRemote = outcome(remote.send(numbered(1), dest, { confirm: true }));
    const fromColocated = outcome(colocated.send(numbered(2), dest, { confirm: true }));
    // Both delivered to the node's socket, which hands them to the process at once (its window
    // has room): the process has them and has not read them.
    let delivered = 0;
    for (let i = 0; i < 1000 && delivered < 2; i++) {
      delivered = (await counter(nodeStack, 'recv_delivered')) - before;
      if (delivered < 2) await new Promise((r) => setTimeout(r, 10));
    }
    expect(delivered).toBe(2);
    life1.child.kill('SIGKILL');
    await life1.exited;
    expect([await fromRemote, await fromColocated]).toEqual(['ECONNRESET', 'ECONNRESET']);
    // A new life of the process binds the same port and reads from the start.
    const life2 = reader({ path, log, read: true, ...dest });
    await life2.bound;
    expect(await outcome(remote.send(numbered(3), dest, { confirm: true, timeout: 10000 }))).toBe('ok');
    expect(await outcome(colocated.send(numbered(4), dest, { confirm: true, timeout: 10000 }))).toBe('ok');
    expect(readFileSync(log, 'utf8').split('\n').filter(Boolean).map(Number)).toEqual([3, 4]);
  });

  it('a reader killed in the middle of a stream of confirmed messages from both: every confirmed message is one it logged as read', async () => {
    const { dir, path, remote, colocated, dest } = await cluster(2);
    const log = join(dir, 'read.log');
    const life = reader({ path, log, read: true, ...dest });
    await life.bound;
    const confirmed: number[] = [];
    const settled: Promise<unknown>[] = [];
    const codes = new Map<string, number>();
    let n = 0;
    // Bounded: 600 messages (a third of 20 KB, so the node's window fills), then the kill.
    for (let round = 0; round < 300; round++) {
      for (const s of [remote, colocated]) {
        const i = n++;
        settled.push(
          s.send(numbered(i, i % 3 === 0 ? 20000 : 64), dest, { confirm: true, timeout: 15000 }).then(
            () => confirmed.push(i),
            (e: { code: string }) => codes.set(e.code, (codes.get(e.code) ?? 0) + 1),
          ),
        );
      }
      if (round === 150) life.child.kill('SIGKILL');
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(settled);
    const read = new Set(readFileSync(log, 'utf8').split('\n').filter(Boolean).map(Number));
    expect(confirmed.filter((i) => !read.has(i))).toEqual([]);
    // Nothing else than these: read, or rejected as the kill or the unbound port explains.
    expect([...codes.keys()].filter((c) => c !== 'ECONNRESET' && c !== 'ECONNREFUSED')).toEqual([]);
  });
});
