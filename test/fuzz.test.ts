import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { C_HELLO, FrameParser, PROTOCOL_VERSION } from '../lib/host/protocol.js';
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

  it('seeds the attach-protocol target with inputs of the current protocol version (else no input gets past the hello)', () => {
    const dir = fileURLToPath(new URL('../fuzz/corpus/hostControl/', import.meta.url));
    const seeds = readdirSync(dir);
    expect(seeds.length).toBeGreaterThan(0);
    for (const f of seeds) {
      const [hello] = new FrameParser().push(readFileSync(`${dir}${f}`));
      expect(hello).toMatchObject({ type: C_HELLO, meta: { v: PROTOCOL_VERSION } });
    }
  });
});
