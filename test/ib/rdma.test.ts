import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants, type RdsMessage } from '../../lib/index.js';
import { IB_ADDRS, payload, processMrs } from '../helpers.js';
import { native } from '../../lib/native.js';

// RDS's RDMA operations between two rds-socket stacks over Soft-RoCE (npm run test:ib); IB_ADDRS
// are two addresses of rxe0 in the guest.
const [A, B] = IB_ADDRS as [string, string];
const { RDS_RDMA_READWRITE, RDS_RDMA_USE_ONCE, RDS_RDMA_SUCCESS, RDS_RDMA_REMOTE_ERROR, RDS_RDMA_DROPPED } = constants;

let cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

async function ibSocket(address: string, port: number): Promise<{ stack: RdsStack; sock: RdsSocket }> {
  const stack = new RdsStack();
  cleanups.push(() => stack.close());
  const sock = new RdsSocket({ stack, transport: 'ib' });
  await sock.bind({ address, port });
  sock.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 4 << 20);
  return { stack, sock };
}

/** The next message or notification, with a bound on the wait. */
function next(s: RdsSocket, ms = 60000): Promise<RdsMessage> {
  return s.recv({ timeout: ms });
}

async function status(s: RdsSocket): Promise<{ token: bigint; status: number }> {
  const m = await next(s);
  expect(m.rdmaStatus, `expected an RDMA status, got a message of ${m.data.length} bytes`).toBeDefined();
  return m.rdmaStatus!;
}

/** `owner` exposes a region to `peer` with a message carrying rdmaDest; the peer reads the cookie off it. */
async function expose(owner: RdsSocket, peer: RdsSocket, mem: Buffer, flags: number): Promise<bigint> {
  const cookie = owner.getMr(mem, { flags });
  owner.sendmsg(Buffer.from('expose'), peer.address(), { rdmaDest: cookie });
  const m = await next(peer);
  expect(m.data.toString()).toBe('expose');
  expect(m.rdmaDest).toBe(cookie);
  return cookie;
}

/** Runs examples/rdma.mjs with `args`; resolves with its exit code and output once `until` shows up (or it exits). */
function example(args: string[], until?: string): Promise<{ done: Promise<{ code: number; out: string }> }> {
  const p = spawn(process.execPath, [fileURLToPath(new URL('../../examples/rdma.mjs', import.meta.url)), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  cleanups.push(() => {
    p.kill('SIGKILL');
  });
  let out = '';
  const done = new Promise<{ code: number; out: string }>((res) =>
    p.on('exit', (code) => res({ code: code ?? -1, out })),
  );
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`example did not start: ${out}`)), 60000);
    const on = (d: Buffer): void => {
      out += d;
      if (until === undefined || out.includes(until)) {
        clearTimeout(t);
        resolve({ done });
      }
    };
    p.stdout!.on('data', on);
    p.stderr!.on('data', (d: Buffer) => (out += d));
    if (until === undefined) on(Buffer.alloc(0));
  });
}

