import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ControlEndpoint } from '../lib/core/ext/control.js';
import { runNode } from './helpers.js';

// rds-info -v (issue 38): rds-tools' verbose tail on each InfiniBand connection line. A node with
// an IB connection needs an RDMA device; the control endpoint here answers a node's info document
// with one, as an IB node's does (transport figures as the IB transport's pathInfo reports them).
const cli = fileURLToPath(new URL('../dist/cli/rds-info.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'rds-info-v-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ibPath = {
  index: 0,
  state: 'UP',
  nextTxSeq: 5,
  nextRxSeq: 7,
  sendQueue: 0,
  retransQueue: 0,
  transport: { completionsPerWakeup: 3, maxSendWr: 129, maxRecvWr: 256 },
};
const info = {
  pid: 4242,
  counters: {},
  sockets: [],
  connections: [{ localAddress: '10.9.0.1', peerAddress: '10.9.0.2', transport: 'ib', npaths: 1, paths: [ibPath] }],
  sendQueue: [],
  retransQueue: [],
  recvQueue: [],
};

describe('rds-info -v', () => {
  it('adds send_wr, recv_wr, send_sge, rdma_mr_max, rdma_mr_size, cache_allocs to -I lines; not without -v', async () => {
    const ep = await ControlEndpoint.open(() => info, join(dir, 'node.sock'));
    try {
      const v = await runNode([cli, '--socket', ep.path, '-I', '-v'], 20_000);
      expect(v.code, v.out).toBe(0);
      const line = v.out.split('\n').find((l) => l.includes('10.9.0.2'));
      expect(line, v.out).toMatch(
        /10\.9\.0\.1 +10\.9\.0\.2 .* {2}send_wr=129, recv_wr=256, send_sge=0, rdma_mr_max=0, rdma_mr_size=0, cache_allocs=0$/,
      );
      const plain = await runNode([cli, '--socket', ep.path, '-I'], 20_000);
      expect(plain.out).toMatch(/10\.9\.0\.2/);
      expect(plain.out).not.toMatch(/send_wr=/);
    } finally {
      await ep.close();
    }
  });
});
