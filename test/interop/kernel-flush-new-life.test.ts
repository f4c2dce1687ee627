import { afterAll, describe, expect, it } from 'vitest';
import { RdsStack } from '../../lib/index.js';
import { IS_7X, KERNEL, KERNEL_GEN, LARGE, bound, cut, heal, kernelCounters, peer, reloadRds } from './kernel-lib.js';

// Issue 35 (the nemesis, seed 7079): messages a 7.x kernel sent to a node of ours that had just
// restarted, while a partition hid the restart, were never read. This plays it with nothing else
// going on: our node on the larger address, the kernel's connections to its first life kept out
// of sight by the partition; a second life binds the same port; the kernel sends to it during the
// partition (into its connections to the first life, which it still takes for alive), then the
// partition heals. Up to 6.19 the kernel resends them on its new connections and the new life
// reads all 20. A 7.x kernel, once our new life's GEN_NUM reaches it (the probe on its first new
// connection), marks what it then holds in flight on every path FLUSH and drops it rather than
// resend it (rds_conn_peer_gen_update; spec §2.10), telling its application nothing: here the new
// life read 0, 0 and 10 of the 20 in three runs (which ones depends on what each lane held at that
// moment), and took no frame it did not deliver. The kernel's choice, not a loss of ours; the
// nemesis counts such messages apart (kernel-flush, docs/nemesis.md "Session 30").
const stacks: RdsStack[] = [];
afterAll(async () => {
  heal();
  for (const s of stacks.splice(0)) await s.close();
  await reloadRds();
});

describe(`messages a kernel sent during a partition to a node that restarted behind it (Linux ${KERNEL_GEN})`, () => {
  it(IS_7X
    ? 'reach the new life only where the 7.x kernel did not drop them on learning its generation; every frame that came was delivered'
    : 'are resent by the kernel once the partition heals and read by the new life, all of them', async () => {
    const PORT = 7451;
    const a = new RdsStack();
    stacks.push(a);
    const sa = await bound(a, LARGE, PORT);
    // The first life: the kernel's messages reach it (its connections, all lanes, come up).
    const first = peer(`send ${KERNEL} 7461,7462,7463,7464 ${LARGE} ${PORT} 5 200 1`, 60);
    for (let i = 0; i < 20; i++) await sa.recv({ signal: AbortSignal.timeout(30_000) });
    expect((await first).lines.some((l) => l.drained === true)).toBe(true);

    // It ends unseen behind a partition; a new life binds the same port.
    cut(LARGE);
    await a.close();
    stacks.splice(stacks.indexOf(a), 1);
    const b = new RdsStack();
    stacks.push(b);
    const sb = await bound(b, LARGE, PORT);
    const before = await kernelCounters();
    // The kernel sends to it while the partition lasts: 4 sockets (spread over its lanes), 5 each.
    const second = peer(`send ${KERNEL} 7471,7472,7473,7474 ${LARGE} ${PORT} 5 200 2`, 90);
    await new Promise((r) => setTimeout(r, 3000));
    heal();
    const got: number[] = [];
    for (;;) {
      try {
        const m = await sb.recv({ signal: AbortSignal.timeout(IS_7X ? 12_000 : 25_000) });
        got.push(m.port);
      } catch {
        break;
      }
      if (got.length === 20) break;
    }
    const sent = await second;
    const after = await kernelCounters();
    const delta = Object.fromEntries(
      Object.entries(after)
        .map(([k, v]) => [k, v - (before[k] ?? 0)] as const)
        .filter(([, v]) => v !== 0),
    );
    const byPort = Object.fromEntries([7471, 7472, 7473, 7474].map((p) => [p, got.filter((x) => x === p).length]));
    console.log(
      `Linux ${KERNEL_GEN}: the new life read ${got.length} of 20 ${JSON.stringify(byPort)}; sender: ` +
        `${JSON.stringify(sent.lines.filter((l) => l.sent !== undefined))}; kernel counters: ${JSON.stringify(delta)}; ` +
        `ours: ${JSON.stringify(Object.fromEntries(Object.entries(b.counters.snapshot()).filter(([k, v]) => v > 0 && /drop|restart|lane|raced|recv_|accept/.test(k))))}`,
    );
    expect(sent.lines.some((l) => l.drained === true)).toBe(true); // the kernel let go of them all
    if (!IS_7X) {
      expect(byPort).toEqual({ 7471: 5, 7472: 5, 7473: 5, 7474: 5 });
      return;
    }
    // What came, came once; what did not come never reached the node: every frame it took from
    // the kernel was delivered, none dropped as old, as a copy or for want of a socket.
    expect(Object.values(byPort).every((n) => n <= 5)).toBe(true);
    expect(b.counters.get('recv_delivered')).toBe(got.length);
    for (const c of ['recv_drop_old_seq', 'recv_drop_moved_dup', 'recv_drop_no_sock'] as const)
      expect(b.counters.get(c), c).toBe(0);
  }, 180_000);
});
