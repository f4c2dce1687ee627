import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runNode } from './helpers.js';

// The short, deterministic fuzz pass (npm run fuzz:short); npm run fuzz runs ten minutes.
describe('fuzz (short)', () => {
  it("the coverage-guided fuzzer finds nothing in the frame decoder, the host node's attach protocol and the extension parser", async () => {
    const r = await runNode(
      [fileURLToPath(new URL('../fuzz/run.mjs', import.meta.url)), '--seconds', '16', '--seed', '1'],
      60_000,
    );
    expect(r.out).toMatch(/fuzz: nothing found/);
    expect(r.out).toMatch(/frames: \d+ inputs .* \(\+\d+\), \d+ blocks covered, 0 failures/);
    expect(r.out).toMatch(/hostControl: \d+ inputs .* \(\+\d+\), \d+ blocks covered, 0 failures/);
    expect(r.code).toBe(0);
  }, 60_000);
});
