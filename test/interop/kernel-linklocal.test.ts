import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RdsStack } from '../../lib/index.js';
import { KERNEL_GEN, bound, guest, pattern, peer, reloadRds, sha } from './kernel-lib.js';

// IPv6 link-local addresses with a zone against the kernel's RDS/TCP (issue 38): the kernel
// binds and sends on fe80:: addresses only with a scope id (sin6_scope_id), and its connection
// is made on that link. The test gives both ends of the guest's link an address of its own,
// without duplicate address detection (usable at once): fe80::77:1 on our tap ($RDS_TAP, in the
// test's network namespace) and fe80::77:2 on the guest's eth0. test/linklocal-netns.test.ts is
// the same between two rds-socket nodes.
const TAP = process.env.RDS_TAP ?? 'rdstap0';
const OURS = 'fe80::77:1';
const KERNEL_LL = 'fe80::77:2';
const N = 10;

const stacks: RdsStack[] = [];
beforeAll(async () => {
  execFileSync('ip', ['addr', 'replace', `${OURS}/64`, 'dev', TAP, 'nodad']);
  const g = await guest(`ip addr replace ${KERNEL_LL}/64 dev eth0 nodad && echo added`);
  expect(g.out).toContain('added');
});
afterAll(async () => {
  for (const s of stacks) await s.close();
  execFileSync('ip', ['addr', 'del', `${OURS}/64`, 'dev', TAP]);
  await guest(`ip addr del ${KERNEL_LL}/64 dev eth0`);
  await reloadRds(); // leave the kernel without our connections, as the other files expect
});

describe(`IPv6 link-local with a zone, rds-socket at ${OURS}%${TAP} and Linux ${KERNEL_GEN} at ${KERNEL_LL}%eth0`, () => {
  const stack = new RdsStack();
  stacks.push(stack);

  it("a kernel socket on its link-local address sends to ours: every message arrives, from the kernel's address in our zone", async () => {
    const s = await bound(stack, `${OURS}%${TAP}`, 5800);
    expect(s.address()).toEqual({ address: `${OURS}%${TAP}`, port: 5800 });
    const tx = peer(`send ${KERNEL_LL}%eth0 6800 ${OURS}%eth0 5800 ${N} 70000 3`);
    const got: string[] = [];
    for (let i = 0; i < N; i++) {
      const m = await s.recv({ signal: AbortSignal.timeout(60_000) });
      expect(m.address).toBe(`${KERNEL_LL}%${TAP}`);
      expect(m.port).toBe(6800);
      got.push(sha(m.data));
    }
    const t = await tx;
    expect(t.code, t.out).toBe(0);
    expect(got).toEqual(t.lines.filter((l) => 'sha256' in l).map((l) => l.sha256));
  });

  it('ours sends to a kernel socket at its link-local address without a zone (the socket lends its own); the kernel gets each', async () => {
    const s = await bound(stack, `${OURS}%${TAP}`, 5801);
    const rx = peer(`recv ${KERNEL_LL}%eth0 6801 ${N} ${OURS}%eth0 5801`);
    const ready = await s.recv({ signal: AbortSignal.timeout(60_000) });
    expect([ready.address, ready.data.toString()]).toEqual([`${KERNEL_LL}%${TAP}`, 'ready']);
    const sent: string[] = [];
    for (let i = 0; i < N; i++) {
      const d = pattern(i, 50 + i * 7001, 11);
      sent.push(sha(d));
      await s.send(d, { address: KERNEL_LL, port: 6801 }, { signal: AbortSignal.timeout(60_000) });
    }
    const r = await rx;
    expect(r.code, r.out).toBe(0);
    for (const l of r.lines) expect(l).toMatchObject({ from: OURS, port: 5801 });
    expect(r.lines.map((l) => l.sha256)).toEqual(sent);
    // One connection on the link, as the kernel makes one (no second one for the zoneless address).
    const conns = stack.connections().filter((c) => c.peerAddress.startsWith(KERNEL_LL));
    expect(conns, JSON.stringify(stack.connections().map((c) => [c.localAddress, c.peerAddress]))).toHaveLength(1);
    expect(conns[0]!.transport).toBe('tcp');
  });
});