describe('RDMA operations between rds-socket nodes (Soft-RoCE)', () => {
  it('the RDMA example (docs/infiniband.md, examples/rdma.mjs) runs: a node exposes a buffer, a peer process reads and writes it', async () => {
    const owner = await example(['expose', B, '4850'], 'exposing on');
    const user = await example(['use', A, '4850', B, '4850']);
    const u = await user.done;
    expect(u.code, u.out).toBe(0);
    expect(u.out).toContain('READ status 0 (0 = RDS_RDMA_SUCCESS): "hello from the exposing node"');
    expect(u.out).toContain('WRITE status 0');
    const o = await owner.done;
    expect(o.code, o.out).toBe(0);
    expect(o.out).toContain('my buffer now starts with "written by the remote node"');
  });

  it('WRITE into and READ from a peer exposed buffer, both directions; the bytes are in the peer Buffer', async () => {
    const { sock: a } = await ibSocket(A, 4800);
    const { sock: b } = await ibSocket(B, 4800);
    for (const [x, y] of [
      [a, b],
      [b, a],
    ] as const) {
      const mem = Buffer.alloc(16384, 0xee);
      const cookie = await expose(y, x, mem, RDS_RDMA_READWRITE);
      // Registered zero-based from the buffer's first page: the cookie's offset half is where the
      // buffer starts in that page, its rkey half names the region.
      expect(cookie >> 32n).toBeLessThan(4096n);
      expect(cookie & 0xffffffffn).not.toBe(0n);
      // WRITE from two local buffers at offset 100 of the peer's region.
      const src = payload(1, 9000);
      x.sendmsg(Buffer.from('wrote'), y.address(), {
        rdma: {
          cookie,
          remoteOffset: 100,
          local: [src.subarray(0, 3000), src.subarray(3000)],
          write: true,
          notify: true,
          token: 7n,
        },
      });
      expect(await status(x)).toEqual({ token: 7n, status: RDS_RDMA_SUCCESS });
      const m = await next(y);
      expect(m.data.toString()).toBe('wrote');
      expect(mem.subarray(100, 9100).equals(src)).toBe(true);
      expect(mem[99]).toBe(0xee);
      expect(mem[9100]).toBe(0xee);
      // READ what the owner put at offset 10000.
      const put = payload(2, 5000);
      put.copy(mem, 10000);
      const dst = Buffer.alloc(5000);
      x.sendmsg(Buffer.from('read'), y.address(), {
        rdma: { cookie, remoteOffset: 10000, local: [dst], write: false, notify: true, token: 8n },
      });
      expect(await status(x)).toEqual({ token: 8n, status: RDS_RDMA_SUCCESS });
      expect(dst.equals(put)).toBe(true);
      expect((await next(y)).data.toString()).toBe('read');
      y.freeMr(cookie);
    }
  });

  it('a region freed with freeMr is refused by the device: remote error status, and messages still flow', async () => {
    const { sock: a } = await ibSocket(A, 4810);
    const { sock: b } = await ibSocket(B, 4810);
    const mem = Buffer.alloc(4096);
    const cookie = await expose(b, a, mem, RDS_RDMA_READWRITE);
    b.freeMr(cookie);
    expect(() => b.freeMr(cookie)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    b.freeMr(0n); // the flush: nothing deferred to flush, accepted
    a.sendmsg(Buffer.from('bad'), b.address(), {
      rdma: { cookie, local: [Buffer.alloc(64, 1)], write: true, notify: true, token: 21n },
    });
    expect(await status(a)).toEqual({ token: 21n, status: RDS_RDMA_REMOTE_ERROR });
    expect(mem.every((x) => x === 0)).toBe(true);
    // The QP went to error (as with the kernel); the connection comes back and carries messages.
    a.sendmsg(Buffer.from('after'), b.address());
    let m = await next(b);
    // The message whose op failed is never delivered after the reconnect (not retransmitted);
    // if the device delivered it before the error reached the QP, it comes first.
    if (m.data.toString() === 'bad') m = await next(b);
    expect(m.data.toString()).toBe('after');
  });

  it('RDS_RDMA_USE_ONCE: the region is released after the first op, a second op gets a remote error', async () => {
    const { sock: a } = await ibSocket(A, 4820);
    const { sock: b } = await ibSocket(B, 4820);
    const mem = Buffer.alloc(4096);
    // The connection (and its two ring registrations) first, so the count below is the region's.
    a.sendmsg(Buffer.from('hi'), b.address());
    await next(b);
    const before = processMrs();
    const cookie = await expose(b, a, mem, RDS_RDMA_READWRITE | RDS_RDMA_USE_ONCE);
    expect(processMrs()).toBe(before + 1);
    const src = payload(3, 2000);
    a.sendmsg(Buffer.from('once'), b.address(), {
      rdma: { cookie, local: [src], write: true, notify: true, token: 1n },
    });
    expect(await status(a)).toEqual({ token: 1n, status: RDS_RDMA_SUCCESS });
    // The message carries the RDMA extension naming b's region: b frees it on receipt.
    expect((await next(b)).data.toString()).toBe('once');
    expect(mem.subarray(0, 2000).equals(src)).toBe(true);
    expect(() => b.freeMr(cookie)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(processMrs()).toBe(before);
    a.sendmsg(Buffer.from('twice'), b.address(), {
      rdma: { cookie, local: [Buffer.alloc(16, 9)], write: true, notify: true, token: 2n },
    });
    expect(await status(a)).toEqual({ token: 2n, status: RDS_RDMA_REMOTE_ERROR });
    expect(mem.subarray(0, 16).equals(src.subarray(0, 16))).toBe(true);
  });

  it('rdmaMap: one sendmsg registers and exposes a buffer; the peer WRITEs and READs it with msg.rdmaDest', async () => {
    const { sock: a } = await ibSocket(A, 4880);
    const { sock: b } = await ibSocket(B, 4880);
    // The connection (and its ring registrations) first, so the counts below are the region's.
    a.sendmsg(Buffer.from('hi'), b.address());
    await next(b);
    const before = processMrs();
    const mem = Buffer.alloc(8192, 0xcc);
    // Refused (larger than the send buffer): nothing registered, no cookie.
    const refused: { buffer: Buffer; cookie?: bigint } = { buffer: mem };
    expect(() => b.sendmsg(Buffer.alloc(5 << 20), a.address(), { rdmaMap: refused })).toThrow(
      expect.objectContaining({ code: 'EMSGSIZE' }),
    );
    expect(refused.cookie).toBeUndefined();
    expect(processMrs()).toBe(before);
    const rdmaMap: { buffer: Buffer; flags: number; cookie?: bigint } = { buffer: mem, flags: RDS_RDMA_READWRITE };
    b.sendmsg(Buffer.from('mapped'), a.address(), { rdmaMap });
    expect(typeof rdmaMap.cookie).toBe('bigint');
    expect(processMrs()).toBe(before + 1);
    const m = await next(a);
    expect(m.data.toString()).toBe('mapped');
    expect(m.rdmaDest).toBe(rdmaMap.cookie);
    const cookie = m.rdmaDest!;
    const src = payload(7, 3000);
    a.sendmsg(Buffer.from('wrote'), b.address(), {
      rdma: { cookie, remoteOffset: 500, local: [src], write: true, notify: true, token: 60n },
    });
    expect(await status(a)).toEqual({ token: 60n, status: RDS_RDMA_SUCCESS });
    expect((await next(b)).data.toString()).toBe('wrote');
    expect(mem.subarray(500, 3500).equals(src)).toBe(true);
    expect([mem[499], mem[3500]]).toEqual([0xcc, 0xcc]);
    const put = payload(8, 2000);
    put.copy(mem, 6000);
    const dst = Buffer.alloc(2000);
    a.sendmsg(Buffer.from('read'), b.address(), {
      rdma: { cookie, remoteOffset: 6000, local: [dst], write: false, notify: true, token: 61n },
    });
    expect(await status(a)).toEqual({ token: 61n, status: RDS_RDMA_SUCCESS });
    expect(dst.equals(put)).toBe(true);
    expect((await next(b)).data.toString()).toBe('read');
    b.freeMr(cookie);
    expect(processMrs()).toBe(before);
  });

  it('rdmaMap with RDS_RDMA_USE_ONCE: released after the peer op, a second op gets a remote error', async () => {
    const { sock: a } = await ibSocket(A, 4890);
    const { sock: b } = await ibSocket(B, 4890);
    a.sendmsg(Buffer.from('hi'), b.address());
    await next(b);
    const before = processMrs();
    const mem = Buffer.alloc(4096);
    const rdmaMap: { buffer: Buffer; flags: number; cookie?: bigint } = {
      buffer: mem,
      flags: RDS_RDMA_READWRITE | RDS_RDMA_USE_ONCE,
    };
    b.sendmsg(Buffer.from('once'), a.address(), { rdmaMap });
    const cookie = (await next(a)).rdmaDest!;
    expect(cookie).toBe(rdmaMap.cookie);
    expect(processMrs()).toBe(before + 1);
    const src = payload(9, 1500);
    a.sendmsg(Buffer.from('used'), b.address(), {
      rdma: { cookie, local: [src], write: true, notify: true, token: 70n },
    });
    expect(await status(a)).toEqual({ token: 70n, status: RDS_RDMA_SUCCESS });
    expect((await next(b)).data.toString()).toBe('used');
    expect(mem.subarray(0, 1500).equals(src)).toBe(true);
    expect(() => b.freeMr(cookie)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(processMrs()).toBe(before);
    a.sendmsg(Buffer.from('twice'), b.address(), {
      rdma: { cookie, local: [Buffer.alloc(16, 9)], write: true, notify: true, token: 71n },
    });
    expect(await status(a)).toEqual({ token: 71n, status: RDS_RDMA_REMOTE_ERROR });
    expect(mem.subarray(0, 16).equals(src.subarray(0, 16))).toBe(true);
  });

  it('a connection torn down in the middle of an RDMA READ: reported dropped, the message is not retransmitted', async () => {
    const { stack: sa, sock: a } = await ibSocket(A, 4830);
    const { stack: sb, sock: b } = await ibSocket(B, 4830);
    const mem = Buffer.alloc(1 << 20, 0x5a);
    const cookie = await expose(b, a, mem, 0);
    // The peer's side goes first: its queue pair is destroyed at once (disconnectPath), so the
    // READ posted next gets no response and stays outstanding (loopback Soft-RoCE would otherwise
    // finish 1 MiB before JavaScript could cut it off), until the peer's disconnect reaches us
    // and our side of the connection is torn down with the op still in flight.
    sb.disconnectPath(A, 0);
    const posted = sa.stats().counters.send_rdma;
    a.sendmsg(Buffer.from('mid-op'), b.address(), {
      rdma: { cookie, local: [Buffer.alloc(1 << 20)], write: false, notify: true, fence: true, token: 33n },
    });
    expect(await status(a)).toEqual({ token: 33n, status: RDS_RDMA_DROPPED });
    expect(sa.stats().counters.send_rdma).toBe(posted + 1);
    sb.reconnectPath(A, 0);
    a.sendmsg(Buffer.from('after'), b.address());
    // The connection is back; the message whose op was cut off is never sent again.
    expect((await next(b)).data.toString()).toBe('after');
    expect(b.recvmsg()).toBeNull();
    await a.flush({ timeout: 60000 });
    expect(b.recvmsg()).toBeNull();
  });

  it('RDS_RDMA_SILENT with no payload: the WRITE lands, its status comes, the peer socket gets no message', async () => {
    const { sock: a } = await ibSocket(A, 4870);
    const { sock: b } = await ibSocket(B, 4870);
    const mem = Buffer.alloc(4096);
    const cookie = await expose(b, a, mem, RDS_RDMA_READWRITE);
    const src = payload(5, 1000);
    a.sendmsg(Buffer.alloc(0), b.address(), {
      rdma: { cookie, local: [src], write: true, notify: true, silent: true, token: 50n },
    });
    expect(await status(a)).toEqual({ token: 50n, status: RDS_RDMA_SUCCESS });
    expect(mem.subarray(0, 1000).equals(src)).toBe(true);
    a.sendmsg(Buffer.from('after silent'), b.address());
    expect((await next(b)).data.toString()).toBe('after silent');
    await a.flush({ timeout: 60000 });
    expect(b.recvmsg()).toBeNull();
  });

  it('atomics: FADD and CSWP on a 64-bit word of the peer region return the old value (EOPNOTSUPP without device atomics)', async () => {
    const { sock: a } = await ibSocket(A, 4860);
    const { sock: b } = await ibSocket(B, 4860);
    const mem = Buffer.alloc(64);
    const cookie = await expose(b, a, mem, RDS_RDMA_READWRITE);
    // A word 8-byte aligned on the device side: the cookie's offset is where `mem` starts in its page.
    const w = 16 + ((8 - Number((cookie >> 32n) % 8n)) % 8);
    mem.writeBigUInt64LE(40n, w);
    const old = Buffer.alloc(8);
    const atomic = (o: object): void => {
      a.sendmsg(Buffer.from('atomic'), b.address(), {
        atomic: { cookie, remoteOffset: w, local: old, notify: true, token: 40n, ...o } as never,
      });
    };
    // Soft-RoCE has atomics (IB_ATOMIC_HCA): there the device path must be taken.
    const soft = native()!.ibDeviceFor(A)!.startsWith('rxe');
    expect(native()!.ibAtomics!(A) || !soft).toBe(true);
    if (!native()!.ibAtomics!(A)) {
      expect(() => atomic({ op: 'fadd', add: 2n })).toThrow(expect.objectContaining({ code: 'EOPNOTSUPP' }));
      return;
    }
    atomic({ op: 'fadd', add: 2n });
    expect(await status(a)).toEqual({ token: 40n, status: RDS_RDMA_SUCCESS });
    expect((await next(b)).data.toString()).toBe('atomic');
    expect([old.readBigUInt64LE(0), mem.readBigUInt64LE(w)]).toEqual([40n, 42n]);
    atomic({ op: 'cswp', compare: 1n, swap: 7n }); // no match: the word stays
    expect((await status(a)).status).toBe(RDS_RDMA_SUCCESS);
    await next(b);
    expect([old.readBigUInt64LE(0), mem.readBigUInt64LE(w)]).toEqual([42n, 42n]);
    atomic({ op: 'cswp', compare: 42n, swap: 7n });
    expect((await status(a)).status).toBe(RDS_RDMA_SUCCESS);
    await next(b);
    expect([old.readBigUInt64LE(0), mem.readBigUInt64LE(w)]).toEqual([42n, 7n]);
  });

  it('RDMA regions, per-op registrations and queue pairs are all released after close (rdma resource show mr)', async () => {
    const before = processMrs();
    const { stack: sa, sock: a } = await ibSocket(A, 4840);
    const { stack: sb, sock: b } = await ibSocket(B, 4840);
    const mem = Buffer.alloc(8192);
    const cookie = await expose(b, a, mem, RDS_RDMA_READWRITE);
    b.getMr(Buffer.alloc(4096)); // left registered: close() releases it
    a.getMr(Buffer.alloc(4096), { flags: RDS_RDMA_USE_ONCE });
    a.sendmsg(Buffer.from('w'), b.address(), {
      rdma: { cookie, local: [Buffer.alloc(100, 3)], write: true, notify: true },
    });
    expect((await status(a)).status).toBe(RDS_RDMA_SUCCESS);
    await next(b);
    // Two rings (one per QP) and three application regions.
    expect(processMrs()).toBe(before + 5);
    await a.close();
    await b.close();
    expect(processMrs()).toBe(before + 2);
    await sa.close();
    await sb.close();
    expect(processMrs()).toBe(before);
  });
});
