import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runNode } from './helpers.js';

// The benchmark's own code, checked for correctness only (no timing asserts: machines are noisy).
describe('bench (smoke)', () => {
  it('runs every scenario for every contender and writes the ratio table and JSON', async () => {
    const r = await runNode(['--expose-gc', fileURLToPath(new URL('../bench/run.mjs', import.meta.url)), '--smoke'], 230_000);
    expect(r.code, r.out).toBe(0);
    expect(r.out).toMatch(/rds\/net\s+rds\/zmq/);
    const json = JSON.parse(readFileSync(fileURLToPath(new URL('../bench/results/latest.json', import.meta.url)), 'utf8')) as {
      results: Record<string, Record<string, unknown[]>>; ratios: { metric: string }[]; mesh: { nodes: number };
    };
    for (const scenario of Object.values(json.results)) {
      expect(Object.keys(scenario).sort()).toEqual(['net', 'rds', 'zmq']);
    }
    expect(Object.keys(json.results)).toHaveLength(5);
    expect(json.ratios.length).toBeGreaterThanOrEqual(10);
    expect(json.mesh.nodes).toBeGreaterThan(1);
  }, 240_000);
});
