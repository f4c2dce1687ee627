import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RdsSocket, RdsStack } from '../lib/index.js';
import { TEST_TCP_PORT } from './helpers.js';

// What the host-node tests that speak the attach protocol by hand share: a node served by a stack
// of this process on a fresh socket path, and peer sockets on stacks of their own. Everything
// made is closed (and the directory removed) by the `cleanup` list the test file runs after each
// test (cleanupsPerTest() in helpers.ts, or a list of its own).
interface Cleanups {
  push(close: () => unknown): void;
}

/** A host node on a fresh Unix socket path, served by an in-process stack on TEST_TCP_PORT. */
export async function serveNode(cleanup: Cleanups, dirPrefix: string) {
  const dir = mkdtempSync(join(tmpdir(), dirPrefix));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'node.sock');
  const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
  const node = await stack.serve({ path });
  cleanup.push(() => stack.close());
  return { path, node, stack };
}

/** A socket bound at address:port on a stack of its own: a peer the node reaches over TCP. */
export async function peerSocket(cleanup: Cleanups, address: string, port = 9000): Promise<RdsSocket> {
  const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
  cleanup.push(() => stack.close());
  const s = new RdsSocket({ stack });
  await s.bind({ address, port });
  return s;
}
