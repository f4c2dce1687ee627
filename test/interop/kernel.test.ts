import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants } from '../../lib/index.js';
import {
  bound,
  guest,
  IS_7X,
  KERNEL,
  kernelCounters,
  LARGE,
  pattern,
  peer,
  ready,
  readyFile,
  reloadRds,
  sha,
  SMALL,
  type GuestRun,
} from './kernel-lib.js';
import { sendUntilCongested } from '../helpers.js';

// Runs inside the test's network namespace (run.sh): this side is 10.77.0.1 and 10.77.0.3, the
// guest kernel is 10.77.0.2 with rds_tcp loaded. Guest programs are python AF_RDS sockets; the
// helpers they share with the other interop files are in kernel-lib.ts.

const SIZES = [0, 1, 47, 48, 4096, 4097, 65535, 106_496, 300_000, 1 << 20, 7, 0];

const stacks: RdsStack[] = [];
function node(): RdsStack {
  const s = new RdsStack();
  stacks.push(s);
  return s;
}
afterAll(async () => {
  for (const s of stacks) await s.close();
  await reloadRds(); // leave the kernel without our connections, as the other files expect
});

// One node per host-side address, as in a real deployment: a node owns its RDS/TCP port.
const smallNode = node();
const largeNode = node();

describe('rds-socket as the smaller address (10.77.0.1) with a kernel peer', () => {
  const stack = smallNode;

  it('sends messages of 0 B..1 MiB from two sockets; the kernel receives each in order, intact', async () => {
    const a = await bound(stack, SMALL, 5000);
    const b = await bound(stack, SMALL, 5001);
    const rx = peer(`recv ${KERNEL} 4000 ${SIZES.length * 2} ${SMALL} 5000`);
    await ready(a);
    const want = new Map<number, string[]>([
      [5000, []],
      [5001, []],
    ]);
    for (let i = 0; i < SIZES.length; i++) {
      for (const s of [a, b]) {
        const data = pattern(i, SIZES[i]!, s.address().port);
        want.get(s.address().port)!.push(sha(data));
        await s.send(data, { address: KERNEL, port: 4000 }, { signal: AbortSignal.timeout(60_000) });
      }
    }
    const r = await rx;
    expect(r.code, r.out).toBe(0);
    const got = new Map<number, string[]>([
      [5000, []],
      [5001, []],
    ]);
    for (const l of r.lines) {
      expect(l.from).toBe(SMALL);
      got.get(l.port as number)!.push(l.sha256 as string);
    }
    expect(got).toEqual(want);
  });

  it('receives messages of 0 B..1 MiB from a kernel socket, in order, intact', async () => {
    const r4 = await bound(stack, SMALL, 4000);
    const tx = peer(`send ${KERNEL} 6000 ${SMALL} 4000 40 ${1 << 20} 9`);
    const got: string[] = [];
    for (let i = 0; i < 40; i++) {
      const m = await r4.recv({ signal: AbortSignal.timeout(60_000) });
      expect(m).toMatchObject({ address: KERNEL, port: 6000 });
      got.push(sha(m.data));
    }
    const r = await tx;
    expect(r.code, r.out).toBe(0);
    const sent = r.lines.filter((l) => 'sha256' in l).map((l) => l.sha256);
    expect(got).toEqual(sent);
  });

  it("pings the kernel (pong from port 0) and answers the kernel's ping", async () => {
    const s = await bound(stack, SMALL, 5002);
    s.sendmsg(Buffer.alloc(0), { address: KERNEL, port: 0 });
    const pong = await s.recv({ signal: AbortSignal.timeout(20_000) });
    expect(pong).toMatchObject({ address: KERNEL, port: 0 });
    expect(pong.data.length).toBe(0);
    const before = stack.counters.get('send_pong');
    const r = await peer(`ping ${KERNEL} ${SMALL}`);
    expect(r.code, r.out).toBe(0);
    expect(r.lines[0]).toMatchObject({ from: SMALL, port: 0, len: 0 });
    expect(stack.counters.get('send_pong')).toBe(before + 1);
  });

  it('a kernel receiver that stops reading makes our sender get ENOBUFS, then resume', async () => {
    const s = await bound(stack, SMALL, 5003);
    const hold = peer(`congest ${KERNEL} 4200 4096 6 ${SMALL} 5003`);
    await ready(s);
    const dst = { address: KERNEL, port: 4200 };
    const { sent, congested } = await sendUntilCongested(s, dst, 60_000);
    expect(congested).toBe(true);
    // send() waits for the kernel's map to clear once the reader drains.
    await s.send(Buffer.alloc(10, 2), dst, { signal: AbortSignal.timeout(60_000) });
    const r = await hold;
    expect(r.code, r.out).toBe(0);
    expect((r.lines[1]?.drained as number) ?? 0).toBeGreaterThanOrEqual(sent);
  });
});

