import { execFileSync } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { RdsStack } from '../../lib/index.js';
import { KERNEL, KERNEL_GEN, SMALL, bound, kernelCounters, peer, readyFile, reloadRds } from './kernel-lib.js';

// Issue 35 (the nemesis, seed 5): a restarted rds-socket node's first messages to a kernel were
// lost. The kernel never heard the old life go (a partition dropped its FIN), so its path to our
// address was still UP, holding the old life's next_rx_seq. See docs/kernel-new-life.md.
const TABLE = 'rdslossblk';
const nft = (script: string): void => {
  execFileSync('nft', ['-f', '-'], { input: script });
};
/** Drops everything between our SMALL address and the kernel, both ways (a partition). */
function cut(): void {
  nft(
    `table ip ${TABLE} {\n chain o { type filter hook output priority 0; ip saddr ${SMALL} ip daddr ${KERNEL} drop; }\n` +
      ` chain i { type filter hook input priority 0; ip saddr ${KERNEL} ip daddr ${SMALL} drop; }\n}\n`,
  );
}
function heal(): void {
  try {
    nft(`delete table ip ${TABLE}\n`);
  } catch {
    // not there
  }
}

const stacks: RdsStack[] = [];
afterAll(async () => {
  heal();
  for (const s of stacks.splice(0)) await s.close();
  await reloadRds(); // leave the kernel without our connections, as the other files expect
});

const msg = (i: number): Buffer => Buffer.alloc(100 + i, i & 0xff);

describe(`a restarted node's first messages reach a kernel that missed the restart (Linux ${KERNEL_GEN})`, () => {
  it('the old life sent 40, the partition hid its end; the new life sends 3 during the partition and 3 after: the kernel reads all 46', async () => {
    const PORT = 7351;
    const OLD = 40;
    const total = OLD + 6;
    const before = await kernelCounters();
    const reader = peer(`recv ${KERNEL} ${PORT} ${total} file`, 90);
    await readyFile(PORT);

    const a = new RdsStack();
    stacks.push(a);
    const sa = await bound(a, SMALL, 5351);
    for (let i = 0; i < OLD; i++) sa.sendmsg(msg(i), { address: KERNEL, port: PORT });
    await sa.flush({ signal: AbortSignal.timeout(30_000) });

    // The old life ends unseen: its FIN (or RST) is dropped, the kernel's path stays UP.
    cut();
    await a.close();
    stacks.splice(stacks.indexOf(a), 1);

    const b = new RdsStack();
    stacks.push(b);
    expect(b.genNum).not.toBe(a.genNum);
    const sb = await bound(b, SMALL, 5351);
    for (let i = OLD; i < OLD + 3; i++) sb.sendmsg(msg(i), { address: KERNEL, port: PORT });
    // Its connects fail while cut (the 3 s connect bound ends one).
    await new Promise((r) => setTimeout(r, 4000));
    heal();
    await sb.flush({ signal: AbortSignal.timeout(30_000) });
    for (let i = OLD + 3; i < total; i++) sb.sendmsg(msg(i), { address: KERNEL, port: PORT });
    await sb.flush({ signal: AbortSignal.timeout(30_000) });

    const got = await reader;
    const after = await kernelCounters();
    const lens = got.lines.map((l) => l.len as number);
    const missing = Array.from({ length: total }, (_, i) => i).filter((i) => !lens.includes(100 + i));
    console.log(
      `Linux ${KERNEL_GEN}: kernel read ${lens.length} of ${total}, missing ${JSON.stringify(missing)}; ` +
        `recv_drop_old_seq +${(after.recv_drop_old_seq ?? 0) - (before.recv_drop_old_seq ?? 0)}, ` +
        `conn_reset +${(after.conn_reset ?? 0) - (before.conn_reset ?? 0)}`,
    );
    expect(missing).toEqual([]);
    expect(lens).toEqual(Array.from({ length: total }, (_, i) => 100 + i));
  }, 150_000);
});
