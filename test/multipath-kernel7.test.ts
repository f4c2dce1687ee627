import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, wire as w, type ConnectionInfo } from '../lib/index.js';
import { connect } from 'node:net';
import { RawConn, RawListener } from './raw-peer.js';
import { TEST_TCP_PORT, until } from './helpers.js';

// A peer that behaves as a 7.x kernel: it sends SPORT_IDX (it pairs by source port) and no
// rds-socket capabilities. rds-socket then runs its real path count with it (spec §3.6); kernels
// without SPORT_IDX keep one path (multipath.test.ts).

let cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

const conn = (s: RdsStack): ConnectionInfo => s.connections().find((c) => c.transport === 'tcp')!;
const isProbe = (f: { header: w.RdsHeader }): boolean => f.header.sport === 1 && f.header.dport === 0;
const npathsOf = (f: { header: w.RdsHeader }): number | undefined =>
  w.decodeHandshake(w.parseExtensions(f.header.exthdr)).npaths;
/** A 7.x kernel's handshake extensions: NPATHS=8, GEN_NUM, SPORT_IDX. */
const kernel7 = (): Uint8Array =>
  w.packExtensions([w.npathsExtension(8), w.genNumExtension(0x7007), w.sportIdxExtension()]);

describe('multipath with a kernel that sends SPORT_IDX (7.x)', () => {
  it('rds-socket connects: NPATHS is raised by a second probe, and lanes open only after its pong, from ports = path (mod 8)', async () => {
    const base = '127.27.250';
    const peer = await RawListener.listen(`${base}.2`, TEST_TCP_PORT, false);
    cleanups.push(() => peer.close());
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 20 });
    cleanups.push(() => A.close());
    const a = new RdsSocket({ stack: A });
    await a.bind({ address: `${base}.1`, port: 4000 });
    a.sendmsg(Buffer.from('x'), { address: `${base}.2`, port: 4000 });
    const c = await peer.accept(0);
    const probe1 = await c.nextMatching(isProbe);
    // The kernel has not said yet what it is: no count, so it keeps the one it has (1 if none).
    expect(npathsOf(probe1)).toBeUndefined();
    c.send({ sequence: 1, sport: 0, dport: 1, exthdr: kernel7() });
    // The pong told us SPORT_IDX: a second probe carries our real count ...
    const probe2 = await c.nextMatching(isProbe);
    expect(npathsOf(probe2)).toBe(8);
    // ... and no lane connects before the kernel has answered it (it still runs one path).
    expect(conn(A).npaths).toBe(8);
    expect(
      conn(A)
        .paths.slice(1)
        .every((p) => p.state === 'DOWN'),
    ).toBe(true);
    expect(peer.conns.length).toBe(1);
    c.send({ sequence: 2, sport: 0, dport: 1, exthdr: kernel7() });
    await peer.accept(7);
    await until(() => conn(A).paths.every((p) => p.state === 'UP'), '8 paths up');
    const lanes = peer.conns.map((k) => k.sock.remotePort! % 8).sort();
    expect(lanes).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    // A lane starts with its congestion map, never with the unsequenced hello rds-socket peers
    // get (a kernel counts that in recv_drop_old_seq).
    for (const k of peer.conns.slice(1)) expect((await k.next()).header).toMatchObject({ flags: 1 });
    // A message on a lane is released once TCP has it, though the kernel sends nothing there.
    let port = 4001;
    while (((Math.imul(port, 0x9e3779b1) >>> 16) & 0xffff) % 8 === 0) port++;
    const b = new RdsSocket({ stack: A });
    await b.bind({ address: `${base}.1`, port });
    await b.send(Buffer.from('on a lane'), { address: `${base}.2`, port: 4000 });
    await b.flush({ timeout: 5000 });
    expect(conn(A).paths[0]!.sentMessages).toBeLessThan(conn(A).paths.reduce((n, p) => n + p.sentMessages, 0));
  });

  it('the kernel connects: our pong to its probe carries our real count, and its lanes pair by source port', async () => {
    const base = '127.27.251';
    const A = new RdsStack({ tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 20 });
    cleanups.push(() => A.close());
    const a = new RdsSocket({ stack: A });
    await a.bind({ address: `${base}.2`, port: 4000 });
    // The kernel (smaller address) connects path 0 from a port = 0 (mod 8) and probes.
    const lane = async (i: number): Promise<RawConn> => {
      for (let g = 0; g < 200; g++) {
        const port = 40000 + 8 * g + i;
        try {
          const s = connect({ host: `${base}.2`, port: TEST_TCP_PORT, localAddress: `${base}.1`, localPort: port });
          await new Promise<void>((res, rej) => {
            s.once('connect', res);
            s.once('error', rej);
          });
          cleanups.push(async () => void s.destroy());
          return new RawConn(s, false);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw e;
        }
      }
      throw new Error(`no free port for lane ${i}`);
    };
    const c0 = await lane(0);
    c0.send({ sequence: 1, sport: 1, dport: 0, exthdr: kernel7() });
    const pong = await c0.nextMatching((f) => f.header.sport === 0 && f.header.dport === 1);
    expect(npathsOf(pong)).toBe(8);
    expect(conn(A).npaths).toBe(8);
    // Lanes connected in reverse order land on path source port % 8 all the same.
    const lanes: RawConn[] = [];
    for (let i = 7; i >= 1; i--) lanes.push(await lane(i));
    await until(() => conn(A).paths.every((p) => p.state === 'UP'), '8 paths up');
    for (const [k, l] of lanes.entries()) {
      const i = 7 - k;
      l.send({ sequence: 1, sport: 5000 + i, dport: 4000 }, Buffer.from(`lane ${i}`));
    }
    const got = new Set<string>();
    for (let i = 0; i < 7; i++) got.add((await a.recv({ timeout: 5000 })).data.toString());
    expect(got.size).toBe(7);
    for (let i = 1; i < 8; i++) expect(conn(A).paths[i]!.recvMessages, `path ${i}`).toBe(1);
  });
});
