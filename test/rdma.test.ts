import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RdsSocket, RdsStack, constants as C, wire } from '../lib/index.js';
import { TEST_TCP_PORT } from './helpers.js';

// RDS's RDMA operations: what a TCP socket answers (the kernel's RDS/TCP has no get_mr and no
// xmit_rdma: EOPNOTSUPP; cookies it never issued: EINVAL), and the RDMA extension records.

describe('RDMA calls on a TCP socket fail as the kernel fails them', () => {
  let A: RdsStack;
  let a: RdsSocket;
  let b: RdsSocket;
  beforeAll(async () => {
    A = new RdsStack({ tcpPort: TEST_TCP_PORT });
    a = new RdsSocket({ stack: A, transport: 'tcp' });
    b = new RdsSocket({ stack: A, transport: 'tcp' });
    await a.bind({ address: '127.151.0.1', port: 4000 });
    await b.bind({ address: '127.151.0.2', port: 4000 });
  });
  afterAll(async () => {
    await A.close();
  });

  it('getMr on an unbound socket is ENOTCONN (bind chooses the transport that registers memory)', () => {
    const s = new RdsSocket({ stack: A });
    expect(() => s.getMr(Buffer.alloc(64))).toThrow(
      expect.objectContaining({ code: 'ENOTCONN', message: expect.stringMatching(/bind/) }),
    );
    s.close();
  });

  it('getMr / RDS_GET_MR / RDS_GET_MR_FOR_DEST are EOPNOTSUPP and say TCP cannot register memory', () => {
    const buf = Buffer.alloc(4096);
    const tcpRefusal = expect.objectContaining({
      code: 'EOPNOTSUPP',
      message: expect.stringMatching(/TCP.*register memory/),
    });
    expect(() => a.getMr(buf, { flags: C.RDS_RDMA_USE_ONCE })).toThrow(tcpRefusal);
    expect(() => a.setsockopt(C.SOL_RDS, C.RDS_GET_MR, { buffer: buf, flags: C.RDS_RDMA_READWRITE })).toThrow(
      tcpRefusal,
    );
    expect(() =>
      a.setsockopt(C.SOL_RDS, C.RDS_GET_MR_FOR_DEST, { buffer: buf, dest: { address: '127.151.0.2', port: 4000 } }),
    ).toThrow(tcpRefusal);
  });

  it('argument errors come first: empty or oversized memory, unknown flags, a bad dest', () => {
    expect(() => a.getMr(Buffer.alloc(0))).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(() => a.getMr(Buffer.alloc(C.RDS_MAX_MSG_SIZE + 1))).toThrow(expect.objectContaining({ code: 'EMSGSIZE' }));
    expect(() => a.getMr(Buffer.alloc(8), { flags: 0x100 })).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/USE_ONCE/) }),
    );
    expect(() => a.getMr('x' as unknown as Buffer)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(() => a.getMr(Buffer.alloc(8), { dest: { address: 'nope', port: 1 } })).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    expect(() => a.setsockopt(C.SOL_RDS, C.RDS_GET_MR_FOR_DEST, { buffer: Buffer.alloc(8) })).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/dest/) }),
    );
  });

  it('freeMr of a cookie the socket never issued, or of 0n (flush), is EINVAL as in rds_free_mr', () => {
    expect(() => a.freeMr(0x1234n)).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/no memory region/) }),
    );
    expect(() => a.freeMr(0n, { invalidate: true })).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/tcp/) }),
    );
    expect(() => a.setsockopt(C.SOL_RDS, C.RDS_FREE_MR, { cookie: 5n, flags: C.RDS_RDMA_INVALIDATE })).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    expect(() => a.setsockopt(C.SOL_RDS, C.RDS_FREE_MR, { cookie: 5n, flags: C.RDS_RDMA_USE_ONCE })).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/RDS_RDMA_INVALIDATE/) }),
    );
    expect(() => a.freeMr(-1n)).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/u64/) }),
    );
    expect(() => a.freeMr(5 as unknown as bigint)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
  });

  it('sendmsg with rdma is EOPNOTSUPP and nothing is queued; bad arguments are EINVAL/EMSGSIZE first', () => {
    const dest = { address: '127.151.0.2', port: 4000 };
    const rdma = { cookie: 0x100000abcn, local: [Buffer.alloc(32)], write: true, notify: true };
    expect(() => a.sendmsg(Buffer.from('x'), dest, { rdma })).toThrow(
      expect.objectContaining({ code: 'EOPNOTSUPP', message: expect.stringMatching(/RDMA_ARGS.*TCP/) }),
    );
    expect(() => a.sendmsg(Buffer.from('x'), dest, { rdma: { ...rdma, local: [] } })).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    expect(() => a.sendmsg(Buffer.from('x'), dest, { rdma: { ...rdma, write: 1 as unknown as boolean } })).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/write/) }),
    );
    expect(() =>
      a.sendmsg(Buffer.from('x'), dest, {
        rdma: { ...rdma, local: [Buffer.alloc(C.RDS_MAX_MSG_SIZE), Buffer.alloc(1)] },
      }),
    ).toThrow(expect.objectContaining({ code: 'EMSGSIZE' }));
    expect(() => a.sendmsg(Buffer.from('x'), dest, { rdma: { ...rdma, remoteOffset: -1 } })).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    expect(() => a.sendmsg(Buffer.from('x'), dest, { rdma, rdmaDest: 1n })).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/rdmaDest/) }),
    );
    expect(() => a.sendmsg(Buffer.from('x'), dest, { rdmaDest: 0x42n })).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/no memory region/) }),
    );
  });

  it('sendmsg with atomic (FADD/CSWP) is EOPNOTSUPP on TCP after its argument checks (EINVAL), nothing queued', () => {
    const dest = { address: '127.151.0.2', port: 4000 };
    const atomic = { op: 'fadd' as const, cookie: 0x1234n, local: Buffer.alloc(8), add: 1n, notify: true };
    expect(() => a.sendmsg(Buffer.from('x'), dest, { atomic })).toThrow(
      expect.objectContaining({ code: 'EOPNOTSUPP', message: expect.stringMatching(/ATOMIC.*TCP/) }),
    );
    expect(() => a.sendmsg(Buffer.from('x'), dest, { atomic: { ...atomic, local: Buffer.alloc(4) } })).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/8-byte/) }),
    );
    // Masked atomics: rds-socket refuses them outright (EOPNOTSUPP), before the argument checks;
    // an op it does not know stays EINVAL.
    expect(() =>
      a.sendmsg(Buffer.from('x'), dest, { atomic: { ...atomic, local: Buffer.alloc(4), op: 'masked-fadd' } }),
    ).toThrow(expect.objectContaining({ code: 'EOPNOTSUPP', message: expect.stringMatching(/masked atomics/) }));
    expect(() =>
      a.sendmsg(Buffer.from('x'), dest, { atomic: { ...atomic, op: 'fadd-ish' as unknown as 'fadd' } }),
    ).toThrow(expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/'fadd' or 'cswp'/) }));
  });

  it('nothing was queued by the refused sends: the next message is the first b receives', async () => {
    a.sendmsg(Buffer.from('after'), b.address());
    const m = await b.recv({ timeout: 10000 });
    expect(m.data.toString()).toBe('after');
  });
});

