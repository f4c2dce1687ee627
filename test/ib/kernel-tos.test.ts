import { type ChildProcess, spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants } from '../../lib/index.js';
import { pattern } from '../interop/kernel-lib.js';
import { KCTL_SET, KERNEL_ADDRS, LOCAL_ADDRS, kernel, kernelLogClean } from './kernel-ctl.js';

// A connection per TOS against the kernel's RDS/IB (issue 38). rds_rdma keys its connections by
// (laddr, faddr, transport, tos), puts the TOS in the connect private data (dp_tos), sets it as
// the cm id's service type before resolving the route, and the accepting side makes the
// connection of the TOS it received. Here each side connects with a TOS of its own: a kernel
// socket with TOS 5 sends to us, we send with TOS 7 to a kernel socket; both sides then show a
// connection with that TOS (our connections(), the kernel's RDS_INFO_CONNECTIONS and
// RDS_INFO_IB_CONNECTIONS, its "conn connected <laddr,faddr,tos>" log line), and on the wire
// (RoCEv2 over the guests' link) each connecting side's packets carry the TOS in their IP header,
// as the traffic class rdma_cm takes from the service type. Runs in the peer guest of
// test/ib/run.sh, on the pair K1/L1.
const [KA] = KERNEL_ADDRS;
const [LA] = LOCAL_ADDRS;
const PEER = 'python3 test/interop/guest/rdspeer.py';
const { SIOCRDSSETTOS, SIOCRDSGETTOS } = constants;

let stack: RdsStack;
const open: RdsSocket[] = [];

async function bound(port: number): Promise<RdsSocket> {
  const s = new RdsSocket({ stack, transport: 'ib' });
  await s.bind({ address: LA, port });
  open.push(s);
  return s;
}

/** tcpdump of the RoCEv2 packets on the link to the kernel guest: the IP TOS of each, by direction. */
function sniff(): { ready: Promise<void>; stop: () => Promise<Map<string, Set<number>>> } {
  const p: ChildProcess = spawn('tcpdump', ['-i', 'eth0', '-n', '-v', '-l', 'udp', 'port', '4791'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  p.stdout!.on('data', (d: Buffer) => (out += d));
  const ready = new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`tcpdump did not start: ${err}`)), 30_000);
    p.stderr!.on('data', (d: Buffer) => {
      err += d;
      if (err.includes('listening on')) {
        clearTimeout(t);
        resolve();
      }
    });
  });
  const stop = async (): Promise<Map<string, Set<number>>> => {
    const exited = new Promise((r) => p.on('exit', r));
    p.kill('SIGINT');
    await exited;
    // -v prints "IP (tos 0x5, ttl ...)" and on the next line "SRC.PORT > DST.4791: UDP ...".
    const byDir = new Map<string, Set<number>>();
    const lines = out.split('\n');
    for (let i = 0; i + 1 < lines.length; i++) {
      const tos = /^\S+ IP \(tos (0x[0-9a-f]+)/.exec(lines[i]!);
      const dir = /^\s+(\d+\.\d+\.\d+\.\d+)\.\d+ > (\d+\.\d+\.\d+\.\d+)\.4791:/.exec(lines[i + 1]!);
      if (tos === null || dir === null) continue;
      const k = `${dir[1]}>${dir[2]}`;
      if (!byDir.has(k)) byDir.set(k, new Set());
      byDir.get(k)!.add(Number(tos[1]));
    }
    return byDir;
  };
  return { ready, stop };
}

beforeAll(async () => {
  expect(KCTL_SET, 'RDS_IB_KCTL (host:port of kctl.py) must be set; run through npm run test:ib').toBe(true);
  stack = new RdsStack();
  stack.on('error', () => {});
});

afterAll(async () => {
  for (const s of open) await s.close();
  await stack?.close();
});

