import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { RdsStack, type RdsSocket } from '../../lib/index.js';
import { KERNEL, KERNEL_GEN, LARGE, SMALL, bound, guest, peer, pattern, reloadRds, sha } from './kernel-lib.js';

// How long a path stays unusable after the guest kills its TCP connection (ss -K). A 7.x kernel
// half-closes on shutdown and waits up to about 5 s for the peer's FIN and an empty receive
// queue before it reconnects or takes a new connection; rds-socket must never make it wait.
// One node at a time owns the RDS/TCP port of an address: each test closes its stack.
let stack: RdsStack | null = null;
afterAll(async () => {
  await stack?.close();
  await reloadRds(); // leave the kernel without our connections, as the other files expect
});
async function freshStack(): Promise<RdsStack> {
  await stack?.close();
  stack = new RdsStack();
  return stack;
}

/**
 * What docs/kernel-interop.md says (the reconnect row): no reconnect waits for a 7.x kernel's
 * shutdown timer (about 5 s): none comes near it (4 s); a kernel waiting out that timer holds the
 * new connection back, so the timer shows in these times. The median is under a second where
 * rds-socket dials (the smaller address, and after the kernel's own shutdown); where the kernel
 * dials (rds-socket larger) it is the kernel's reconnect under emulation, measured at 0-1.5 s on
 * a host busy with other guests (7.x, median 1.06 s once), and held under 2.5 s. After `ss -K`
 * the times are from the drop to the UP of the carrier that then carried the pong: the
 * drop-to-pong time adds the guest's own scheduling, 0.6 to 7 s on that busy host (the pong came
 * when the guest's `ss -K` command returned); it is logged, and the pong must come.
 */
function expectQuick(times: number[], medianMs = 1000): void {
  const sorted = [...times].sort((a, b) => a - b);
  expect(sorted[Math.floor(sorted.length / 2)]!, times.join(', ')).toBeLessThan(medianMs);
  // A busy host (one emulated guest CPU) has been seen to take 3 s once; the timer is 5 s.
  expect(sorted[sorted.length - 1]!).toBeLessThan(4000);
}

async function pingRoundTrip(s: RdsSocket, ms: number): Promise<void> {
  s.sendmsg(Buffer.alloc(0), { address: KERNEL, port: 0 });
  const pong = await s.recv({ signal: AbortSignal.timeout(ms) });
  expect(pong).toMatchObject({ address: KERNEL, port: 0 });
}

/**
 * Kills the guest's connections to `addr` `times` times; returns, for each, the ms from the drop
 * we saw to the pong of a ping sent at that moment (it can only travel on the next connection),
 * and to the UP of the carrier that carried it (the last UP before the pong).
 */
async function killAndTime(
  stack: RdsStack,
  s: RdsSocket,
  addr: string,
  times: number,
): Promise<{ pong: number[]; up: number[] }> {
  const out: number[] = [];
  const ups: number[] = [];
  for (let i = 0; i < times; i++) {
    let dropAt = 0;
    let upAt = 0;
    const onDrop = (): void => {
      if (dropAt !== 0) return;
      dropAt = performance.now();
      s.sendmsg(Buffer.alloc(0), { address: KERNEL, port: 0 });
    };
    const onState = (e: { to: string }): void => {
      if (dropAt !== 0 && e.to === 'UP') upAt = performance.now();
    };
    stack.on('drop', onDrop);
    stack.on('state', onState);
    // Removed whatever happens: a listener left on the stack would send on a closed socket
    // when the next test closes this stack, and fail that test too.
    try {
      const k = await guest(`modprobe tcp_diag; ss -K -t dst ${addr} >/dev/null; echo killed`);
      expect(k.out).toContain('killed');
      const pong = await s.recv({ signal: AbortSignal.timeout(20_000) });
      const at = performance.now();
      expect(pong).toMatchObject({ address: KERNEL, port: 0 });
      expect(dropAt, 'the kill was never seen').toBeGreaterThan(0);
      expect(upAt, 'no path came up after the drop').toBeGreaterThan(0);
      out.push(at - dropAt);
      ups.push(upAt - dropAt);
    } finally {
      stack.off('drop', onDrop);
      stack.off('state', onState);
    }
  }
  return { pong: out, up: ups };
}