describe('RDMA calls on a socket attached to a host node', () => {
  it('are refused in the process (the node cannot register its memory) and never reach the node', async () => {
    const node = new RdsStack({ tcpPort: TEST_TCP_PORT });
    const dir = mkdtempSync(join(tmpdir(), 'rds-rdma-test-'));
    const path = join(dir, 'node.sock');
    await node.serve({ path });
    const attached = await RdsStack.attach(path);
    try {
      const s = new RdsSocket({ stack: attached, transport: 'tcp' });
      expect(() => s.getMr(Buffer.alloc(64))).toThrow(expect.objectContaining({ code: 'ENOTCONN' }));
      await s.bind({ address: '127.151.1.1', port: 4000 });
      const peer = new RdsSocket({ stack: node });
      await peer.bind({ address: '127.151.1.2', port: 4000 });
      const tcpRefusal = expect.objectContaining({ code: 'EOPNOTSUPP', message: expect.stringMatching(/TCP/) });
      expect(() => s.getMr(Buffer.alloc(64), { flags: C.RDS_RDMA_READWRITE })).toThrow(tcpRefusal);
      expect(() => s.setsockopt(C.SOL_RDS, C.RDS_GET_MR, { buffer: Buffer.alloc(64) })).toThrow(tcpRefusal);
      expect(() => s.freeMr(9n)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
      expect(() =>
        s.sendmsg(Buffer.from('x'), peer.address(), { rdma: { cookie: 1n, local: [Buffer.alloc(8)], write: false } }),
      ).toThrow(tcpRefusal);
      expect(() => s.sendmsg(Buffer.from('x'), peer.address(), { rdmaDest: 3n })).toThrow(
        expect.objectContaining({ code: 'EINVAL' }),
      );
      const rdmaMap: { buffer: Buffer; cookie?: bigint } = { buffer: Buffer.alloc(64) };
      expect(() => s.sendmsg(Buffer.from('x'), peer.address(), { rdmaMap })).toThrow(tcpRefusal);
      expect(rdmaMap.cookie).toBeUndefined();
      expect(() => s.sendmsg(Buffer.from('x'), peer.address(), { rdmaMap, rdmaDest: 3n })).toThrow(
        expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/rdmaMap and rdmaDest/) }),
      );
      expect(() =>
        s.sendmsg(Buffer.from('x'), peer.address(), {
          atomic: { op: 'masked-cswp', cookie: 1n, local: Buffer.alloc(8), compareMask: 1n },
        }),
      ).toThrow(expect.objectContaining({ code: 'EOPNOTSUPP', message: expect.stringMatching(/masked atomics/) }));
      s.sendmsg(Buffer.from('plain'), peer.address());
      expect((await peer.recv({ timeout: 10000 })).data.toString()).toBe('plain');
    } finally {
      await attached.close();
      await node.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('RDMA extension records (spec §1.4)', () => {
  it('cookie = (offset << 32) + rkey, split back into its halves', () => {
    const c = wire.rdmaCookie(0xdeadbeef, 0x1234);
    expect(c).toBe(0x1234deadbeefn);
    expect(wire.cookieRkey(c)).toBe(0xdeadbeef);
    expect(wire.cookieOffset(c)).toBe(0x1234);
    expect(wire.cookieOffset(wire.rdmaCookie(1, 0xffffffff))).toBe(0xffffffff);
  });

  it('RDMA, RDMA_DEST and RDMA_BYTES encode byte for byte and parse back', () => {
    const area = wire.packExtensions([wire.rdmaExtension(0x01020304), wire.rdmaBytesExtension(0x10000, true)]);
    expect([...area.subarray(0, 14)]).toEqual([2, 1, 2, 3, 4, 4, 0, 1, 0, 0, 1, 0, 0, 0]);
    expect(area[14]).toBe(0);
    const d = wire.decodeRdmaExtensions(wire.parseExtensions(area));
    expect(d).toEqual({ rkey: 0x01020304, bytes: { count: 0x10000, write: true, read: false } });

    const dest = wire.packExtensions([wire.rdmaDestExtension(wire.rdmaCookie(0xaabbccdd, 0x10))]);
    expect([...dest.subarray(0, 9)]).toEqual([3, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 0x10]);
    expect(wire.decodeRdmaExtensions(wire.parseExtensions(dest))).toEqual({ destCookie: 0x10aabbccddn });
    const rd = wire.decodeRdmaExtensions([wire.rdmaBytesExtension(7, false)]);
    expect(rd.bytes).toEqual({ count: 7, write: false, read: true });
  });

  it('a kernel-built area (RDMA_DEST first, then NONE) yields only the cookie', () => {
    const area = new Uint8Array(16);
    area.set([3, 0, 0, 0x12, 0x34, 0, 0, 0, 8]);
    expect(wire.decodeRdmaExtensions(wire.parseExtensions(area))).toEqual({ destCookie: (8n << 32n) | 0x1234n });
  });
});
