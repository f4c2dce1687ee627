import { existsSync, writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { RdsStack, type RdsSocket } from '../../lib/index.js';
import {
  INST,
  IS_7X,
  KERNEL,
  KERNEL_GEN,
  LARGE,
  PEER,
  SMALL,
  bound,
  clearMeshMarkers,
  guest,
  reloadRds,
  until,
  expectEveryPairExact,
  meshBody,
  receiveMesh,
} from './kernel-lib.js';

// Multipath with a kernel that pairs by source port (SPORT_IDX, 7.0+; spec §3.6): rds-socket
// advertises its real path count and runs 8 paths with it, in both roles. Kernels before 7.0 keep
// one path (kernel.test.ts covers them); this file runs only against 7.x.

const N = 40; // messages per socket pair
const MAX = 6000;
const SEED = 11;
const KERNEL_SENDERS = 64; // the kernel hashes its sockets with a random seed: enough to reach all 8 paths

let stack: RdsStack | null = null;
afterAll(async () => {
  await stack?.close();
  if (IS_7X) await reloadRds(); // leave the kernel without our connections, as the other files expect
});

/**
 * The lane rds-socket gives a bound port with 8 paths (a copy of RdsConnection's port hash; the
 * test does not rely on it being right: it checks per-path counters below).
 */
const laneOf = (port: number): number => ((Math.imul(port, 0x9e3779b1) >>> 16) & 0xffff) % 8;

function onePortPerLane(from: number): number[] {
  const out: number[] = new Array(8).fill(0);
  let found = 0;
  for (let p = from; found < 8 && p < from + 1000; p++) {
    const l = laneOf(p);
    if (out[l] === 0) {
      out[l] = p;
      found++;
    }
  }
  expect(found).toBe(8);
  return out;
}

/** The guest's established RDS/TCP connections with `local`: [guest port, our port] each. */
async function kernelConns(local: string): Promise<[number, number][]> {
  const r = await guest(`modprobe tcp_diag; ss -tnH state established dst ${local}`);
  const out: [number, number][] = [];
  // An accepted connection shows IPv4-mapped addresses (the kernel listens on an IPv6 socket).
  for (const m of r.out.matchAll(/(?:\[::ffff:)?10\.77\.0\.2\]?:(\d+)\s+(?:\[::ffff:)?10\.77\.0\.\d+\]?:(\d+)/g))
    out.push([Number(m[1]), Number(m[2])]);
  return out;
}

/** Path indices of the guest's connections: the client's source port % 8 (spec §3.6). */
function pathsOf(conns: [number, number][]): number[] {
  return conns.map(([g, h]) => (g === 16385 ? h : g) % 8).sort((a, b) => a - b);
}

function ourConn(s: RdsStack) {
  return s.connections().find((c) => c.peerAddress === KERNEL && c.transport === 'tcp');
}

const allUp = (s: RdsStack): boolean => {
  const c = ourConn(s);
  return c !== undefined && c.npaths === 8 && c.paths.slice(0, 8).every((p) => p.state === 'UP');
};

describe.skipIf(!IS_7X)(`8 paths with a kernel that pairs by source port (Linux ${KERNEL_GEN})`, () => {
  for (const [role, local, base] of [
    ['smaller (rds-socket connects)', SMALL, 0],
    ['larger (the kernel connects)', LARGE, 100],
  ] as const) {
    it(`rds-socket on the ${role}: all 8 paths both ways, paths killed one and several at a time, every message once and in order`, async () => {
      await stack?.close();
      await reloadRds();
      stack = new RdsStack();
      const st = stack;
      const s0 = await bound(st, local, 5700 + base);
      // Any traffic starts the handshake; a ping's pong proves path 0.
      s0.sendmsg(Buffer.alloc(0), { address: KERNEL, port: 0 });
      const pong = await s0.recv({ timeout: 30_000 });
      expect(pong).toMatchObject({ address: KERNEL, port: 0 });
      expect(await until(() => allUp(st), 60_000), JSON.stringify(ourConn(st)?.paths.map((p) => p.state))).toBe(true);
      // The kernel runs 8 paths with us, one TCP connection each, paired by source port.
      let kc: [number, number][] = [];
      for (let i = 0; i < 50 && (kc = await kernelConns(local)).length < 8; i++)
        await new Promise((r) => setTimeout(r, 200));
      expect(pathsOf(kc)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);

      // Our senders: one per lane. Kernel senders: many, so that (random seeds) they reach every lane.
      const ourSend = onePortPerLane(5800 + base * 10);
      const kernelRecv = ourSend.map((_, i) => 4700 + base + i);
      const ourRecv = Array.from({ length: KERNEL_SENDERS }, (_, i) => 6000 + base * 10 + i);
      const kernelSend = ourRecv.map((_, i) => 7000 + base * 10 + i);
      const socks = new Map<number, RdsSocket>();
      for (const p of [...ourSend, ...ourRecv]) socks.set(p, await bound(st, local, p));
      clearMeshMarkers();
      const spec = [
        ...ourSend.map((p, i) => `r${kernelRecv[i]}@${local}:${p}`),
        ...ourRecv.map((p, i) => `s${kernelSend[i]}@${local}:${p}`),
      ].join(' ');
      const before = ourConn(st)!.paths.map((p) => ({ sent: p.sentMessages, recv: p.recvMessages }));
      const mesh = guest(`MESH_IDLE_S=90 timeout 400 python3 ${PEER} mesh ${KERNEL} ${N} ${MAX} ${SEED} ${spec}`);
      for (let i = 0; i < 6000 && !existsSync(`${INST}/ready.mesh`); i++) await new Promise((r) => setTimeout(r, 20));
      expect(existsSync(`${INST}/ready.mesh`), 'guest mesh never became ready').toBe(true);

      const senders = ourSend.map(async (p, k) => {
        const s = socks.get(p)!;
        let x = (p * 2654435761) % 0x7fffffff;
        for (let i = 0; i < N; i++) {
          x = (x * 1103515245 + 12345) % 0x80000000;
          await s.send(
            meshBody(i, 4 + (x % (MAX - 3)), SEED + p),
            { address: KERNEL, port: kernelRecv[k]! },
            { timeout: 300_000 },
          );
        }
      });
      const receivers = ourRecv.map((p, k) => receiveMesh(socks.get(p)!, kernelSend[k]!, N, SEED, 180_000));

      // Kill paths in the guest while traffic flows: one, then several at once, then path 0.
      const killed: number[][] = [];
      for (const lanes of [[3], [1, 5, 6], [0]]) {
        const conns = await kernelConns(local);
        const victims = conns.filter(([g, h]) => lanes.includes((g === 16385 ? h : g) % 8));
        const cmd = victims
          .map(([g, h]) => `ss -K state established dst ${local} sport = :${g} dport = :${h} >/dev/null`)
          .join('; ');
        const k = await guest(`modprobe tcp_diag; ${cmd}; echo killed`);
        expect(k.out).toContain('killed');
        killed.push(lanes);
        expect(
          await until(() => allUp(st), 60_000),
          `paths back after killing ${lanes}: ${JSON.stringify(ourConn(st)?.paths.map((p) => p.state))}`,
        ).toBe(true);
      }

      await Promise.all(senders);
      const ours = await Promise.all(receivers);
      writeFileSync(`${INST}/mesh.done`, '');
      const r = await mesh;
      const theirs = r.lines.filter((l) => l.dir === 'to-kernel');
      const after = ourConn(st)!.paths.map((p) => ({ sent: p.sentMessages, recv: p.recvMessages }));
      const perPath = after
        .slice(0, 8)
        .map((a, i) => ({ sent: a.sent - before[i]!.sent, recv: a.recv - before[i]!.recv }));
      console.log(
        JSON.stringify({ multipath7: { role, killed, perPath, ups: ourConn(st)!.paths.map((p) => p.upCount) } }),
      );
      expect(r.code, r.out).toBe(0);
      expect(theirs.length, r.out).toBe(ourSend.length);
      expectEveryPairExact(theirs, ours, N);
      // Traffic used every path both ways: each of our senders owns one lane, and the kernel's
      // senders reached every lane (a path without a socket carries at most a few congestion maps).
      for (const [i, p] of perPath.entries()) {
        expect(p.sent, `path ${i} sent`).toBeGreaterThanOrEqual(N);
        expect(p.recv, `path ${i} received`).toBeGreaterThanOrEqual(N);
      }
      // Each killed path reconnected on its own lane, and the kernel again shows 8 paths.
      const ups = ourConn(st)!.paths.map((p) => p.upCount);
      for (const l of killed.flat()) expect(ups[l], `path ${l} reconnects`).toBeGreaterThanOrEqual(2);
      for (let i = 0; i < 50 && (kc = await kernelConns(local)).length !== 8; i++)
        await new Promise((res) => setTimeout(res, 200));
      expect(pathsOf(kc)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
      for (const s of socks.values()) expect(s.recvmsg()).toBeNull();
    }, 600_000);
  }
});
