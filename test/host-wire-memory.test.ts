import { createHash } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants } from '../lib/index.js';
import { serveNode, peerSocket } from './host-kit.js';

// The host node reads a large SEND from its client into its stack's wire memory (WireSlab), and
// the queued message keeps those bytes by reference until the peer acknowledges them; then the
// memory goes back to the slab and the next large SEND is read into it, instead of a new 64 KiB
// buffer per message for the collector (a third of the sending node's CPU went to collecting
// them). What a user relies on: every message still arrives whole and in order while the memory
// is reused under it. Addresses 127.159.x.
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

describe("the host node's large SENDs in its stack's wire memory", () => {
  it('200 messages of 64 KiB, each its own pattern, arrive intact and in order while the memory comes back for reuse', async () => {
    const { path, stack: nodeStack } = await serveNode(cleanup, 'rds-wiremem-');
    const peer = await peerSocket(cleanup, '127.159.0.2', 9100);
    peer.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 16 << 20);
    const app = await RdsStack.attach(path);
    cleanup.push(() => app.close());
    const s = new RdsSocket({ stack: app });
    await s.bind({ address: '127.159.0.1', port: 9101 });
    s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 2 << 20);
    const N = 200;
    const want: string[] = [];
    const got: string[] = [];
    const reader = (async () => {
      for (let i = 0; i < N; i++) got.push(sha((await peer.recv({ timeout: 30_000 })).data));
    })();
    let recycledWhileSending = 0;
    for (let i = 0; i < N; i++) {
      const d = Buffer.alloc(65536, (i * 37 + 11) & 0xff);
      d.writeUInt32BE(i, 0); // no two alike, even where the fill byte repeats
      want.push(sha(d));
      await s.send(d, { address: '127.159.0.2', port: 9100 }, { timeout: 30_000 });
      if (nodeStack.wireSlab.pooled > 0) recycledWhileSending++;
    }
    await reader;
    expect(got).toEqual(want);
    // The node took SEND memory back while the stream ran (acknowledged messages), so later
    // SENDs were read into memory an earlier one had used.
    expect(recycledWhileSending).toBeGreaterThan(0);
    // What it keeps for reuse is bounded: 16 MiB in a host node (server.ts NODE_WIRE_POOL_BYTES).
    expect(nodeStack.wireSlab.pooled).toBeLessThanOrEqual(16 << 20);
  });
});