describe('congestion from our side (rds-socket at 10.77.0.1)', () => {
  const stack = smallNode;

  it('an rds-socket receiver that stops reading makes the kernel sender get ENOBUFS, then resume', async () => {
    const data = new RdsSocket({ stack });
    await data.bind({ address: SMALL, port: 5310 });
    data.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 4096);
    const ctrl = await bound(stack, SMALL, 5311);
    const flood = peer(`flood ${KERNEL} 6310 ${SMALL} 5310 5311`);
    // Not reading `data` until the kernel says it got ENOBUFS (on the uncongested control port).
    const m = await ctrl.recv({ timeout: 60_000 });
    expect(m.data.toString()).toBe('enobufs');
    expect(stack.congMap(SMALL).test(5310)).toBe(true);
    for (let q = data.recvmsg(); q !== null; q = data.recvmsg()) {
      /* drain: the port clears below half */
    }
    const m2 = await ctrl.recv({ timeout: 60_000 });
    expect(m2.data.toString()).toBe('resumed');
    const r = await flood;
    expect(r.code, r.out).toBe(0);
    expect(r.lines[0]).toMatchObject({ enobufs: true });
  });
});

describe('rds-socket as the larger address (10.77.0.3) with a kernel peer', () => {
  const stack = largeNode;

  it('pokes the kernel, which connects back, and the message is delivered', async () => {
    const s = await bound(stack, LARGE, 5000);
    const rx = peer(`recv ${KERNEL} 4100 1 file`);
    await readyFile(4100);
    // An earlier scenario may have left the kernel connected to this node (the kernel, the
    // smaller address, keeps its connection up): then there is nothing to poke.
    const upBefore = stack.connections().find((c) => c.peerAddress === KERNEL)?.paths[0]?.state === 'UP';
    const pokesBefore = stack.counters.get('conn_poke_sent');
    const supersededBefore = stack.counters.get('conn_poke_superseded');
    s.sendmsg(Buffer.from('from the larger side'), { address: KERNEL, port: 4100 });
    const r = await rx;
    expect(r.code, r.out).toBe(0);
    expect(r.lines[0]).toMatchObject({ from: LARGE, port: 5000, len: 20 });
    const c = stack.connections().find((c) => c.peerAddress === KERNEL)!;
    // We poked: either the poke reached ESTABLISHED here (conn_poke_sent), or the kernel's reset
    // of it arrived before our connect completed, which counts as a failed connect of path 0, or
    // the kernel was reconnecting anyway (after an earlier scenario's kill) and its connection
    // arrived while our poke was in flight (conn_poke_superseded; seen once on 6.12 under load).
    if (!upBefore)
      expect(
        stack.counters.get('conn_poke_sent') -
          pokesBefore +
          stack.counters.get('conn_poke_superseded') -
          supersededBefore +
          c.paths[0]!.connectFailures,
      ).toBeGreaterThanOrEqual(1);
    expect(c.initiator).toBe(false);
    expect(c.paths[0]!.state).toBe('UP');
  });

  it('answers the multipath probe, so blocking kernel senders on ports that hash to paths > 0 do not hang', async () => {
    const r4 = await bound(stack, LARGE, 4000);
    // Each kernel socket hashes to a path with a random seed; with seven sockets at least one
    // almost surely lands on a path > 0, sends the probe and blocks until it is answered.
    const ports = [6001, 6002, 6003, 6004, 6005, 6006, 6007];
    const tx = peer(`send ${KERNEL} ${ports.join(',')} ${LARGE} 4000 5 70000 3`);
    // Order per socket pair only: with 7.x each kernel socket may use its own path.
    const count = new Map<number, number>();
    for (let i = 0; i < ports.length * 5; i++) {
      const m = await r4.recv({ signal: AbortSignal.timeout(60_000) });
      expect(m.address).toBe(KERNEL);
      expect(ports).toContain(m.port);
      count.set(m.port, (count.get(m.port) ?? 0) + 1);
    }
    for (const p of ports) expect(count.get(p)).toBe(5);
    const r = await tx;
    expect(r.code, r.out).toBe(0);
    // Either the kernel probed and we answered, or our own handshake told it npaths first.
    expect(stack.counters.get('recv_ping') + stack.counters.get('handshake_received')).toBeGreaterThanOrEqual(1);
    // Kernels that send SPORT_IDX (7.x) run 8 paths with us, older ones one.
    expect(stack.connections().find((c) => c.peerAddress === KERNEL)!.npaths).toBe(IS_7X ? 8 : 1);
  });

  it('the kernel answers our pings when we are the larger side too', async () => {
    const s = await bound(stack, LARGE, 5004);
    s.sendmsg(Buffer.alloc(0), { address: KERNEL, port: 0 });
    const pong = await s.recv({ signal: AbortSignal.timeout(20_000) });
    expect(pong).toMatchObject({ address: KERNEL, port: 0 });
  });
});

