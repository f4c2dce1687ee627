import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RdsSocket, RdsStack } from '../../lib/index.js';
import { KERNEL, KERNEL_GEN, SMALL, bound, guest, peer, reloadRds } from './kernel-lib.js';

// A kernel on the larger address sending, blocking, from ports that are not multiples of 8:
// such a sender may wait for the multipath handshake before its message (spec §3.4).
let stack: RdsStack | null = null;
afterAll(async () => {
  await stack?.close();
  await reloadRds(); // leave the kernel without our connections, as the other files expect
});

async function kernelSends(port: number, ports: number[], n: number): Promise<void> {
  const r = await bound(stack!, SMALL, port);
  const tx = peer(`send ${KERNEL} ${ports.join(',')} ${SMALL} ${port} ${n} 5000 4`, 40);
  // Every message of every port (order per socket pair: with 7.x each socket may use its own path).
  const count = new Map<number, number>();
  for (let i = 0; i < ports.length * n; i++) {
    let m: Awaited<ReturnType<RdsSocket['recv']>>;
    try {
      m = await r.recv({ signal: AbortSignal.timeout(30_000) });
    } catch (e) {
      // Say what had arrived, what the guest's senders reported and where our paths stood.
      const t = await tx;
      const paths = stack!
        .connections()
        .filter((c) => c.peerAddress === KERNEL)
        .map((c) => ({
          npaths: c.npaths,
          paths: c.paths.map((p) => ({
            state: p.state,
            ups: p.upCount,
            sent: p.sentMessages,
            recv: p.recvMessages,
            nextRxSeq: p.nextRxSeq,
          })),
        }));
      const ctr = Object.fromEntries(
        (
          [
            'recv_drop_old_seq',
            'recv_drop_no_sock',
            'recv_delivered',
            'handshake_received',
            'conn_poke_received',
            'tcp_connect_raced',
            'peer_restarted',
          ] as const
        ).map((c) => [c, stack!.counters.get(c)]),
      );
      const kc = await peer('counters');
      // The kernel's path-0 sequence numbers: whether it took our new generation (both reset).
      const kconns = await peer('conns');
      throw new Error(
        `${(e as Error).message}; received per port ${JSON.stringify([...count])}; guest: ${t.out.trim()}; ours: ${JSON.stringify(paths)}; our counters: ${JSON.stringify(ctr)}; kernel connections: ${JSON.stringify(kconns.lines)}; kernel counters: ${JSON.stringify(kc.lines[0] ?? kc.out)}`,
      );
    }
    expect(m.address).toBe(KERNEL);
    expect(ports).toContain(m.port);
    count.set(m.port, (count.get(m.port) ?? 0) + 1);
  }
  for (const p of ports) expect(count.get(p)).toBe(n);
  const t = await tx;
  expect(t.code, t.out).toBe(0);
  expect(t.out, 'the guest sender closed its sockets with messages still unacknowledged').toContain('"drained": true');
  await r.close();
}

describe(`blocking kernel senders on the larger address (Linux ${KERNEL_GEN})`, () => {
  beforeAll(async () => {
    await reloadRds(); // a kernel connection without a settled path count
    stack = new RdsStack();
  });

  // These scenarios once lost the first ports' messages (6.x and 7.2, 1-3 runs in 8): the guest's
  // sender closed each port's socket as it moved to the next, and closing an RDS socket discards
  // what the kernel has not yet had acknowledged. The sender now keeps its sockets until the
  // kernel holds none of their messages, and says whether it got there ("drained").
  it('on a new kernel connection, messages from ports not a multiple of 8 arrive', async () => {
    await kernelSends(4000, [6001, 6002, 6003, 6005], 3);
  });

  it("after the kernel's connection was killed, they arrive", async () => {
    const k = await guest('modprobe tcp_diag; ss -K -t dst 10.77.0.1 >/dev/null; echo killed');
    expect(k.out).toContain('killed');
    await kernelSends(4001, [6011, 6012, 6013], 3);
  });

  it('after rds-socket restarted (a new generation), they arrive', async () => {
    await stack!.close();
    stack = new RdsStack();
    await kernelSends(4002, [6021, 6022, 6023], 3);
  });

  it('after rds-socket restarted and the connection was killed, they arrive', async () => {
    await stack!.close();
    stack = new RdsStack();
    await kernelSends(4003, [6031], 1);
    const k = await guest('modprobe tcp_diag; ss -K -t dst 10.77.0.1 >/dev/null; echo killed');
    expect(k.out).toContain('killed');
    await kernelSends(4004, [6041, 6042, 6043], 3);
  });
});
