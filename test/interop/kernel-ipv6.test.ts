import { afterAll, describe, expect, it } from 'vitest';
import { RdsStack } from '../../lib/index.js';
import {
  KERNEL6,
  KERNEL_GEN,
  LARGE6,
  SMALL6,
  bound,
  guest,
  pattern,
  peer,
  readyFile,
  reloadRds,
  sha,
} from './kernel-lib.js';

// The main scenarios over IPv6 (kernel RDS/TCP since 4.19: same header and map, 128-bit address
// comparison for who connects). The guest is fd77::2; rds-socket is fd77::1 (smaller) and
// fd77::3 (larger), one node per address.
const SIZES = [0, 1, 48, 4097, 65535, 300_000, 1 << 20, 7];
const stacks: RdsStack[] = [];
afterAll(async () => {
  for (const s of stacks) await s.close();
  await reloadRds(); // leave the kernel without our connections, as the other files expect
});
function node(): RdsStack {
  const s = new RdsStack();
  stacks.push(s);
  return s;
}
const smallNode = node();
const largeNode = node();

for (const [role, stack, me] of [
  ['smaller', smallNode, SMALL6],
  ['larger', largeNode, LARGE6],
] as const) {
  describe(`IPv6, rds-socket as the ${role} address (${me}) with Linux ${KERNEL_GEN} at ${KERNEL6}`, () => {
    const base = role === 'smaller' ? 0 : 100;

    it('sends messages of 0 B..1 MiB; the kernel receives each in order, intact', async () => {
      const s = await bound(stack, me, 5500 + base);
      const port = 4500 + base;
      const rx = peer(`recv ${KERNEL6} ${port} ${SIZES.length} file`);
      await readyFile(port);
      const want: string[] = [];
      for (let i = 0; i < SIZES.length; i++) {
        const d = pattern(i, SIZES[i]!, 5);
        want.push(sha(d));
        await s.send(d, { address: KERNEL6, port }, { signal: AbortSignal.timeout(60_000) });
      }
      const r = await rx;
      expect(r.code, r.out).toBe(0);
      for (const l of r.lines) expect(l).toMatchObject({ from: me, port: 5500 + base });
      expect(r.lines.map((l) => l.sha256)).toEqual(want);
      expect(stack.connections().find((c) => c.peerAddress === KERNEL6)!.initiator).toBe(role === 'smaller');
    });

    it('receives messages of 0 B..1 MiB from kernel sockets (ports not multiples of 8 too), in order, intact', async () => {
      const r4 = await bound(stack, me, 4600 + base);
      const ports = [6600 + base, 6601 + base, 6603 + base];
      const tx = peer(`send ${KERNEL6} ${ports.join(',')} ${me} ${4600 + base} 12 ${1 << 20} 7`);
      // Order holds per socket pair: with 7.x each kernel socket may use its own path, so the
      // next socket's messages can overtake the previous one's last.
      const got = new Map<number, string[]>();
      for (let i = 0; i < ports.length * 12; i++) {
        const m = await r4.recv({ signal: AbortSignal.timeout(60_000) });
        expect(m.address).toBe(KERNEL6);
        expect(ports).toContain(m.port);
        got.set(m.port, [...(got.get(m.port) ?? []), sha(m.data)]);
      }
      const r = await tx;
      expect(r.code, r.out).toBe(0);
      for (const p of ports)
        expect(got.get(p)).toEqual(r.lines.filter((l) => 'sha256' in l && l.port === p).map((l) => l.sha256));
    });

    it('pings both ways', async () => {
      const s = await bound(stack, me, 5502 + base);
      s.sendmsg(Buffer.alloc(0), { address: KERNEL6, port: 0 });
      const pong = await s.recv({ signal: AbortSignal.timeout(20_000) });
      expect(pong).toMatchObject({ address: KERNEL6, port: 0 });
      const r = await peer(`ping ${KERNEL6} ${me}`);
      expect(r.code, r.out).toBe(0);
      expect(r.lines[0]).toMatchObject({ from: me, port: 0, len: 0 });
    });

    it('connections killed in the guest while we send: the kernel receives every message once, in order', async () => {
      const s = await bound(stack, me, 5503 + base);
      const port = 4503 + base;
      const N = 150;
      const rx = peer(`recv ${KERNEL6} ${port} ${N} file`);
      await readyFile(port);
      const kills = guest(
        `modprobe tcp_diag; for i in 1 2 3; do sleep 0.4; ss -K -t dst ${me} >/dev/null; done; echo '{"killed":3}'`,
      );
      const want: string[] = [];
      for (let i = 0; i < N; i++) {
        const d = pattern(i, 1 + ((i * 7919) % 40000), 13);
        want.push(sha(d));
        await s.send(d, { address: KERNEL6, port }, { timeout: 60_000 });
      }
      expect((await kills).code).toBe(0);
      const r = await rx;
      expect(r.code, r.out).toBe(0);
      expect(r.lines.map((l) => l.sha256)).toEqual(want);
    });
  });
}
