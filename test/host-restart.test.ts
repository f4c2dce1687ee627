import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { median, NodeProc, restartRounds, startDaemon } from './restart-lib.js';

// Issue 33, the host node: a peer restarted on either side of an rds-socketd node's attached
// sockets is reached again, and a restarted rds-socketd (with its attached process) is reached
// again by its old peers. Addresses 127.171.x.
const procs: NodeProc[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const p of procs.splice(0)) await p.kill();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function sockPath(): string {
  const dir = mkdtempSync(join(tmpdir(), 'rds-host-restart-'));
  dirs.push(dir);
  return join(dir, 'node.sock');
}

/** An rds-socketd and a process attached to it with a socket at `address`:4000; killed together. */
async function attachedNode(path: string, address: string): Promise<NodeProc> {
  const daemon = await startDaemon(path);
  let n: NodeProc;
  try {
    n = await NodeProc.start({ address, port: 4000 }, { attach: path });
  } catch (e) {
    daemon.kill('SIGKILL');
    throw e;
  }
  n.companions.push(daemon);
  return n;
}

describe("a host node's attached socket reaches a restarted peer", () => {
  for (const [order, restarted, sender] of [
    ['on the smaller address', '127.171.1.3', '127.171.1.4'],
    ['on the larger address', '127.171.2.4', '127.171.2.3'],
  ] as const) {
    it(`peer restarted ${order}: confirmed sends (queued while it was gone, or sent after) reach the new process, median < 1 s after it is back`, async () => {
      const s = await attachedNode(sockPath(), sender);
      procs.push(s);
      const { delays } = await restartRounds(
        s,
        () => NodeProc.start({ address: restarted, port: 4000 }),
        6,
        (n) => procs.push(n),
      );
      expect(median(delays), `delays ${delays.join(', ')} ms`).toBeLessThan(1000);
    }, 90_000);
  }
});

describe('a restarted rds-socketd is reached again by its old peers', () => {
  for (const [order, restarted, sender] of [
    ['on the smaller address', '127.171.3.3', '127.171.3.4'],
    ['on the larger address', '127.171.4.4', '127.171.4.3'],
  ] as const) {
    it(`rds-socketd (and the process attached to it) restarted ${order}: the old peer's confirmed sends reach the new attached process, median < 1 s after it is bound`, async () => {
      const s = await NodeProc.start({ address: sender, port: 4000 });
      procs.push(s);
      const path = sockPath();
      const { delays } = await restartRounds(
        s,
        () => attachedNode(path, restarted),
        6,
        (n) => procs.push(n),
      );
      expect(median(delays), `delays ${delays.join(', ')} ms`).toBeLessThan(1000);
    }, 120_000);
  }
});