/** Kills the guest's TCP connections to `addr` a few times while traffic flows (tcp_diag's SOCK_DESTROY). */
const killLoop = (addr: string, times: number): Promise<GuestRun> =>
  guest(
    `modprobe tcp_diag; for i in $(seq ${times}); do sleep 0.4; ss -K dst ${addr} >/dev/null; done; echo '{"killed":${times}}'`,
  );

describe('faults with a kernel peer (rds-socket at 10.77.0.1)', () => {
  const stack = smallNode;

  it('MSG_ZEROCOPY sends through connection kills: the kernel gets every message intact, buffers are reused only after their completion', async () => {
    const s = await bound(stack, SMALL, 5320);
    s.setsockopt(constants.SOL_SOCKET, constants.SO_ZEROCOPY, 1);
    const N = 300;
    const before = await kernelCounters();
    const rx = peer(`recv ${KERNEL} 4320 ${N} ${SMALL} 5320`);
    await ready(s);
    const kills = killLoop(SMALL, 3);
    // Eight buffers reused in turn: if anything read a buffer after reporting it free, the kernel
    // would receive the next message's bytes and the hashes would differ.
    const ring = Array.from({ length: 8 }, () => Buffer.alloc(60_000));
    const free = new Set(ring.keys());
    const want: string[] = [];
    for (let i = 0; i < N; i++) {
      while (!free.has(i % 8)) {
        const m = await s.recv({ signal: AbortSignal.timeout(60_000) });
        for (const c of m.zcopyCompletions ?? []) free.add(c % 8);
      }
      free.delete(i % 8);
      const data = ring[i % 8]!.subarray(0, 1 + ((i * 7919) % 60000));
      pattern(i, data.length, 12).copy(data);
      want.push(sha(data));
      await s.send(
        data,
        { address: KERNEL, port: 4320 },
        { timeout: 60_000, flags: constants.MSG_ZEROCOPY, zcopyCookie: i },
      );
    }
    await kills;
    const r = await rx;
    expect(r.code, r.out).toBe(0);
    expect(r.lines.map((l) => l.sha256)).toEqual(want);
    expect((await kernelCounters()).conn_reset! - before.conn_reset!).toBeGreaterThanOrEqual(1);
    // The last buffers are released too, once TCP has acknowledged them.
    while (free.size < 8) {
      const m = await s.recv({ signal: AbortSignal.timeout(60_000) });
      for (const c of m.zcopyCompletions ?? []) free.add(c % 8);
    }
    await s.flush({ timeout: 60_000 });
  });

  it('TCP connections killed in the guest while we send: the kernel receives every message once, in order', async () => {
    const s = await bound(stack, SMALL, 5300);
    const N = 400;
    const before = await kernelCounters();
    const rx = peer(`recv ${KERNEL} 4300 ${N} ${SMALL} 5300`);
    await ready(s);
    const kills = killLoop(SMALL, 4);
    const want: string[] = [];
    for (let i = 0; i < N; i++) {
      const data = pattern(i, 1 + ((i * 7919) % 60000), 11);
      want.push(sha(data));
      await s.send(data, { address: KERNEL, port: 4300 }, { timeout: 60_000 });
    }
    await kills;
    const r = await rx;
    expect(r.code, r.out).toBe(0);
    expect(r.lines.map((l) => l.sha256)).toEqual(want);
    const after = await kernelCounters();
    expect(after.conn_reset! - before.conn_reset!).toBeGreaterThanOrEqual(1);
    expect(after.recv_delivered! - before.recv_delivered!).toBeGreaterThanOrEqual(N);
  });

  it('TCP connections killed in the guest while the kernel sends: we receive every message once, in order', async () => {
    const r4 = await bound(stack, SMALL, 4301);
    const N = 300;
    const tx = peer(`send ${KERNEL} 6300 ${SMALL} 4301 ${N} 60000 5`);
    const kills = killLoop(SMALL, 4);
    const got: string[] = [];
    for (let i = 0; i < N; i++) got.push(sha((await r4.recv({ timeout: 60_000 })).data));
    const r = await tx;
    await kills;
    expect(r.code, r.out).toBe(0);
    expect(got).toEqual(r.lines.filter((l) => 'sha256' in l).map((l) => l.sha256));
    expect(r4.recvmsg()).toBeNull();
  });

  it('the guest link going down and up mid-stream loses nothing', async () => {
    const s = await bound(stack, SMALL, 5302);
    const N = 200;
    const rx = peer(`recv ${KERNEL} 4302 ${N} ${SMALL} 5302`);
    await ready(s);
    const flap = guest('sleep 0.3; ip link set eth0 down; sleep 1.5; ip link set eth0 up; echo \'{"flapped":1}\'');
    const want: string[] = [];
    for (let i = 0; i < N; i++) {
      const data = pattern(i, 1 + ((i * 104729) % 30000), 12);
      want.push(sha(data));
      await s.send(data, { address: KERNEL, port: 4302 }, { timeout: 60_000 });
    }
    expect((await flap).code).toBe(0);
    const r = await rx;
    expect(r.code, r.out).toBe(0);
    expect(r.lines.map((l) => l.sha256)).toEqual(want);
  });

  it('a kernel module reload (a new RDS generation) resumes traffic both ways without duplicates', async () => {
    const s = await bound(stack, SMALL, 5303);
    const r1 = peer(`recv ${KERNEL} 4303 10 ${SMALL} 5303`);
    await ready(s);
    for (let i = 0; i < 10; i++) await s.send(pattern(i, 100, 1), { address: KERNEL, port: 4303 });
    expect((await r1).code).toBe(0);
    await s.flush({ timeout: 20_000 });
    const reload = await guest('rmmod rds_tcp && rmmod rds && modprobe rds_tcp && echo reloaded');
    expect(reload.out).toContain('reloaded');
    // The reloaded kernel numbers from 1 again and has forgotten us; we keep our numbering.
    const r2 = peer(`recv ${KERNEL} 4303 10 ${SMALL} 5303`);
    await ready(s);
    const want: string[] = [];
    for (let i = 10; i < 20; i++) {
      const d = pattern(i, 100, 1);
      want.push(sha(d));
      await s.send(d, { address: KERNEL, port: 4303 }, { timeout: 30_000 });
    }
    const r = await r2;
    expect(r.code, r.out).toBe(0);
    expect(r.lines.map((l) => l.sha256)).toEqual(want);
    const tx = peer(`send ${KERNEL} 6303 ${SMALL} 5303 10 1000 2`);
    const got: string[] = [];
    for (let i = 0; i < 10; i++) got.push(sha((await s.recv({ timeout: 30_000 })).data));
    const t = await tx;
    expect(got).toEqual(t.lines.filter((l) => 'sha256' in l).map((l) => l.sha256));
    expect(s.recvmsg()).toBeNull();
  });
});

