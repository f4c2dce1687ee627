import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runNode } from './helpers.js';

// Separate node processes over real TCP on 127.0.x.y, using the compiled demo (npm test builds first).
const DEMO = fileURLToPath(new URL('../dist/demo/cluster.js', import.meta.url));

const run = (args: string[], ms: number) => runNode([DEMO, ...args], ms);

describe('separate node processes over TCP', () => {
  it('two processes exchange 2,000 messages each way, in order', async () => {
    const r = await run(
      [
        '--quiet',
        '--messages',
        '2000',
        '--max-size',
        '70000',
        '--nodes',
        '127.24.0.1,127.24.0.2',
        '--tcp-port',
        '26391',
      ],
      120_000,
    );
    expect(r.out).toContain('cluster demo: every node received every message exactly once, in order');
    expect(r.code).toBe(0);
  });

  it('three processes each send 10,000 messages of 0 B..1 MiB to both others: all arrive once, intact, in order', async () => {
    const r = await run(
      [
        '--quiet',
        '--messages',
        '10000',
        '--max-size',
        String(1 << 20),
        '--nodes',
        '127.24.1.1,127.24.1.2,127.24.1.3',
        '--tcp-port',
        '26391',
      ],
      300_000,
    );
    expect(r.out.match(/received 10000\/10000 messages/g)).toHaveLength(6);
    expect(r.code).toBe(0);
  }, 320_000);
});
