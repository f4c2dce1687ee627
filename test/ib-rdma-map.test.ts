import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LoopTransport, RdsSocket, RdsStack, TcpTransport, constants as C } from '../lib/index.js';
import { MrTable, mapRegion, prepareRdmaControl, type RdmaNotifyTarget } from '../lib/core/rdma-ops.js';
import type { RdmaTransport } from '../lib/core/rdma-ops.js';
import type { RdsConnPath } from '../lib/core/path.js';
import type { RdsOutgoing } from '../lib/core/message.js';
import { OFF_EXTHDR } from '../lib/wire/header.js';
import { rdmaCookie } from '../lib/wire/rdma-ext.js';
import { TEST_TCP_PORT } from './helpers.js';

// sendmsg's rdmaMap (RDS_CMSG_RDMA_MAP: register and expose in one call) and the masked atomics
// rds-socket refuses (RDS_CMSG_MASKED_ATOMIC_*), without a device: the socket's transport is TCP
// given a fake memory registration (what the IB transport offers as `rdma`), so the message, its
// RDMA_DEST record and what the peer reads off it are real. The device test (the peer WRITEs and
// READs the mapped region over Soft-RoCE) is in test/ib/rdma.test.ts.

interface Reg {
  laddr: string;
  mem: Uint8Array;
  rw: boolean;
}

/** A fake RdmaTransport: rkey 0x1000 + handle, the buffer at offset 0x24 of its first page. */
function fakeRdma() {
  const live = new Map<number, Reg>();
  let handles = 0;
  let registrations = 0;
  const rdma: RdmaTransport = {
    regMr: (laddr, mem, rw) => {
      const handle = ++handles;
      registrations++;
      live.set(handle, { laddr, mem, rw });
      return { handle, rkey: 0x1000 + handle, offset: 0x24 };
    },
    deregMr: (h) => {
      live.delete(h);
    },
    atomics: () => true,
  };
  return { rdma, live, registrations: () => registrations };
}

/** TCP that registers memory as the IB transport does; records the header of every message it sends. */
class RdmaTcp extends TcpTransport {
  readonly headers: Buffer[] = [];
  constructor(readonly rdma: RdmaTransport) {
    super();
  }
  override xmit(cp: RdsConnPath, msg: RdsOutgoing): boolean {
    this.headers.push(Buffer.from(msg.wire.subarray(0, C.RDS_HEADER_SIZE)));
    return super.xmit(cp, msg);
  }
}

const target: RdmaNotifyTarget = { reportsFailures: false, rdmaDone: () => {} };
const code = (c: string, re?: RegExp) =>
  expect.objectContaining(re === undefined ? { code: c } : { code: c, message: expect.stringMatching(re) });

