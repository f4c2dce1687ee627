import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { netUnavailable } from '../nemesis/net.mjs';

// The nemesis against a build whose retransmit queue is broken on purpose
// (RDS_SOCKET_TEST_BREAK_RETRANSMIT=1, lib/core/send-queue.ts: a reset path completes what it
// held as if acknowledged instead of resending it): a short run with connection resets,
// partitions and link flaps must fail, with messages lost silently or confirmed unread. Root
// only (network namespaces, nftables); namespaces prefixed "nmt" so it never meets a real run.
const RUN = fileURLToPath(new URL('../nemesis/run.mjs', import.meta.url));
const why = netUnavailable();
if (why) console.log(`nemesis run skipped: ${why}`);

describe.skipIf(why !== null)('nemesis against a broken retransmit queue', () => {
  it('fails, reporting silent losses or confirmations of unread messages', () => {
    const out = mkdtempSync(join(tmpdir(), 'rds-nemesis-break-'));
    try {
      const r = spawnSync(
        process.execPath,
        [
          RUN,
          '--nodes',
          '4',
          '--seconds',
          '25',
          '--seed',
          '3',
          '--prefix',
          'nmt',
          '--out',
          out,
          '--no-tls',
          '--kinds',
          'reset,partition-sym,link-flap,isolate,halves',
          '--break-retransmit',
        ],
        { encoding: 'utf8', timeout: 280_000 },
      );
      expect(r.status, r.stderr).toBe(1);
      const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8'));
      const { counts } = report.check;
      expect(counts.vanished + counts['confirm-unread']).toBeGreaterThanOrEqual(5);
      expect(r.stdout).toMatch(/vanished +\d+ +\(seed 3\)/);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 300_000);
});
