import { existsSync, writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { type RdsSocket, RdsStack } from '../../lib/index.js';
import {
  bound,
  clearMeshMarkers,
  expectEveryPairExact,
  guest,
  INST,
  KERNEL,
  KERNEL_GEN,
  kernelCounters,
  LARGE,
  meshBody,
  peer,
  PEER,
  receiveMesh,
  reloadRds,
  SMALL,
  startCapture,
} from './kernel-lib.js';

// Loss, duplication, reordering and corruption on the guest's link (netem) with the guest's TCP
// connections to us killed while traffic flows both ways (issue #40 has the story). Runs inside the
// test's network namespace (run.sh): this side is 10.77.0.1 and 10.77.0.3, the guest 10.77.0.2.

// One node per host-side address, as in a real deployment: a node owns its RDS/TCP port.
const smallNode = new RdsStack();
const largeNode = new RdsStack();
afterAll(async () => {
  await smallNode.close();
  await largeNode.close();
  await reloadRds(); // leave the kernel without our connections, as the other files expect
});

/**
 * What both nodes and the guest hold when a pair of the loss test came up short: each path's
 * state and queues, the lanes' hold and handshake flags, the guest's TCP connections with us and
 * the kernel's counters, so a failure says where the messages stopped.
 */
async function lossDiagnostics(drops: Record<string, number>): Promise<unknown> {
  const nodes = [
    ['small', smallNode],
    ['large', largeNode],
  ] as const;
  const ours = nodes.map(([name, st]) => {
    const conns = (
      st as unknown as {
        conns: Map<
          string,
          {
            faddr: string;
            npaths: number;
            handshake: { sportIdx: boolean; awaitingPathsPong: boolean; peer: string; caps: number };
            paths: {
              index: number;
              stateName: string;
              upCount: number;
              connectFailures: number;
              peerPongSeen: boolean;
              reconnectPending: boolean;
              tx: {
                nextTxSeq: number;
                sendQueue: Iterable<{ sport: number; seq: number; done: boolean }>;
                pendingCount(): { send: number; retrans: number };
                oldestUnacked(): number | undefined;
              };
            }[];
            failover: { holdingBehind(p: unknown): { index: number } | null };
          }
        >;
      }
    ).conns;
    return [...conns.values()]
      .filter((c) => c.faddr === KERNEL)
      .map((c) => ({
        node: name,
        npaths: c.npaths,
        sportIdx: c.handshake.sportIdx,
        awaitingPathsPong: c.handshake.awaitingPathsPong,
        capsKnown: c.handshake.peer !== 'unknown',
        caps: c.handshake.caps,
        paths: c.paths.slice(0, Math.max(1, c.npaths)).map((p) => {
          const ports = new Set<number>();
          for (const m of p.tx.sendQueue) if (!m.done) ports.add(m.sport);
          return {
            i: p.index,
            state: p.stateName,
            nextTx: p.tx.nextTxSeq,
            ups: p.upCount,
            connectFailures: p.connectFailures,
            pong: p.peerPongSeen,
            holdingBehind: c.failover.holdingBehind(p)?.index ?? null,
            reconnectPending: p.reconnectPending,
            ...p.tx.pendingCount(),
            oldestUnacked: p.tx.oldestUnacked() ?? null,
            queuedFromPorts: [...ports],
          };
        }),
      }));
  });
  const counters = nodes.map(([name, st]) => {
    const pick = [
      'cong_send_blocked',
      'cong_update_received',
      'send_queued',
      'send_retransmitted',
      'conn_reset',
      'recv_drop_old_seq',
      'recv_drop_no_sock',
      'tcp_accept_no_free_path',
      'tcp_connect_raced',
    ] as const;
    return {
      node: name,
      ...Object.fromEntries(pick.map((c) => [c, st.counters.get(c)])),
      congestedKernelPorts: [...Array(40).keys()].map((k) => 4400 + k).filter((p) => st.congMap(KERNEL).test(p)),
    };
  });
  const ss = await guest(`ss -tniH '( dst ${SMALL} or dst ${LARGE} )' | head -80`);
  const kc = await peer('counters');
  return {
    ours,
    counters,
    drops,
    guestTcp: ss.out.split('\n').filter((l) => l.trim() !== ''),
    kernelCounters: kc.lines[0] ?? kc.out,
  };
}

describe('loss, duplication, reordering, corruption and connection resets (netem in the guest)', () => {
  // It changes the guest's link, and puts it back afterwards.
  // The regular suite runs it once, with 4 pairs per node and direction (INTEROP_LOSS_RUNS and
  // INTEROP_LOSS_PAIRS change that); `npm run test:interop:loss` (issue #40) runs it 50 times,
  // 600 messages per pair, 8 pairs per node and direction, with a packet capture of the guest's
  // link (INTEROP_LOSS_PCAP, a directory) kept for each failing run.
  const N = Number(process.env.INTEROP_LOSS_MESSAGES ?? 200);
  const PAIRS = Number(process.env.INTEROP_LOSS_PAIRS ?? 4);
  const RUNS = Number(process.env.INTEROP_LOSS_RUNS ?? 1);
  const PCAP = process.env.INTEROP_LOSS_PCAP;
  const KILL_EVERY_S = Number(process.env.INTEROP_LOSS_KILL_EVERY_S ?? 0.5);
  // The guest mesh's limit: 270 s for the regular size, more for repro runs with more messages.
  const LIMIT_S = Math.max(270, Math.ceil((N * PAIRS) / 4));
  const MAX = 16_000;
  const SEED = 7;
  const netem = process.env.INTEROP_NETEM ?? 'loss 3% duplicate 2% reorder 10% 50% delay 1ms';
  const netemSetup = [
    'set -e; modprobe sch_netem; modprobe ifb numifbs=1; modprobe act_mirred; modprobe cls_matchall; modprobe sch_ingress; modprobe tcp_diag',
    // Egress: corruption too (netem fixes the checksum first, so the host's TCP drops the segment,
    // as a real network's corruption is caught). Ingress through ifb: no corruption there, since
    // a segment the guest's NIC already marked checksum-verified would be taken corrupted.
    `tc qdisc replace dev eth0 root netem ${netem} corrupt 2%`,
    'ip link set ifb0 up',
    'tc qdisc replace dev eth0 handle ffff: ingress',
    'tc filter replace dev eth0 parent ffff: matchall action mirred egress redirect dev ifb0',
    `tc qdisc replace dev ifb0 root netem ${netem}`,
    'tc qdisc show dev eth0; tc qdisc show dev ifb0',
  ].join('\n');
  const netemTeardown = 'tc qdisc del dev eth0 root; tc qdisc del dev eth0 ingress; tc qdisc del dev ifb0 root; true';

  for (let run = 1; run <= RUNS; run++)
    it(
      `${N} messages per socket pair, ${4 * PAIRS} pairs (both directions, both address orders): every message once, in order, intact (run ${run} of ${RUNS})`,
      async () => {
        const pairs: { stack: RdsStack; local: string; port: number; kport: number; toKernel: boolean }[] = [];
        for (const [stack, local, base] of [
          [smallNode, SMALL, 0],
          [largeNode, LARGE, 20],
        ] as const) {
          for (let k = 0; k < PAIRS; k++) {
            pairs.push({ stack, local, port: 5400 + base + k, kport: 4400 + base + k, toKernel: true });
            pairs.push({ stack, local, port: 4600 + base + k, kport: 6400 + base + k, toKernel: false });
          }
        }
        // Both address orders meet the kernel before the faults start: a ping answered means the
        // kernel has our multipath probe. A 6.1 kernel whose first probe is lost with a killed
        // connection blocks its senders on ports that hash to a path > 0 for good (it sends one
        // probe per connection record and waits for a pong), which is not what this test is about.
        for (const [st, local] of [
          [smallNode, SMALL],
          [largeNode, LARGE],
        ] as const) {
          const s = await bound(st, local, 5390);
          s.sendmsg(Buffer.alloc(0), { address: KERNEL, port: 0 });
          expect(await s.recv({ timeout: 60_000 })).toMatchObject({ address: KERNEL, port: 0 });
          s.close();
        }
        const socks = new Map<number, RdsSocket>();
        for (const p of pairs) socks.set(p.port, await bound(p.stack, p.local, p.port));
        const retransmitted = (): number =>
          smallNode.counters.get('send_retransmitted') + largeNode.counters.get('send_retransmitted');
        const retransBefore = retransmitted();
        const upBefore = [smallNode, largeNode]
          .flatMap((s) => s.connections())
          .reduce((a, c) => a + c.paths[0]!.upCount, 0);
        clearMeshMarkers();
        const capture = PCAP ? await startCapture(`${PCAP}/loss-${KERNEL_GEN}-${Date.now()}-run${run}.pcap`) : null;
        const oursBefore = [smallNode.counters.snapshot(), largeNode.counters.snapshot()];
        const kernelBefore = await kernelCounters();
        const setup = await guest(netemSetup);
        expect(setup.code, setup.out).toBe(0);
        const t0 = Date.now();
        let passed = false;
        // Why each path went down, per node and path (printed only if a pair came up short).
        const drops: Record<string, number> = {};
        const offDrops: (() => void)[] = [];
        for (const [name, st] of [
          ['small', smallNode],
          ['large', largeNode],
        ] as const) {
          const onDrop = (ev: { peerAddress: string; path: number; reason: string }): void => {
            if (ev.peerAddress !== KERNEL) return;
            const key = `${name}/${ev.path}/${ev.reason}`;
            drops[key] = (drops[key] ?? 0) + 1;
          };
          st.on('drop', onDrop);
          offDrops.push(() => st.off('drop', onDrop));
        }
        try {
          const spec = pairs.map((p) => `${p.toKernel ? 'r' : 's'}${p.kport}@${p.local}:${p.port}`).join(' ');
          const mesh = guest(
            `MESH_IDLE_S=60 timeout ${LIMIT_S} python3 ${PEER} mesh ${KERNEL} ${N} ${MAX} ${SEED} ${spec}`,
          );
          for (let i = 0; i < 3000 && !existsSync(`${INST}/ready.mesh`); i++)
            await new Promise((r) => setTimeout(r, 20));
          expect(existsSync(`${INST}/ready.mesh`), 'guest mesh never became ready').toBe(true);
          // Connections reset from the guest while traffic flows (both address orders): a pause of
          // KILL_EVERY_S, then ss -K, which itself takes seconds under emulation.
          const kills = guest(
            `i=0; while [ ! -e /rdsinst/kills.stop ] && [ $i -lt 300 ]; do sleep ${KILL_EVERY_S}; ss -K '( dst ${SMALL} or dst ${LARGE} )' >/dev/null; i=$((i+1)); done; echo "{\\"killed\\":$i}"`,
          );
          const senders = pairs
            .filter((p) => p.toKernel)
            .map(async (p) => {
              const s = socks.get(p.port)!;
              let x = (p.port * 2654435761) % 0x7fffffff;
              for (let i = 0; i < N; i++) {
                // send() resolves at once while the socket has room: without a turn of the event
                // loop now and then, the senders would hold it (seconds on a loaded machine) and
                // the test would measure its own blocking, not the node (issue #40).
                if (i % 8 === 7) await new Promise((r) => setImmediate(r));
                x = (x * 1103515245 + 12345) % 0x80000000;
                await s.send(
                  meshBody(i, 4 + (x % (MAX - 3)), SEED + p.port),
                  { address: KERNEL, port: p.kport },
                  { timeout: 300_000 },
                );
              }
            });
          // The guest's senders start one after another (a 6.1 kernel's sender waits while the
          // connection is busy with the others'): at the repro size the last one's first message
          // came 157 s after the test started, so only later messages are held to the quiet time.
          const receivers = pairs
            .filter((p) => !p.toKernel)
            .map((p) => receiveMesh(socks.get(p.port)!, p.kport, N, SEED, 120_000, LIMIT_S * 1000));
          await Promise.all(senders);
          const ours = await Promise.all(receivers);
          writeFileSync(`${INST}/mesh.done`, '');
          const r = await mesh;
          writeFileSync(`${INST}/kills.stop`, '');
          const k = await kills;
          const theirs = r.lines.filter((l) => l.dir === 'to-kernel');
          const retrans = retransmitted() - retransBefore;
          const ups =
            [smallNode, largeNode].flatMap((s) => s.connections()).reduce((a, c) => a + c.paths[0]!.upCount, 0) -
            upBefore;
          const both = (c: 'tcp_accept_no_free_path' | 'tcp_connect_raced' | 'cong_send_blocked'): number =>
            smallNode.counters.get(c) + largeNode.counters.get(c);
          console.log(
            JSON.stringify({
              lossTest: {
                seconds: (Date.now() - t0) / 1000,
                killed: k.lines[0]?.killed,
                retransmitted: retrans,
                connectionsUp: ups,
                acceptsRefused: both('tcp_accept_no_free_path'),
                carriersReplaced: both('tcp_connect_raced'),
                congestionWaits: both('cong_send_blocked'),
                messages: N * pairs.length,
              },
            }),
          );
          const short = theirs.some((t) => t.got !== N) || ours.some((o) => o.got !== N);
          if (short) {
            const kernelAfter = await kernelCounters();
            const moved = (a: Record<string, number>, b: Record<string, number>): Record<string, number> =>
              Object.fromEntries(
                Object.keys(b)
                  .filter((c) => b[c] !== a[c])
                  .map((c) => [c, b[c]! - (a[c] ?? 0)]),
              );
            const countersMoved = {
              small: moved(oursBefore[0]!, smallNode.counters.snapshot()),
              large: moved(oursBefore[1]!, largeNode.counters.snapshot()),
              kernel: moved(kernelBefore, kernelAfter),
            };
            const gaps = theirs.filter((t) => t.got !== N);
            const oursShort = ours.filter((o) => o.got !== N || o.timeout || o.dups > 0 || o.strangers > 0);
            console.log(
              JSON.stringify({
                lossTestShort: await lossDiagnostics(drops),
                countersMoved,
                gaps,
                oursShort,
                pcap: capture?.file,
              }),
            );
          }
          expect(r.code, r.out).toBe(0);
          expect(theirs.length, r.out).toBe(pairs.filter((p) => p.toKernel).length);
          expectEveryPairExact(theirs, ours, N);
          const killed = k.lines[0]?.killed as number;
          expect(killed).toBeGreaterThanOrEqual(2);
          // Each kill takes down one connection per address order; reconnects back off, so a
          // connection that comes up and dies at once does not make dozens more (a reconnect storm).
          expect(ups).toBeLessThanOrEqual(3 * 2 * killed + 10);
          for (const s of socks.values()) expect(s.recvmsg()).toBeNull();
          passed = true;
        } finally {
          writeFileSync(`${INST}/kills.stop`, '');
          await guest(netemTeardown);
          for (const off of offDrops) off();
          for (const s of socks.values()) s.close();
          // A capture is kept only for a failing run: a passing one is hundreds of MB.
          await capture?.stop(!passed);
        }
      },
      (LIMIT_S + 130) * 1000,
    );
});
