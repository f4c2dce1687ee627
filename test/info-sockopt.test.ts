import { afterEach, describe, expect, it } from 'vitest';
import { RDS_COUNTER_NAMES, type RdsError, RdsInfoSpaceError, RdsSocket, RdsStack, constants } from '../lib/index.js';
import { infoRecords } from '../lib/core/info-sockopt.js';
import type { StackInfo } from '../lib/core/info.js';
import { makePair, type Pair, timeout, TEST_TCP_PORT, until } from './helpers.js';

// getsockopt(SOL_RDS, RDS_INFO_*) (issue 38): the kernel's records, read the way rds-info reads
// them (probe with an empty buffer, ENOSPC with the length needed, then the records), decoded
// here by hand from the uapi layouts so an encoder that drifts from them fails.
const { SOL_RDS } = constants;
const NET = 138;

/** The kernel's two-step read: probe (ENOSPC, length needed), then a buffer of that length. */
function readInfo(s: RdsSocket, optname: number): { each: number; buf: Buffer } {
  let need = 0;
  try {
    const r = s.getsockopt(SOL_RDS, optname, Buffer.alloc(0));
    return { each: r.recordSize, buf: Buffer.alloc(0) };
  } catch (e) {
    expect(e).toBeInstanceOf(RdsInfoSpaceError);
    expect((e as RdsError).code).toBe('ENOSPC');
    need = (e as RdsInfoSpaceError).length;
  }
  const buf = Buffer.alloc(need + 7, 0xee);
  const r = s.getsockopt(SOL_RDS, optname, buf);
  expect(r.length).toBe(need);
  expect(r.length % r.recordSize).toBe(0);
  // Nothing past the records is touched.
  expect(buf.subarray(need).every((b) => b === 0xee)).toBe(true);
  return { each: r.recordSize, buf: buf.subarray(0, need) };
}

function records(r: { each: number; buf: Buffer }): Buffer[] {
  const out: Buffer[] = [];
  for (let o = 0; o < r.buf.length; o += r.each) out.push(r.buf.subarray(o, o + r.each));
  return out;
}

const ip4 = (b: Buffer, off: number): string => [...b.subarray(off, off + 4)].join('.');
const cstr = (b: Buffer, off: number, n: number): string => {
  const s = b.subarray(off, off + n);
  const z = s.indexOf(0);
  return s.subarray(0, z < 0 ? n : z).toString('latin1');
};

