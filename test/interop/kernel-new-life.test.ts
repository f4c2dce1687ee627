import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { RdsStack } from '../../lib/index.js';
import {
  INST,
  KERNEL,
  KERNEL_GEN,
  SMALL,
  bound,
  cut,
  guest,
  heal,
  kernelCounters,
  peer,
  readyFile,
  reloadRds,
} from './kernel-lib.js';

// Issue 35 (the nemesis, seed 5): a restarted rds-socket node's first messages to a kernel were
// lost. The kernel never heard the old life go (a partition dropped its FIN), so its path to our
// address was still UP, holding the old life's next_rx_seq. See docs/kernel-new-life.md.
// Before the fix (each path numbered from 1) the 6.1 kernel read 43 of 46: the new life's first
// 3, resent RETRANSMITTED after the kernel reset their carrier unread, were below its next_rx_seq
// and dropped as old. Paths now number from the clock (RdsStackOptions.initialSequence).
/** Our TCP ports of the established RDS/TCP connections from SMALL to the kernel. */
function carrierPorts(): number[] {
  const out = execFileSync('ss', ['-Htn', 'state', 'established', 'src', SMALL, 'dst', `${KERNEL}:16385`], {
    encoding: 'utf8',
  });
  return out
    .split('\n')
    .map((l) => /\s\S+:(\d+)\s+\S+:16385\b/.exec(l)?.[1])
    .filter((p): p is string => p !== undefined)
    .map(Number);
}
// Kernels up to 6.19 reset a new carrier while the old connection looks alive, which is the
// case this plays; 7.x takes the new carrier (no resend at all), and is checked too. The old
// life's carriers, kept out of sight, stay in FIN-WAIT-1 here for a minute after this file: that
// once made kernel-restart.test.ts's next node dial from a port whose 4-tuple one of them held
// (EADDRNOTAVAIL), and give up (test/connect-port-taken.test.ts; fixed).
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
    rmSync(`${INST}/ready.${PORT}`, { force: true });
    const reader = peer(`recv ${KERNEL} ${PORT} ${total} file`, 60);
    await readyFile(PORT);

    const a = new RdsStack();
    stacks.push(a);
    const sa = await bound(a, SMALL, 5351);
    for (let i = 0; i < OLD; i++) sa.sendmsg(msg(i), { address: KERNEL, port: PORT });
    await sa.flush({ signal: AbortSignal.timeout(30_000) });

    // The old life ends unseen: its FIN (or RST) is dropped, the kernel's path stays UP.
    const oldPorts = carrierPorts();
    expect(oldPorts.length).toBeGreaterThan(0);
    cut(SMALL);
    await a.close();
    stacks.splice(stacks.indexOf(a), 1);

    const b = new RdsStack();
    stacks.push(b);
    expect(b.genNum).not.toBe(a.genNum);
    const sb = await bound(b, SMALL, 5351);
    for (let i = OLD; i < OLD + 3; i++) sb.sendmsg(msg(i), { address: KERNEL, port: PORT });
    // Its connects fail while cut (the 3 s connect bound ends one).
    await new Promise((r) => setTimeout(r, 4000));
    cut(SMALL, oldPorts); // the partition heals; the old connection stays out of sight
    // The kernel takes nothing of the new life while its old connection to us lives: up to 6.19
    // it resets each new carrier (we resend, RETRANSMITTED), 7.x holds the new one unread. 5 s
    // of that, then the kernel's old connections end in the guest (ss -K), as TCP would end them
    // on its own, only later: keepalive about 30 s after the old life's last segment, or, when
    // the kernel had sent something the cut swallowed (seen on 7.x: 96 bytes retransmitted with
    // backoff), only when its retries run out, minutes later. The kernel keeps its next_rx_seq
    // for our address across that (only a new GEN_NUM resets it).
    await new Promise((r) => setTimeout(r, 5000));
    const kill = oldPorts.map((p) => `dport = :${p}`).join(' or ');
    const killed = await guest(`modprobe tcp_diag; ss -K -tn dst ${SMALL} '( ${kill} )' >/dev/null; echo killed`);
    expect(killed.out).toContain('killed');
    await sb.flush({ signal: AbortSignal.timeout(30_000) });
    for (let i = OLD + 3; i < total; i++) sb.sendmsg(msg(i), { address: KERNEL, port: PORT });
    await sb.flush({ signal: AbortSignal.timeout(30_000) });

    const got = await reader;
    const after = await kernelCounters();
    if (got.lines.length === 0) console.log(`reader: ${got.code} ${got.out.slice(0, 2000)}`);
    const lens = got.lines.map((l) => l.len as number);
    const missing = Array.from({ length: total }, (_, i) => i).filter((i) => !lens.includes(100 + i));
    console.log(
      `Linux ${KERNEL_GEN}: kernel read ${lens.length} of ${total}, missing ${JSON.stringify(missing)}; ` +
        `recv_drop_old_seq +${(after.recv_drop_old_seq ?? 0) - (before.recv_drop_old_seq ?? 0)}, ` +
        `conn_reset +${(after.conn_reset ?? 0) - (before.conn_reset ?? 0)}; new life: ` +
        `send_retransmitted ${b.counters.get('send_retransmitted')}`,
    );
    expect(missing).toEqual([]);
    expect(lens).toEqual(Array.from({ length: total }, (_, i) => 100 + i));
  }, 150_000);
});
