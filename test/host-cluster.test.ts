import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runNode } from './helpers.js';

// A cluster primary serving the host node (issue 21's "done when"): see the fixture for the steps.
// Uses the compiled package (npm test builds first). Addresses 127.150.0-1.x.
const SCRIPT = fileURLToPath(new URL('./fixtures/host-cluster.mjs', import.meta.url));

describe('one host node shared by a cluster', () => {
  it("4 cluster workers on their own ports of one address exchange 10,000 messages each with a peer node, once and in order, over npaths connections; a killed worker's port is free at once", async () => {
    const r = await runNode([SCRIPT, 'processes', '0', '10000'], 200_000);
    expect(r.out).toContain('HOST CLUSTER OK');
    const ex = JSON.parse(r.out.split('\n').find((l) => l.includes('"check":"exchange"'))!);
    expect(ex.connections).toBe(1);
    expect(ex.pathsUp).toBeLessThanOrEqual(ex.npaths);
    expect(r.code).toBe(0);
  }, 220_000);

  it('the same with 4 worker_threads of the serving process', async () => {
    const r = await runNode([SCRIPT, 'threads', '1', '10000'], 200_000);
    expect(r.out).toContain('HOST CLUSTER OK');
    expect(r.code).toBe(0);
  }, 220_000);
});