describe('getsockopt(SOL_RDS, RDS_INFO_*)', () => {
  let pair: Pair | null = null;
  let host = 0;
  const extra: RdsStack[] = [];
  afterEach(async () => {
    await pair?.close();
    pair = null;
    for (const s of extra.splice(0)) await s.close();
  });

  it('RDS_INFO_COUNTERS on an unbound socket: every counter, named and valued as the stack counts', async () => {
    pair = await makePair('tcp', NET, ++host);
    await pair.a.send(Buffer.from('x'), pair.b.address(), { signal: timeout() });
    await pair.b.recv({ signal: timeout() });
    const s = new RdsSocket({ stack: pair.stackA });
    const r = readInfo(s, constants.RDS_INFO_COUNTERS);
    expect(r.each).toBe(40);
    const recs = records(r);
    expect(recs.map((b) => cstr(b, 0, 32))).toEqual([...RDS_COUNTER_NAMES]);
    const snap = pair.stackA.stats().counters;
    for (const b of recs) expect(Number(b.readBigUInt64LE(32))).toBe(snap[cstr(b, 0, 32) as keyof typeof snap]);
    expect(recs.some((b) => b.readBigUInt64LE(32) > 0n)).toBe(true);
    await s.close();
  });

  it('RDS_INFO_SOCKETS / RDS6_INFO_SOCKETS: each bound socket with its budgets, ports and connect()ed peer', async () => {
    pair = await makePair('tcp', NET, ++host);
    const a = pair.a.address();
    const b = pair.b.address();
    pair.a.connect(b);
    const r = records(readInfo(pair.a, constants.RDS_INFO_SOCKETS));
    expect(r).toHaveLength(1);
    const rec = r[0]!;
    expect(rec.length).toBe(28);
    expect(rec.readUInt32LE(0)).toBe(pair.a.getsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF) / 2);
    expect(ip4(rec, 4)).toBe(a.address);
    expect(ip4(rec, 8)).toBe(b.address);
    expect(rec.readUInt16BE(12)).toBe(a.port);
    expect(rec.readUInt16BE(14)).toBe(b.port);
    expect(rec.readUInt32LE(16)).toBe(pair.a.getsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF) / 2);
    expect(Number(rec.readBigUInt64LE(20))).toBe(pair.a.info().inode);
    const r6 = records(readInfo(pair.a, constants.RDS6_INFO_SOCKETS));
    expect(r6).toHaveLength(1);
    expect(r6[0]!.length).toBe(52);
    // IPv4 as v4-mapped in6 addresses.
    expect(r6[0]!.subarray(4, 20).toString('hex')).toBe(
      `00000000000000000000ffff${Buffer.from(a.address.split('.').map(Number)).toString('hex')}`,
    );
    expect(r6[0]!.readUInt16BE(36)).toBe(a.port);
  });

  it('RDS_INFO_CONNECTIONS / TCP_SOCKETS / RECV_MESSAGES after traffic: one record each, as the stack shows', async () => {
    pair = await makePair('tcp', NET, ++host);
    const a = pair.a.address();
    const b = pair.b.address();
    await pair.a.send(Buffer.from('hello'), b, { signal: timeout() });
    await until(() => pair!.b.poll() !== 0 && (pair!.b.poll() & constants.POLLIN) !== 0, 'message queued at b');
    // B has not read it: it is in B's receive queue.
    const rq = records(readInfo(pair.b, constants.RDS_INFO_RECV_MESSAGES));
    expect(rq).toHaveLength(1);
    const m = rq[0]!;
    expect(m.length).toBe(26);
    expect(m.readUInt32LE(8)).toBe(5);
    expect(ip4(m, 12)).toBe(b.address); // laddr: the receiver
    expect(ip4(m, 16)).toBe(a.address);
    expect(m.readUInt16BE(20)).toBe(b.port);
    expect(m.readUInt16BE(22)).toBe(a.port);
    expect(Number(m.readBigUInt64LE(0))).toBe(pair.stackB.info().recvQueue[0]!.seq);

    const conns = records(readInfo(pair.a, constants.RDS_INFO_CONNECTIONS));
    const ci = pair.stackA.connections().find((c) => c.peerAddress === b.address)!;
    const c = conns.find((x) => ip4(x, 20) === b.address)!;
    expect(c.length).toBe(42);
    expect(ip4(c, 16)).toBe(a.address);
    expect(cstr(c, 24, 16)).toBe('tcp');
    expect(c[40]).toBe(0x04); // CONNECTED
    expect(c[41]).toBe(0); // tos
    expect(Number(c.readBigUInt64LE(0))).toBe(ci.paths.find((p) => p.index === 0)!.nextTxSeq);

    const tcp = records(readInfo(pair.a, constants.RDS_INFO_TCP_SOCKETS));
    const t = ci.paths.find((p) => p.index === 0)!.transport as { localPort: number; peerPort: number };
    const rec = tcp.find((x) => x.readUInt16BE(4) === t.localPort)!;
    expect(rec.length).toBe(41);
    expect(ip4(rec, 0)).toBe(a.address);
    expect(ip4(rec, 6)).toBe(b.address);
    expect(rec.readUInt16BE(10)).toBe(t.peerPort);
    // IPv6 forms: the same connection with v4-mapped addresses.
    const c6 = records(readInfo(pair.a, constants.RDS6_INFO_CONNECTIONS));
    expect(c6[0]!.length).toBe(65);
    expect(cstr(c6[0]!, 48, 16)).toBe('tcp');
    expect(records(readInfo(pair.a, constants.RDS6_INFO_TCP_SOCKETS))[0]!.length).toBe(64);
    expect(records(readInfo(pair.b, constants.RDS6_INFO_RECV_MESSAGES))[0]!.length).toBe(50);
  });

  it('RDS_INFO_SEND_MESSAGES: a message queued to a peer that does not answer', async () => {
    pair = await makePair('tcp', NET, ++host);
    const nowhere = { address: `127.${NET}.${host}.9`, port: 4001 };
    pair.a.sendmsg(Buffer.alloc(77), nowhere);
    // The socket's message (the connection may queue its own, such as the multipath probe).
    const info = pair.stackA.info();
    const inSend = info.sendQueue.some((m) => m.peerPort === 4001);
    expect(inSend || info.retransQueue.some((m) => m.peerPort === 4001)).toBe(true);
    const list = inSend ? constants.RDS_INFO_SEND_MESSAGES : constants.RDS_INFO_RETRANS_MESSAGES;
    const all = records(readInfo(pair.a, list));
    expect(all).toHaveLength((inSend ? info.sendQueue : info.retransQueue).length);
    const r = all.filter((x) => x.readUInt16BE(22) === 4001);
    expect(r).toHaveLength(1);
    expect(r[0]!.readUInt32LE(8)).toBe(77);
    expect(ip4(r[0]!, 12)).toBe(pair.a.address().address);
    expect(ip4(r[0]!, 16)).toBe(nowhere.address);
    expect(r[0]!.readUInt16BE(20)).toBe(pair.a.address().port);
  });

  it('RDS_INFO_IB_CONNECTIONS without IB: record size 68 (92 for RDS6), no records', async () => {
    pair = await makePair('tcp', NET, ++host);
    expect(pair.a.getsockopt(SOL_RDS, constants.RDS_INFO_IB_CONNECTIONS, Buffer.alloc(0))).toEqual({
      recordSize: 68,
      length: 0,
    });
    expect(pair.a.getsockopt(SOL_RDS, constants.RDS6_INFO_IB_CONNECTIONS, Buffer.alloc(0))).toEqual({
      recordSize: 92,
      length: 0,
    });
  });

  it('IB records from a stack view: addresses, ring sizes, zeros where the kernel has figures we lack', () => {
    const info: StackInfo = {
      counters: {} as StackInfo['counters'],
      sockets: [],
      sendQueue: [],
      retransQueue: [],
      recvQueue: [],
      connections: [
        {
          localAddress: '10.0.0.1',
          peerAddress: '10.0.0.2',
          // The IB transport's name, as connections() reports it (the kernel's t_name).
          transport: 'infiniband',
          tos: 0x25,
          npaths: 1,
          initiator: true,
          paths: [
            {
              index: 0,
              state: 'UP',
              nextTxSeq: 3,
              nextRxSeq: 4,
              transport: { maxSendWr: 256, maxRecvWr: 1024, maxSendSge: 2 },
            } as never,
          ],
        },
      ],
    };
    const r = infoRecords(info, constants.RDS_INFO_IB_CONNECTIONS)!;
    expect(r.each).toBe(68);
    const b = r.records[0]!;
    expect(ip4(b, 0)).toBe('10.0.0.1');
    expect(ip4(b, 4)).toBe('10.0.0.2');
    expect(b.readUInt32LE(40)).toBe(256);
    expect(b.readUInt32LE(44)).toBe(1024);
    expect(b.readUInt32LE(48)).toBe(2);
    // tos, and sl as rds_rdma derives it from the TOS (its low 4 bits).
    expect([b[60], b[61]]).toEqual([0x25, 0x05]);
    const r6 = infoRecords(info, constants.RDS6_INFO_IB_CONNECTIONS)!;
    expect(r6.records[0]!.length).toBe(92);
    expect(r6.records[0]!.readUInt32LE(64)).toBe(256);
    expect([r6.records[0]![84], r6.records[0]![85]]).toEqual([0x25, 0x05]);
    const c = infoRecords(info, constants.RDS_INFO_CONNECTIONS)!;
    expect(cstr(c.records[0]!, 24, 16)).toBe('infiniband');
    expect(c.records[0]![41]).toBe(0x25); // c_tos
  });

  it('a buffer too small is ENOSPC with the length needed and stays untouched; unknown numbers are ENOPROTOOPT', async () => {
    pair = await makePair('tcp', NET, ++host);
    const small = Buffer.alloc(39, 0xaa);
    let err: unknown;
    try {
      pair.a.getsockopt(SOL_RDS, constants.RDS_INFO_COUNTERS, small);
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ code: 'ENOSPC', length: 40 * RDS_COUNTER_NAMES.length });
    expect(small.every((x) => x === 0xaa)).toBe(true);
    for (const n of [
      constants.RDS_INFO_FLOWS,
      constants.RDS_INFO_CONNECTION_STATS,
      constants.RDS_INFO_IWARP_CONNECTIONS,
    ])
      expect(() => pair!.a.getsockopt(SOL_RDS, n, Buffer.alloc(64))).toThrow(
        expect.objectContaining({ code: 'ENOPROTOOPT' }),
      );
    expect(() => pair!.a.getsockopt(SOL_RDS, constants.RDS_INFO_COUNTERS)).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
  });

  it('works on a socket of a stack with no other socket and no connection (no bind needed)', async () => {
    const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
    extra.push(stack);
    const s = new RdsSocket({ stack });
    expect(s.getsockopt(SOL_RDS, constants.RDS_INFO_SOCKETS, Buffer.alloc(0))).toEqual({ recordSize: 28, length: 0 });
    expect(s.getsockopt(SOL_RDS, constants.RDS_INFO_CONNECTIONS, Buffer.alloc(0))).toEqual({
      recordSize: 42,
      length: 0,
    });
  });

  it.each(['attached', 'attached-process'] as const)(
    "on a socket %s to a host node: rdsInfo() returns the node's records; getsockopt refuses (EOPNOTSUPP)",
    async (kind) => {
      pair = await makePair(kind, NET, ++host);
      const a = pair.a.address();
      await pair.a.send(Buffer.from('to b'), pair.b.address(), { signal: timeout() });
      expect(() => pair!.a.getsockopt(SOL_RDS, constants.RDS_INFO_SOCKETS, Buffer.alloc(0))).toThrow(
        expect.objectContaining({ code: 'EOPNOTSUPP', message: expect.stringMatching(/rdsInfo/) }),
      );
      let need = -1;
      await pair.a.rdsInfo(constants.RDS_INFO_SOCKETS, Buffer.alloc(0)).catch((e: RdsInfoSpaceError) => {
        expect(e.code).toBe('ENOSPC');
        need = e.length;
      });
      expect(need).toBe(28); // node A has one socket: A's
      const buf = Buffer.alloc(need);
      expect(await pair.a.rdsInfo(constants.RDS_INFO_SOCKETS, buf)).toEqual({ recordSize: 28, length: 28 });
      expect(ip4(buf, 4)).toBe(a.address);
      expect(buf.readUInt16BE(12)).toBe(a.port);
      // The node's connection to B, as the node sees it.
      const c = Buffer.alloc(42 * 8);
      const r = await pair.a.rdsInfo(constants.RDS_INFO_CONNECTIONS, c);
      expect(r.recordSize).toBe(42);
      const peers = records({ each: 42, buf: c.subarray(0, r.length) }).map((x) => ip4(x, 20));
      expect(peers).toContain(pair.b.address().address);
      // An unbound socket of the same stack asks the same node.
      const u = new RdsSocket({ stack: pair.stackA });
      const cnt = Buffer.alloc(40 * RDS_COUNTER_NAMES.length);
      expect(await u.rdsInfo(constants.RDS_INFO_COUNTERS, cnt)).toEqual({ recordSize: 40, length: cnt.length });
      await u.close();
      await expect(pair.a.rdsInfo(constants.RDS_INFO_FLOWS, Buffer.alloc(8))).rejects.toMatchObject({
        code: 'ENOPROTOOPT',
      });
    },
  );
});
