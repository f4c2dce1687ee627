import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { INST, KERNEL, KERNEL_GEN, peer, readyFile } from './kernel-lib.js';

// examples/kernel-peer.mjs run as a user would (`node examples/kernel-peer.mjs <local> <kernel>
// <port>`, importing the built package by its name) against the guest's kernel, and what it prints
// checked line by line. The kernel side is rdspeer.py's `echo`, a Python AF_RDS program doing what
// the example's C echo server does (the guest has no C compiler). The example is its own node at
// 10.77.0.4 (as rds-ping in kernel.test.ts), so no other file's stack owns its RDS/TCP port.
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LOCAL = '10.77.0.4';
const PORT = 4730;

function runExample(args: string[], ms: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    // RDS_SOCKET_NODE=none: the example runs its own stack, as it would on a machine without a host node.
    const p = spawn(process.execPath, ['examples/kernel-peer.mjs', ...args], {
      cwd: ROOT,
      env: { ...process.env, RDS_SOCKET_NODE: 'none' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout!.on('data', (d) => (out += d));
    p.stderr!.on('data', (d) => (out += d));
    const t = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`examples/kernel-peer.mjs did not finish in ${ms} ms:\n${out}`));
    }, ms);
    p.on('exit', (code) => {
      clearTimeout(t);
      resolve({ code, out });
    });
  });
}

describe(`examples/kernel-peer.mjs against a kernel AF_RDS echo program (Linux ${KERNEL_GEN})`, () => {
  it('prints the kernel\'s three answers, "ping 1" to "ping 3" from the kernel\'s address and port, and exits 0', async () => {
    rmSync(`${INST}/ready.${PORT}`, { force: true });
    const echo = peer(`echo ${KERNEL} ${PORT} 3`, 90);
    await readyFile(PORT);
    const ex = await runExample([LOCAL, KERNEL, String(PORT)], 60_000);
    const k = await echo;
    console.log(ex.out.trimEnd());
    expect(ex.code, ex.out).toBe(0);
    expect(ex.out.trimEnd().split('\n')).toEqual([1, 2, 3].map((i) => `kernel ${KERNEL}:${PORT} answered "ping ${i}"`));
    // The kernel program saw the example's three pings, in order, from its address and port.
    expect(k.code, k.out).toBe(0);
    expect(k.lines.slice(0, 3)).toEqual([1, 2, 3].map((i) => ({ from: LOCAL, port: PORT, data: `ping ${i}` })));
    expect(k.lines[3]).toEqual({ echoed: 3, drained: true });
  });
});
