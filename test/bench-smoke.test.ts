import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runNode } from './helpers.js';

// The benchmark's own code, checked for correctness only (no timing asserts: machines are noisy).
describe('bench (smoke)', () => {
  it('runs every scenario for every contender and writes the ratio table and JSON', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'rds-bench-')), 'results.json');
    const r = await runNode(['--expose-gc', fileURLToPath(new URL('../bench/run.mjs', import.meta.url)), '--smoke', '--out', out], 230_000);
    expect(r.code, r.out).toBe(0);
    expect(r.out).toMatch(/rds\/net\s+rds\/zmq/);
    const json = JSON.parse(readFileSync(out, 'utf8')) as {
      results: Record<string, Record<string, unknown[]>>; ratios: { metric: string }[]; mesh: { nodes: number };
      sustained: { msgsPerSec: number; sender: { samples: number }; receiver: { samples: number } };
    };
    for (const [name, scenario] of Object.entries(json.results)) {
      // 64 KiB messages are also sent with MSG_ZEROCOPY (to a sink that connects, and one that accepts).
      const extra = name.startsWith('throughput 65536 B') ? ['rds-zc'] : [];
      expect(Object.keys(scenario).sort()).toEqual(['net', 'rds', ...extra, 'zmq']);
      for (const runs of Object.values(scenario)) expect(runs).toHaveLength(1);
    }
    expect(json.ratios.map((x) => x.metric)).toContain('throughput 65536 B msgsPerSec MSG_ZEROCOPY');
    expect(json.ratios.map((x) => x.metric)).toContain('throughput 65536 B, sink accepts msgsPerSec MSG_ZEROCOPY');
    expect(Object.keys(json.results)).toHaveLength(6);
    expect(json.ratios.length).toBeGreaterThanOrEqual(10);
    expect(json.mesh.nodes).toBeGreaterThan(1);
    expect(r.out).toMatch(/sustained .* heap after GC: sender .* receiver/);
    expect(json.sustained.msgsPerSec).toBeGreaterThan(0);
    expect(json.sustained.sender.samples).toBeGreaterThan(2);
    expect(json.sustained.receiver.samples).toBeGreaterThan(2);
  }, 240_000);
});