describe('SIOCRDSSETTOS over IB against the kernel (rds_rdma): a connection per TOS', () => {
  it('kernel TOS 5 to us and our TOS 7 to the kernel: both sides key a connection by each TOS, on the wire too', async () => {
    const tap = sniff();
    await tap.ready;
    // The kernel connects with TOS 5: our accepting side keys the connection by dp_tos.
    const rx = await bound(6500);
    const N = 8;
    const from = kernel(`RDSPEER_TOS=5 DRAIN_S=20 ${PEER} send ${KA} 7500 ${LA} 6500 ${N} 9000 5`, 120);
    const got: Buffer[] = [];
    for (let i = 0; i < N; i++) got.push((await rx.recv({ timeout: 60_000 })).data);
    const f = await from;
    expect(f.code, f.out).toBe(0);
    expect(f.lines.find((l) => 'tos_set' in l)).toEqual({ tos_set: 5, tos_kept: 5 });
    const sent = f.lines.filter((l) => 'sha256' in l);
    expect(got.map((d) => d.length)).toEqual(sent.map((l) => l.len));
    for (let i = 0; i < N; i++) expect(got[i]!.equals(pattern(i, got[i]!.length, 5))).toBe(true);

    // We connect with TOS 7 to a kernel socket of TOS 0: the kernel's passive side keys it by 7.
    const tx = await bound(6501);
    expect(tx.ioctl(SIOCRDSSETTOS, 7)).toBe(0);
    expect(tx.ioctl(SIOCRDSGETTOS)).toBe(7);
    const recv = kernel(`${PEER} recv ${KA} 7501 ${N} ${LA} 6501`, 120);
    expect((await tx.recv({ timeout: 60_000 })).data.toString()).toBe('ready');
    const mine: number[] = [];
    for (let i = 0; i < N; i++) {
      const data = pattern(i, 100 + i * 1500, 7);
      mine.push(data.length);
      await tx.send(data, { address: KA, port: 7501 }, { timeout: 60_000 });
    }
    const r = await recv;
    expect(r.code, r.out).toBe(0);
    expect(r.lines.map((l) => l.len)).toEqual(mine);

    // Ours: a connection for each TOS to the kernel, up, the TOS-5 one accepted, the TOS-7 one made.
    const conns = stack.connections().filter((c) => c.localAddress === LA && c.peerAddress === KA);
    const byTos = new Map(conns.map((c) => [c.tos, c]));
    expect(byTos.get(5)?.paths[0]).toMatchObject({ state: 'UP', transport: { established: true, peer: 'kernel' } });
    expect(byTos.get(7)?.paths[0]).toMatchObject({ state: 'UP', transport: { established: true, peer: 'kernel' } });
    // ... and the records rds-info reads (RDS_INFO_CONNECTIONS' c_tos, RDS_INFO_IB_CONNECTIONS' tos).
    const buf = Buffer.alloc(1 << 14);
    const ci = rx.getsockopt(constants.SOL_RDS, constants.RDS_INFO_CONNECTIONS, buf);
    const tosOf = (each: number, n: number, off: number): number[] =>
      Array.from({ length: n / each }, (_, i) => buf[i * each + off]!);
    expect(tosOf(42, ci.length, 41)).toEqual(expect.arrayContaining([5, 7]));
    const ib = rx.getsockopt(constants.SOL_RDS, constants.RDS_INFO_IB_CONNECTIONS, buf);
    expect(tosOf(68, ib.length, 60)).toEqual(expect.arrayContaining([5, 7]));

    // The kernel's: the same two connections, each with its TOS.
    const k = await kernel(`${PEER} conns`, 30);
    expect(k.code, k.out).toBe(0);
    const kc = k.lines.filter((l) => !l.ib && l.laddr === KA && l.faddr === LA && l.transport === 'infiniband');
    expect(kc.map((l) => l.tos)).toEqual(expect.arrayContaining([5, 7]));
    const kib = k.lines.filter((l) => l.ib && l.laddr === KA && l.faddr === LA);
    expect(kib.map((l) => l.tos)).toEqual(expect.arrayContaining([5, 7]));
    const log = await kernel(`dmesg | grep -E "conn connected <::ffff:${KA},::ffff:${LA},(5|7)>"`, 10);
    expect(log.out, 'the kernel made its TOS-5 connection and accepted our TOS-7 one').toMatch(
      new RegExp(`Active conn connected <::ffff:${KA},::ffff:${LA},5>`),
    );
    expect(log.out).toMatch(new RegExp(`Passive conn connected <::ffff:${KA},::ffff:${LA},7>`));

    // On the wire: the connecting side's packets carry its TOS as the IP TOS (the traffic class
    // rdma_cm derives from the service type).
    const wire = await tap.stop();
    expect([...(wire.get(`${LA}>${KA}`) ?? [])], JSON.stringify([...wire])).toContain(7);
    expect([...(wire.get(`${KA}>${LA}`) ?? [])], JSON.stringify([...wire])).toContain(5);
    expect(await kernelLogClean()).toBe('');
  });
});
