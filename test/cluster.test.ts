import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// Separate node processes over real TCP on 127.0.x.y, using the compiled demo (npm test builds first).
const DEMO = fileURLToPath(new URL('../dist/demo/cluster.js', import.meta.url));

function run(args: string[], ms: number): Promise<{ code: number; out: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [DEMO, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    const t = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`demo did not finish in ${ms} ms:\n${out}`));
    }, ms);
    p.on('exit', (code) => {
      clearTimeout(t);
      resolve({ code: code ?? 1, out });
    });
  });
}

describe('separate node processes over TCP', () => {
  it('two processes exchange 2,000 messages each way, in order', async () => {
    const r = await run(['--quiet', '--messages', '2000', '--max-size', '70000', '--nodes', '127.24.0.1,127.24.0.2', '--tcp-port', '26391'], 120_000);
    expect(r.out).toContain('cluster demo: every node received every message exactly once, in order');
    expect(r.code).toBe(0);
  });

  it('three processes each send 10,000 messages of 0 B..1 MiB to both others: all arrive once, intact, in order', async () => {
    const r = await run(['--quiet', '--messages', '10000', '--max-size', String(1 << 20), '--nodes', '127.24.1.1,127.24.1.2,127.24.1.3', '--tcp-port', '26391'], 300_000);
    expect(r.out.match(/received 10000\/10000 messages/g)).toHaveLength(6);
    expect(r.code).toBe(0);
  }, 320_000);
});
