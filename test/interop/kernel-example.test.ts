import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { runExample } from '../run-example.js';
import { INST, KERNEL, KERNEL_GEN, peer, readyFile, reloadRds } from './kernel-lib.js';

// examples/kernel-peer.mjs run as a user would (`node examples/kernel-peer.mjs <local> <kernel>
// <port>`, importing the built package by its name) against the guest's kernel, and what it prints
// checked line by line. The kernel side is rdspeer.py's `echo`, a Python AF_RDS program doing what
// the example's C echo server does (the guest has no C compiler). The example is its own node at
// 10.77.0.4 (as rds-ping in kernel.test.ts), so no other file's stack owns its RDS/TCP port.
const LOCAL = '10.77.0.4';
const PORT = 4730;
afterAll(async () => {
  await reloadRds(); // leave the kernel without our connections, as the other files expect
});

describe(`examples/kernel-peer.mjs against a kernel AF_RDS echo program (Linux ${KERNEL_GEN})`, () => {
  it('prints the kernel\'s three answers, "ping 1" to "ping 3" from the kernel\'s address and port, and exits 0', async () => {
    rmSync(`${INST}/ready.${PORT}`, { force: true });
    const echo = peer(`echo ${KERNEL} ${PORT} 3`, 90);
    await readyFile(PORT);
    const ex = await runExample('kernel-peer.mjs', [LOCAL, KERNEL, String(PORT)], 60_000);
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
