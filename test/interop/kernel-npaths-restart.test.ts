import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { RdsStack } from '../../lib/index.js';
import {
  INST,
  IS_7X,
  KERNEL,
  KERNEL_GEN,
  SMALL,
  bound,
  meshBody,
  peer,
  readyFile,
  reloadRds,
  until,
} from './kernel-lib.js';

// Our node restarted while a kernel's sockets keep sending to it. A 7.x kernel keeps the path
// count it had with the old node (8) and queues each socket's messages on that socket's lane until
// the new node dials it. The new node's first handshake frame went out before it had read the
// kernel's and said NPATHS = 1: the kernel then sent the next messages of a socket whose lane was
// still down on path 0, and when our second probe (NPATHS = 8, once we knew the kernel pairs by
// source port) fanned it out again, the lane's queued ones arrived after them (docs/kernel-
// interop.md, session 32's capture). Now a handshake frame to a peer not known yet carries no
// NPATHS, which leaves a kernel's count as it is. Before 7.0 the kernel runs one path with us:
// the same stream must arrive the same way.

const stacks: RdsStack[] = [];
afterAll(async () => {
  for (const s of stacks.splice(0)) await s.close();
  await reloadRds(); // leave the kernel without our connections, as the other files expect
});

const PORT = 5460;
const FIRST = [7551, 7552, 7553, 7554, 7555, 7556, 7557, 7558];
const KPORTS = [7561, 7562, 7563, 7564, 7565, 7566, 7567, 7568]; // the kernel hashes each socket to a lane at random
const ROUNDS = 300;
const SIZE = 64;

const connOf = (s: RdsStack) => s.connections().find((c) => c.peerAddress === KERNEL && c.transport === 'tcp');

describe(`a kernel's senders across our node's restart (Linux ${KERNEL_GEN})`, () => {
  it('every kernel socket streaming to us while our node restarts: all its messages arrive once and in order', async () => {
    // The first life: the kernel runs as many paths with it as it will (8 with 7.x).
    const a = new RdsStack();
    stacks.push(a);
    const sa = await bound(a, SMALL, PORT);
    const first = peer(`send ${KERNEL} ${FIRST.join(',')} ${SMALL} ${PORT} 2 200 1`, 60);
    for (let i = 0; i < FIRST.length * 2; i++) await sa.recv({ signal: AbortSignal.timeout(60_000) });
    expect((await first).lines.some((l) => l.drained === true)).toBe(true);
    if (IS_7X) expect(await until(() => connOf(a)?.npaths === 8, 20_000), 'the first node runs 8 paths').toBe(true);
    await a.close();
    stacks.splice(stacks.indexOf(a), 1);

    // The kernel's sockets start while no node is there: their first rounds wait on their lanes.
    rmSync(`${INST}/ready.${KPORTS[0]}`, { force: true });
    const tx = peer(`trickle ${KERNEL} ${KPORTS.join(',')} ${SMALL} ${PORT} ${ROUNDS} ${SIZE} 5`, 150);
    await readyFile(KPORTS[0]!);

    // The second life at the same address, while they keep sending.
    const b = new RdsStack();
    stacks.push(b);
    const sb = await bound(b, SMALL, PORT);
    const next = new Map(KPORTS.map((p) => [p, 0]));
    const problems: string[] = [];
    for (let k = 0; k < ROUNDS * KPORTS.length; k++) {
      const m = await sb.recv({ signal: AbortSignal.timeout(60_000) });
      expect(m.address).toBe(KERNEL);
      const want = next.get(m.port);
      expect(want, `a message from kernel port ${m.port}`).toBeDefined();
      const i = m.data.readUInt32BE(0);
      if (i !== want) problems.push(`port ${m.port}: message ${i} where ${want} was next`);
      if (!m.data.equals(meshBody(i, SIZE, m.port))) problems.push(`port ${m.port}: message ${i} damaged`);
      next.set(m.port, Math.max(want!, i + 1));
    }
    expect(problems).toEqual([]);
    const t = await tx;
    expect(t.code, t.out).toBe(0);
    expect(t.lines.some((l) => l.drained === true)).toBe(true);
    const c = connOf(b)!;
    console.log(
      `Linux ${KERNEL_GEN}: ${ROUNDS * KPORTS.length} messages from ${KPORTS.length} kernel sockets across the restart, in order; the new node runs ${c.npaths} path(s)`,
    );
    if (IS_7X) expect(c.npaths).toBe(8);
  });
});