describe('rdmaMap: checks and the record it puts on the message', () => {
  it('prepareRdmaControl checks the region as getMr does and registers nothing; mapRegion registers, writes the cookie, returns RDMA_DEST', () => {
    const f = fakeRdma();
    const mrs = new MrTable(f.rdma);
    const args: { buffer: Buffer; flags?: number; cookie?: bigint } = {
      buffer: Buffer.alloc(100),
      flags: C.RDS_RDMA_READWRITE | C.RDS_RDMA_USE_ONCE,
    };
    const ctl = prepareRdmaControl({ rdmaMap: args }, mrs, target);
    expect([ctl.exts, ctl.op, ctl.map?.buffer, ctl.map?.flags]).toEqual([[], null, args.buffer, args.flags]);
    expect(f.registrations()).toBe(0);
    expect(args.cookie).toBeUndefined();
    const ext = mapRegion(mrs, '10.0.0.1', ctl.map!);
    const cookie = rdmaCookie(0x1001, 0x24);
    expect(args.cookie).toBe(cookie);
    expect([...f.live.values()]).toEqual([{ laddr: '10.0.0.1', mem: args.buffer, rw: true }]);
    // RDMA_DEST (3): the cookie, big-endian, rkey half first as the kernel's struct rds_ext_header_rdma_dest.
    expect([ext.type, [...ext.data]]).toEqual([C.RDS_EXTHDR_RDMA_DEST, [0, 0, 0x10, 0x01, 0, 0, 0, 0x24]]);
    expect(mrs.has(cookie)).toBe(true);
    mrs.used(0x1001); // USE_ONCE went into the table with the region
    expect(f.live.size).toBe(0);
  });

  it('a cookie that cannot be written (frozen object): EINVAL and the region is released again', () => {
    const f = fakeRdma();
    const mrs = new MrTable(f.rdma);
    const args = Object.freeze({ buffer: Buffer.alloc(10) });
    const ctl = prepareRdmaControl({ rdmaMap: args }, mrs, target);
    expect(() => mapRegion(mrs, '10.0.0.1', ctl.map!)).toThrow(code('EINVAL', /writable/));
    expect([f.registrations(), f.live.size, mrs.size]).toEqual([1, 0, 0]);
  });

  it("getMr's argument errors with getMr's codes, naming rdmaMap; mixing with rdmaDest, rdma or atomic is EINVAL first", () => {
    const mrs = new MrTable(fakeRdma().rdma);
    const bad = (o: object, c: string, re: RegExp) =>
      expect(() => prepareRdmaControl(o, mrs, target)).toThrow(code(c, re));
    bad({ rdmaMap: { buffer: Buffer.alloc(0) } }, 'EINVAL', /rdmaMap cannot register an empty buffer/);
    bad({ rdmaMap: { buffer: 'x' } }, 'EINVAL', /rdmaMap needs a Buffer/);
    bad({ rdmaMap: { buffer: Buffer.alloc(C.RDS_MAX_MSG_SIZE + 1) } }, 'EMSGSIZE', /RDS_MAX_MSG_SIZE/);
    bad({ rdmaMap: { buffer: Buffer.alloc(8), flags: C.RDS_RDMA_NOTIFY_ME } }, 'EINVAL', /rdmaMap flags take/);
    bad({ rdmaMap: Buffer.alloc(8) as never }, 'EINVAL', /rdmaMap needs a Buffer/);
    bad({ rdmaMap: 5 }, 'EINVAL', /rdmaMap must be an object/);
    const map = { buffer: Buffer.alloc(0) }; // a bad region too: the mix is reported first
    bad({ rdmaMap: map, rdmaDest: 1n }, 'EINVAL', /rdmaMap and rdmaDest/);
    bad(
      { rdmaMap: map, rdma: { cookie: 1n, local: [Buffer.alloc(1)], write: true } },
      'EINVAL',
      /rdmaMap cannot go with rdma/,
    );
    bad(
      { rdmaMap: map, atomic: { op: 'fadd', cookie: 1n, local: Buffer.alloc(8) } },
      'EINVAL',
      /rdmaMap cannot go with atomic/,
    );
  });
});

describe('masked atomics: EOPNOTSUPP before anything else', () => {
  it('masked-fadd / masked-cswp are EOPNOTSUPP saying so, even with bad fields or mixed with rdma; unknown ops stay EINVAL', () => {
    const mrs = new MrTable(fakeRdma().rdma);
    const masked = /masked atomics are not supported by rds-socket.*'fadd' or 'cswp'/;
    const local = Buffer.alloc(8);
    for (const op of ['masked-fadd', 'masked-cswp']) {
      const atomic = { op, cookie: 0x77n, local, compareMask: 1n, swapMask: 1n, nocarryMask: 1n };
      expect(() => prepareRdmaControl({ atomic } as never, mrs, target, () => true)).toThrow(
        code('EOPNOTSUPP', masked),
      );
      expect(() =>
        prepareRdmaControl({ atomic: { op, local: 'junk' }, rdmaDest: 1n } as never, mrs, target, () => false),
      ).toThrow(code('EOPNOTSUPP', new RegExp(op === 'masked-fadd' ? 'MASKED_ATOMIC_FADD' : 'MASKED_ATOMIC_CSWP')));
    }
    expect(() => prepareRdmaControl({ atomic: { op: 'xor', cookie: 0x77n, local } } as never, mrs, target)).toThrow(
      code('EINVAL', /'fadd' or 'cswp', got xor/),
    );
    expect([C.RDS_CMSG_RDMA_MAP, C.RDS_CMSG_MASKED_ATOMIC_FADD, C.RDS_CMSG_MASKED_ATOMIC_CSWP]).toEqual([3, 8, 9]);
  });
});

