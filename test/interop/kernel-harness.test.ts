import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { RdsStack } from '../../lib/index.js';
import { INST, KERNEL, KERNEL_GEN, SMALL, bound, guest, peer, readyFile, reloadRds } from './kernel-lib.js';

// The interop files share one guest session, and each leaves the kernel as the next expects
// through reloadRds(). A test that fails leaves its guest program running (rdspeer.py lives up to
// its timeout) and that program's RDS socket holds the rds module: reloadRds() then unloaded
// rds_tcp, failed on rds, and every later file found a kernel without RDS/TCP (a CI run on 7.x:
// one failed test, thirteen failures). This file does what a failed test leaves behind.
const PORT = 4732;
let stack: RdsStack | null = null;
afterAll(async () => {
  await stack?.close();
});

describe(`the interop harness after a failed test (Linux ${KERNEL_GEN})`, () => {
  it('reloadRds() with a guest program still bound: the program is gone, rds_tcp is loaded and the kernel answers a ping', async () => {
    rmSync(`${INST}/ready.${PORT}`, { force: true });
    const left = peer(`echo ${KERNEL} ${PORT} 3`, 90); // waits for 3 messages that never come
    await readyFile(PORT);
    await reloadRds();
    const k = await left;
    expect(k.code, 'the left guest program was killed').not.toBe(0);
    const mods = await guest('lsmod');
    expect(mods.out).toMatch(/^rds_tcp /m);
    stack = new RdsStack();
    const s = await bound(stack, SMALL, 5732);
    s.sendmsg(Buffer.alloc(0), { address: KERNEL, port: 0 });
    const pong = await s.recv({ signal: AbortSignal.timeout(30_000) });
    expect(pong).toMatchObject({ address: KERNEL, port: 0 });
    await stack.close();
    stack = null;
    await reloadRds(); // leave the kernel without our connections, as the other files expect
  });
});
