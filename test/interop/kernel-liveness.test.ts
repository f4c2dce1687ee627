import { afterAll, describe, expect, it } from 'vitest';
import { RdsStack } from '../../lib/index.js';
import { bound, cutFromKernel, heal, KERNEL, KERNEL_GEN, peer, reloadRds, SMALL, until } from './kernel-lib.js';

// Issue 35 (the nemesis, seed 9091): after a partition, a kernel's side of a connection waits in
// its TCP retransmission backoff (20 s there) while ours flows, and the kernel's RDS has no
// heartbeat to notice. Our node pings a silent kernel path and drops it when the ping goes
// unanswered, so the kernel resends on a new connection. Here only what the kernel sends to us is
// dropped (nftables on this host), while it sends 10 messages.
const stacks: RdsStack[] = [];
afterAll(async () => {
  heal();
  for (const s of stacks.splice(0)) await s.close();
  await reloadRds(); // leave the kernel without our connections, as the other files expect
});

describe(`a kernel whose side of the connections stalls (Linux ${KERNEL_GEN})`, () => {
  it('answers the liveness pings while well; stalled, its paths are dropped and what it sent arrives once it can', async () => {
    const PORT = 7481;
    const a = new RdsStack({ heartbeatIntervalMs: 500, heartbeatMissedLimit: 4 });
    stacks.push(a);
    const sa = await bound(a, SMALL, PORT);
    const first = peer(`send ${KERNEL} 7491,7492 ${SMALL} ${PORT} 5 200 1`, 60);
    for (let i = 0; i < 10; i++) await sa.recv({ signal: AbortSignal.timeout(30_000) });
    expect((await first).lines.some((l) => l.drained === true)).toBe(true);
    // Idle now: the kernel answers our pings.
    expect(await until(() => a.counters.get('heartbeat_pong') >= 1, 20_000), 'a pong from the kernel').toBe(true);
    expect(a.counters.get('heartbeat_timeout')).toBe(0);

    cutFromKernel(SMALL);
    const second = peer(`send ${KERNEL} 7493,7494 ${SMALL} ${PORT} 5 200 2`, 120);
    // Its pongs and messages do not come: the node gives the silent paths up.
    expect(await until(() => a.counters.get('heartbeat_timeout') >= 1, 30_000), 'a path dropped').toBe(true);
    heal();
    const healed = Date.now();
    const got: number[] = [];
    while (got.length < 10) {
      const m = await sa.recv({ signal: AbortSignal.timeout(60_000) });
      expect(m.address).toBe(KERNEL);
      got.push(m.port);
    }
    const ms = Date.now() - healed;
    console.log(
      `Linux ${KERNEL_GEN}: all 10 read ${ms} ms after the heal; paths dropped for silence: ${a.counters.get('heartbeat_timeout')}`,
    );
    expect(got.filter((p) => p === 7493)).toHaveLength(5);
    expect(got.filter((p) => p === 7494)).toHaveLength(5);
    expect((await second).lines.some((l) => l.drained === true)).toBe(true);
  });
});
