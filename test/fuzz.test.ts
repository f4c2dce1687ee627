import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The short, deterministic fuzz pass (npm run fuzz:short); npm run fuzz runs ten minutes.
describe('fuzz (short)', () => {
  it('the coverage-guided fuzzer finds nothing in the frame decoder and extension parser', async () => {
    const r = await new Promise<{ code: number; out: string }>((resolve) => {
      const p = spawn(process.execPath, [fileURLToPath(new URL('../fuzz/run.mjs', import.meta.url)), '--seconds', '16', '--seed', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      p.stdout.on('data', (d) => (out += d));
      p.stderr.on('data', (d) => (out += d));
      p.on('exit', (code) => resolve({ code: code ?? 1, out }));
    });
    expect(r.out).toMatch(/fuzz: nothing found/);
    expect(r.out).toMatch(/frames: \d+ inputs .* \(\+\d+\), \d+ blocks covered, 0 failures/);
    expect(r.code).toBe(0);
  }, 60_000);
});