describe(`reconnect after a connection kill in the guest (Linux ${KERNEL_GEN})`, () => {
  it('rds-socket on the smaller address: the path is back up (median) under a second after each kill, and traffic resumes', async () => {
    const stack = await freshStack();
    const s = await bound(stack, SMALL, 5400);
    await pingRoundTrip(s, 30_000);
    const { pong, up } = await killAndTime(stack, s, SMALL, 4);
    console.log(
      `Linux ${KERNEL_GEN}, rds-socket smaller: drop to up ${up.map((t) => t.toFixed(0)).join(', ')} ms, to pong ${pong.map((t) => t.toFixed(0)).join(', ')} ms`,
    );
    expectQuick(up);
  });

  it('rds-socket on the larger address: the kernel dials again (median under 2.5 s) after each kill, and traffic resumes', async () => {
    const stack = await freshStack();
    const s = await bound(stack, LARGE, 5401);
    await pingRoundTrip(s, 30_000);
    const { pong, up } = await killAndTime(stack, s, LARGE, 4);
    console.log(
      `Linux ${KERNEL_GEN}, rds-socket larger: drop to up ${up.map((t) => t.toFixed(0)).join(', ')} ms, to pong ${pong.map((t) => t.toFixed(0)).join(', ')} ms`,
    );
    expectQuick(up, 2500);
  });

  it('the kernel shutting its connections down itself while we stream to it: traffic resumes well under a second', async () => {
    // Writing net.rds.tcp.rds_tcp_rcvbuf makes the kernel shut every RDS/TCP connection down to
    // apply it: on 7.x a half-close that waits for our FIN and its receive queue to empty.
    const stack = await freshStack();
    const s = await bound(stack, SMALL, 5402);
    // Pings go from a socket of their own: the streaming one keeps its send budget full (send()
    // waits for room), so a ping from it at the drop would get EAGAIN (as from a kernel socket).
    const pinger = await bound(stack, SMALL, 5403);
    const N = 120;
    const rx = peer(`recv ${KERNEL} 4402 ${N} ${SMALL} 5402`);
    const first = await s.recv({ signal: AbortSignal.timeout(60_000) });
    expect(first.data.toString()).toBe('ready');
    let dropAt = 0;
    const gaps: number[] = [];
    const onDrop = (): void => {
      if (dropAt !== 0) return;
      dropAt = performance.now();
      pinger.sendmsg(Buffer.alloc(0), { address: KERNEL, port: 0 });
    };
    stack.on('drop', onDrop);
    onTestFinished(() => void stack.off('drop', onDrop)); // also when the test fails
    const want: string[] = [];
    let shut: Promise<unknown> | null = null;
    const pongs = (async () => {
      for (let i = 0; i < 3; i++) {
        const m = await pinger.recv({ signal: AbortSignal.timeout(60_000) });
        expect(m).toMatchObject({ address: KERNEL, port: 0 });
        if (dropAt !== 0) gaps.push(performance.now() - dropAt);
        dropAt = 0;
      }
    })();
    for (let i = 0; i < N; i++) {
      const d = pattern(i, 100_000, 3);
      want.push(sha(d));
      await s.send(d, { address: KERNEL, port: 4402 }, { timeout: 60_000 });
      if (i % 40 === 20) shut = guest(`sysctl -qw net.rds.tcp.rds_tcp_rcvbuf=${(1 << 20) + i}; echo done`);
      if (i % 40 === 39) await shut;
    }
    const r = await rx;
    expect(r.code, r.out).toBe(0);
    expect(r.lines.map((l) => l.sha256)).toEqual(want);
    await pongs;
    console.log(
      `Linux ${KERNEL_GEN}, kernel-initiated shutdown: drop to pong ${gaps.map((t) => t.toFixed(0)).join(', ')} ms`,
    );
    expect(gaps.length).toBe(3);
    expectQuick(gaps);
    await guest('sysctl -qw net.rds.tcp.rds_tcp_rcvbuf=0');
  });
});