describe('sendmsg with rdmaMap on a socket whose transport registers memory', () => {
  const f = fakeRdma();
  const tp = new RdmaTcp(f.rdma);
  let A: RdsStack;
  let B: RdsStack;
  let a: RdsSocket;
  let b: RdsSocket;
  let plain: RdsSocket;
  beforeAll(async () => {
    A = new RdsStack({ tcpPort: TEST_TCP_PORT, transports: [tp, new LoopTransport()] });
    B = new RdsStack({ tcpPort: TEST_TCP_PORT });
    a = new RdsSocket({ stack: A, transport: 'tcp' });
    b = new RdsSocket({ stack: B, transport: 'tcp' });
    plain = new RdsSocket({ stack: B, transport: 'tcp' });
    await a.bind({ address: '127.152.0.1', port: 4000 });
    await b.bind({ address: '127.152.0.2', port: 4000 });
    await plain.bind({ address: '127.152.0.3', port: 4000 });
  });
  afterAll(async () => {
    await A.close();
    await B.close();
  });

  it('registers the buffer, writes rdmaMap.cookie, and the peer receives it as msg.rdmaDest (RDMA_DEST on the wire)', async () => {
    const mem = Buffer.alloc(4096, 0xab);
    const rdmaMap: { buffer: Buffer; flags?: number; cookie?: bigint } = { buffer: mem, flags: C.RDS_RDMA_READWRITE };
    const before = tp.headers.length;
    expect(a.sendmsg(Buffer.from('mapped'), b.address(), { rdmaMap })).toBe(6);
    const cookie = rdmaMap.cookie!;
    expect(typeof cookie).toBe('bigint');
    const reg = [...f.live.entries()].find(([, r]) => r.mem === mem);
    expect(reg?.[1]).toEqual({ laddr: '127.152.0.1', mem, rw: true });
    expect(cookie).toBe(rdmaCookie(0x1000 + reg![0], 0x24));
    const m = await b.recv({ timeout: 10000 });
    expect(m.data.toString()).toBe('mapped');
    expect(m.rdmaDest).toBe(cookie);
    // The header the transport sent: exthdr RDMA_DEST (3), then the cookie.
    const h = tp.headers.slice(before).find((x) => x[OFF_EXTHDR] === C.RDS_EXTHDR_RDMA_DEST)!;
    expect(h.readUInt32BE(OFF_EXTHDR + 1)).toBe(Number(cookie & 0xffffffffn));
    expect(h.readUInt32BE(OFF_EXTHDR + 5)).toBe(0x24);
    // A region of the socket like any getMr one: rdmaDest takes it, freeMr releases it.
    a.sendmsg(Buffer.from('again'), b.address(), { rdmaDest: cookie });
    expect((await b.recv({ timeout: 10000 })).rdmaDest).toBe(cookie);
    a.freeMr(cookie);
    expect([...f.live.values()].some((r) => r.mem === mem)).toBe(false);
    expect(() => a.freeMr(cookie)).toThrow(code('EINVAL'));
  });

  it('send() takes it too; the default flags register read-only', async () => {
    const rdmaMap: { buffer: Buffer; cookie?: bigint } = { buffer: Buffer.alloc(64) };
    await a.send(Buffer.from('via send'), b.address(), { rdmaMap });
    const m = await b.recv({ timeout: 10000 });
    expect(m.rdmaDest).toBe(rdmaMap.cookie);
    expect([...f.live.values()].find((r) => r.mem === rdmaMap.buffer)?.rw).toBe(false);
    a.freeMr(rdmaMap.cookie!);
  });

  it('a refused send registers nothing and writes no cookie: EMSGSIZE, no destination, bad family, a mix, EAGAIN', async () => {
    const count = f.registrations();
    const live = f.live.size;
    const refused = (dest: { address: string; port: number } | null, data: Buffer, c: string, extra: object = {}) => {
      const rdmaMap: { buffer: Buffer; cookie?: bigint } = { buffer: Buffer.alloc(64) };
      expect(() => a.sendmsg(data, dest, { rdmaMap, ...extra })).toThrow(code(c));
      expect(rdmaMap.cookie).toBeUndefined();
    };
    refused(b.address(), Buffer.alloc(C.RDS_MAX_MSG_SIZE + 1), 'EMSGSIZE');
    refused(null, Buffer.from('x'), 'ENOTCONN');
    refused({ address: '::1', port: 4000 }, Buffer.from('x'), 'EOPNOTSUPP');
    refused(b.address(), Buffer.from('x'), 'EINVAL', { rdmaDest: 1n });
    // EAGAIN: a small send buffer filled with messages to an address nobody answers at.
    const s = new RdsSocket({ stack: A, transport: 'tcp' });
    await s.bind({ address: '127.152.0.1', port: 4001 });
    s.setsockopt(C.SOL_SOCKET, C.SO_SNDBUF, 1);
    const nowhere = { address: '127.152.0.9', port: 4000 };
    let full = false;
    for (let i = 0; i < 1000 && !full; i++) {
      try {
        s.sendmsg(Buffer.alloc(512), nowhere);
      } catch (e) {
        expect(e).toMatchObject({ code: 'EAGAIN' });
        full = true;
      }
    }
    expect(full).toBe(true);
    const rdmaMap: { buffer: Buffer; cookie?: bigint } = { buffer: Buffer.alloc(64) };
    expect(() => s.sendmsg(Buffer.from('x'), nowhere, { rdmaMap })).toThrow(code('EAGAIN'));
    expect(rdmaMap.cookie).toBeUndefined();
    expect([f.registrations(), f.live.size]).toEqual([count, live]);
    s.close();
    // The same call accepted registers once.
    const ok: { buffer: Buffer; cookie?: bigint } = { buffer: Buffer.alloc(64) };
    a.sendmsg(Buffer.from('ok'), b.address(), { rdmaMap: ok });
    expect([f.registrations(), f.live.size]).toEqual([count + 1, live + 1]);
    expect((await b.recv({ timeout: 10000 })).rdmaDest).toBe(ok.cookie);
    a.freeMr(ok.cookie!);
  });

  it('masked atomics: EOPNOTSUPP before anything else, even on an unbound socket', () => {
    const s = new RdsSocket({ stack: A, transport: 'tcp' });
    const atomic = { op: 'masked-cswp', cookie: 1n, local: Buffer.alloc(8), compareMask: 0xffn } as never;
    expect(() => s.sendmsg(Buffer.from('x'), b.address(), { atomic })).toThrow(code('EOPNOTSUPP', /masked atomics/));
    s.close();
    expect(() => a.sendmsg(Buffer.from('x'), b.address(), { atomic, rdmaMap: { buffer: Buffer.alloc(8) } })).toThrow(
      code('EOPNOTSUPP', /masked atomics/),
    );
  });

  it('over TCP (no registration): EOPNOTSUPP after the argument checks, the mix EINVAL first; nothing queued', async () => {
    const dest = a.address();
    const map = { buffer: Buffer.alloc(64), flags: C.RDS_RDMA_USE_ONCE } as { buffer: Buffer; cookie?: bigint };
    expect(() => plain.sendmsg(Buffer.from('x'), dest, { rdmaMap: map })).toThrow(
      code('EOPNOTSUPP', /rdmaMap \(RDS_CMSG_RDMA_MAP\).*TCP/),
    );
    expect(map.cookie).toBeUndefined();
    expect(() => plain.sendmsg(Buffer.from('x'), dest, { rdmaMap: { buffer: Buffer.alloc(0) } })).toThrow(
      code('EINVAL', /empty/),
    );
    expect(() => plain.sendmsg(Buffer.from('x'), dest, { rdmaMap: map, rdmaDest: 5n })).toThrow(
      code('EINVAL', /rdmaMap and rdmaDest/),
    );
    expect(() =>
      plain.sendmsg(Buffer.from('x'), dest, {
        rdmaMap: map,
        atomic: { op: 'fadd', cookie: 1n, local: Buffer.alloc(8) },
      }),
    ).toThrow(code('EINVAL', /rdmaMap cannot go with atomic/));
    expect(() =>
      plain.sendmsg(Buffer.from('x'), dest, { atomic: { op: 'masked-fadd', cookie: 1n, local: Buffer.alloc(8) } }),
    ).toThrow(code('EOPNOTSUPP', /masked atomics are not supported by rds-socket/));
    plain.sendmsg(Buffer.from('plain after'), dest);
    const m = await a.recv({ timeout: 10000 });
    expect([m.data.toString(), m.rdmaDest]).toEqual(['plain after', undefined]);
  });
});