describe('tools against the kernel', () => {
  it("rds-ping gets the kernel's pongs (rds-ping runs as its own node at 10.77.0.4)", async () => {
    const PING = fileURLToPath(new URL('../../dist/cli/rds-ping.js', import.meta.url));
    const r = await new Promise<{ code: number; out: string }>((resolve) => {
      const p = spawn(process.execPath, [PING, '-c', '3', '-i', '0.2', '-I', '10.77.0.4', KERNEL], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      p.stdout.on('data', (d) => (out += d));
      p.stderr.on('data', (d) => (out += d));
      p.on('exit', (code) => resolve({ code: code ?? 1, out }));
    });
    expect(r.code, r.out).toBe(0);
    const lines = r.out.split('\n').filter((l) => /^\s*\d+: \d+ usec$/.test(l));
    expect(lines.length).toBe(3);
  });
});

describe('the kernel sees nothing from rds-socket that a kernel peer would not cause', () => {
  const stack = smallNode;

  it('RDS_INFO_COUNTERS before and after a session (messages both ways, a reconnect)', async () => {
    const s = await bound(stack, SMALL, 5330);
    const before = await kernelCounters();
    const N = 20;
    const exchange = async (round: number): Promise<void> => {
      const rx = peer(`recv ${KERNEL} 4330 ${N} ${SMALL} 5330`);
      await ready(s);
      for (let i = 0; i < N; i++)
        await s.send(pattern(i, 100 + i * 50, round), { address: KERNEL, port: 4330 }, { timeout: 30_000 });
      const r = await rx;
      expect(r.code, r.out).toBe(0);
      const tx = peer(`send ${KERNEL} 6330 ${SMALL} 5330 ${N} 5000 ${round}`);
      for (let i = 0; i < N; i++) await s.recv({ timeout: 30_000 });
      expect((await tx).code).toBe(0);
      // Everything we sent is acknowledged before the connection is cut: a kernel resends what
      // it had in flight too, and the receiver drops those as old sequence numbers, so in-flight
      // messages at the cut would make recv_drop_old_seq rise for a kernel peer as well.
      await s.flush({ timeout: 30_000 });
    };
    await exchange(1);
    const kill = await guest(`modprobe tcp_diag; ss -K dst ${SMALL} >/dev/null; echo '{"killed":1}'`);
    expect(kill.code, kill.out).toBe(0);
    await exchange(2);
    const after = await kernelCounters();
    const d = (k: string): number => (after[k] ?? 0) - (before[k] ?? 0);
    // Each exchange: N data messages from us, plus the readiness messages the kernel side sent us.
    expect(d('recv_delivered')).toBe(2 * N);
    expect(d('conn_reset')).toBeGreaterThanOrEqual(1);
    // Nothing a kernel peer never causes: no checksum drops, no messages for unbound ports or dying
    // sockets, no ACK_REQUIRED (RDS/TCP has no RDS acks) ...
    for (const k of ['recv_drop_bad_checksum', 'recv_drop_no_sock', 'recv_drop_dead_sock', 'recv_ack_required']) {
      expect(d(k), k).toBe(0);
    }
    // ... and no message with an old sequence number: nothing was in flight at the cut, so only a
    // frame that is not a real message (a sequence-0 RETRANSMITTED hello) would be dropped here.
    expect(d('recv_drop_old_seq'), 'recv_drop_old_seq').toBe(0);
  });
});
