import { type ChildProcess, fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants } from '../lib/index.js';
import { TEST_TCP_PORT } from './helpers.js';

// The attach protocol's liveness rule as docs/host-node.md and rds-socketd(8) state it: a paused client
// (SIGSTOP, as a debugger or a long GC) is not dropped; its port congests; it reads on when it
// resumes. Addresses 127.150.12.x.
const WORKER = fileURLToPath(new URL('./fixtures/host-worker.mjs', import.meta.url));

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

/** The echoing worker fixture, attached through RDS_SOCKET_NODE; resolves once it has bound. */
async function echoWorker(path: string, address: string, port: number): Promise<ChildProcess> {
  const child = fork(WORKER, [], {
    env: { ...process.env, RDS_SOCKET_NODE: path, HOST_WORKER: JSON.stringify({ address, port }) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  cleanup.push(() => {
    child.kill('SIGCONT');
    child.kill('SIGKILL');
  });
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('the worker did not bind')), 20000);
    child.on('message', (m: { t: string; message?: string }) => {
      if (m.t === 'bound') {
        clearTimeout(t);
        resolve();
      } else if (m.t === 'error') reject(new Error(`worker: ${m.message}`));
    });
  });
  return child;
}

describe('host node liveness', () => {
  it('a client stopped with SIGSTOP keeps its sockets: its port congests, it is not dropped, and it reads everything once resumed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rds-hdp-live-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'node.sock');
    const nodeStack = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanup.push(() => nodeStack.close());
    const node = await nodeStack.serve({ path });
    const child = await echoWorker(path, '127.150.12.1', 7000);
    const peerStack = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanup.push(() => peerStack.close());
    const peer = new RdsSocket({ stack: peerStack });
    await peer.bind({ address: '127.150.12.2', port: 9000 });
    peer.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 8 << 20);
    const to = { address: '127.150.12.1', port: 7000 };
    const msg = (i: number): Buffer => {
      const b = Buffer.alloc(1024);
      b.writeUInt32BE(i, 0);
      return b;
    };
    await peer.send(msg(0), to, { timeout: 10000 });
    expect((await peer.recv({ timeout: 10000 })).data.readUInt32BE(0)).toBe(0);

    child.kill('SIGSTOP');
    // Until the node reports the stopped client's port congested: what it was handed (its
    // SO_RCVBUF) and then SO_RCVBUF more waiting in the node.
    let sent = 1;
    let congested = false;
    const deadline = Date.now() + 20000;
    while (!congested && sent < 4000 && Date.now() < deadline) {
      try {
        peer.sendmsg(msg(sent), to);
        sent++;
      } catch (e) {
        if ((e as { code?: string }).code === 'ENOBUFS') congested = true;
        else if ((e as { code?: string }).code === 'EAGAIN') await new Promise((r) => setTimeout(r, 5));
        else throw e;
      }
      if (sent % 64 === 0) await new Promise((r) => setImmediate(r));
    }
    expect(congested).toBe(true);
    expect(sent).toBeGreaterThan(100); // 1 KiB messages: over SO_RCVBUF (104 KiB) went out first
    expect(node.clients().map((c) => c.claimedPid ?? c.pid)).toContain(child.pid);
    expect(node.counters.dropped).toBe(0);

    child.kill('SIGCONT');
    for (let i = 1; i < sent; i++) {
      const m = await peer.recv({ timeout: 15000 });
      expect(m.data.readUInt32BE(0)).toBe(i);
    }
    expect(node.counters.dropped).toBe(0);
    expect(node.clients()).toHaveLength(1);
  }, 60000);
});
