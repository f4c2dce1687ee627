import { describe, expect, it } from 'vitest';
import { constants, type RdsSocket } from '../lib/index.js';
import { RDMA_OP_READ, RDMA_OP_WRITE, StressRdma, type RdmaConfig, type RdmaSend } from '../lib/cli/stress-rdma.js';

// rds-stress -D's exchange (lib/cli/stress-rdma.ts) between two tasks whose sockets are a fake RDMA
// pair: regions are kept in a table by cookie, an RDMA op copies between Buffers. What runs over
// a real device (Soft-RoCE, and against Oracle's rds-stress on rds_rdma) is in
// test/ib/stress-rdma.test.ts and test/ib/kernel-stress.test.ts.

/** The regions both fake sockets see (one "fabric"). */
class Fabric {
  private next = 1n;
  readonly regions = new Map<bigint, { buffer: Uint8Array; flags: number }>();
  freed: bigint[] = [];
  register(buffer: Uint8Array, flags: number): bigint {
    // A cookie as the kernel makes them: offset << 32 | r_key; offset 0 here.
    const cookie = this.next++;
    this.regions.set(cookie, { buffer, flags });
    return cookie;
  }
  socket(): RdsSocket {
    return {
      getMr: (buffer: Uint8Array, o?: { flags?: number }) => this.register(buffer, o?.flags ?? 0),
      freeMr: (cookie: bigint) => {
        if (!this.regions.delete(cookie)) throw new Error(`freeMr(${cookie}): no such region`);
        this.freed.push(cookie);
      },
    } as unknown as RdsSocket;
  }
  /** sendmsg's part: register an rdmaMap, or post the op of `rdma` (corrupting one byte if asked). */
  send(s: RdmaSend, corrupt = false): bigint | undefined {
    const o = s.sendOpts;
    let cookie: bigint | undefined;
    if (o.rdmaMap) cookie = o.rdmaMap.cookie = this.register(o.rdmaMap.buffer, o.rdmaMap.flags ?? 0);
    if (o.rdmaDest !== undefined) cookie = o.rdmaDest;
    if (o.rdma) {
      const r = this.regions.get(o.rdma.cookie);
      if (!r) throw new Error('op on a region that is not registered');
      const mem = Buffer.from(r.buffer.buffer, r.buffer.byteOffset, r.buffer.byteLength);
      let at = o.rdma.remoteOffset ?? 0;
      for (const l of o.rdma.local) {
        const b = Buffer.from(l.buffer, l.byteOffset, l.byteLength);
        if (o.rdma.write) b.copy(mem, at);
        else mem.copy(b, 0, at, at + b.length);
        at += b.length;
      }
      if (corrupt) (o.rdma.write ? mem : Buffer.from(o.rdma.local[0]!.buffer, o.rdma.local[0]!.byteOffset))[8]! ^= 1;
    }
    s.sent();
    return cookie;
  }
}

const cfg = (o: Partial<RdmaConfig> = {}): RdmaConfig => ({
  size: 4096,
  vector: 1,
  depth: 2,
  rwMode: 0,
  useOnce: false,
  useGetMr: false,
  useFence: true,
  cacheMrs: false,
  verify: true,
  ...o,
});

function pair(c: RdmaConfig) {
  const f = new Fabric();
  const sa = { rdmaIn: 0, rdmaOut: 0, rdmaFailed: 0 };
  const sb = { rdmaIn: 0, rdmaOut: 0, rdmaFailed: 0 };
  return { f, sa, sb, a: new StressRdma(f.socket(), c, 1, sa), b: new StressRdma(f.socket(), c, 1, sb) };
}

/** One request from a to b in `slot` with sequence `seq`, answered; returns the op and the REQ header. */
function roundTrip(
  p: ReturnType<typeof pair>,
  seq: number,
  slot: number,
  o: { corrupt?: boolean } = {},
): { op: number; req: Buffer; ack: Buffer; token: bigint } {
  const req = Buffer.alloc(63);
  const s = p.a.request(0, slot, seq, req)!;
  expect(s).not.toBeNull();
  const dest = p.f.send(s);
  p.b.requestReceived(0, slot, req, dest);
  const ack = Buffer.alloc(63);
  const r = p.b.ack(0, slot, 77, ack);
  expect(r).not.toBeNull();
  expect(r).not.toBe('drain');
  const token = (r as RdmaSend).sendOpts.rdma!.token!;
  p.f.send(r as RdmaSend, o.corrupt);
  return { op: req[19]!, req, ack, token };
}

describe('rds-stress -D: the exchange of rds-tools 2.0.7', () => {
  it('no RDMA on the first eleven messages to a task; then ops alternate READ/WRITE, verified both ways, regions freed at the ACK', () => {
    const p = pair(cfg());
    for (let seq = 0; seq <= 10; seq++) expect(p.a.request(0, 0, seq, Buffer.alloc(63))).toBeNull();
    const ops: number[] = [];
    for (let n = 0; n < 4; n++) {
      const slot = n % 2;
      const { op, req, ack, token } = roundTrip(p, 11 + n, slot);
      ops.push(op);
      // The REQ header as rds-tools lays it out: op at 19, addr, phyaddr 0, pattern (seq << 32 | pid), key 0
      // (the cookie goes by RDS_CMSG_RDMA_MAP), size at 52, vector at 56.
      expect(req.readBigUInt64BE(28)).toBe(0n);
      expect(req.readBigUInt64BE(36)).toBe((BigInt(11 + n) << 32n) | BigInt(process.pid));
      expect(req.readBigUInt64BE(44)).toBe(0n);
      expect([req.readUInt32BE(52), req.readUInt32BE(56)]).toEqual([4096, 1]);
      // The ACK echoes them with the cookie the requester's region got.
      expect(ack[19]).toBe(op);
      expect(ack.readBigUInt64BE(44)).not.toBe(0n);
      expect(ack.readBigUInt64BE(36)).toBe(req.readBigUInt64BE(36));
      // The status names the op: seq << 32 | (task * depth + slot) << 2.
      expect(token).toBe((77n << 32n) | BigInt(slot << 2));
      expect(p.b.completed(token, constants.RDS_RDMA_SUCCESS)).toBe(0);
      p.a.ackReceived(0, slot, ack);
    }
    // Remote task 0 starts on WRITE and toggles before each use.
    expect(ops).toEqual([RDMA_OP_READ, RDMA_OP_WRITE, RDMA_OP_READ, RDMA_OP_WRITE]);
    expect(p.f.regions.size).toBe(0);
    expect(p.f.freed).toHaveLength(4);
    // mbi/mbo: a WRITE is data in for the requester and out for the side that posts it, a READ the reverse.
    expect(p.sa).toEqual({ rdmaIn: 2 * 4096, rdmaOut: 2 * 4096, rdmaFailed: 0 });
    expect(p.sb).toEqual({ rdmaIn: 2 * 4096, rdmaOut: 2 * 4096, rdmaFailed: 0 });
  });

  it('-M 1 / -M 2 keep to one op; --rdma-use-get-mr names the region by RDMA_DEST and the key in the header; -I splits the op', () => {
    for (const [mode, op] of [
      [1, RDMA_OP_READ],
      [2, RDMA_OP_WRITE],
    ] as const) {
      const p = pair(cfg({ rwMode: mode, useGetMr: true, vector: 3, size: 1024 }));
      for (let n = 0; n < 3; n++) {
        const req = Buffer.alloc(63);
        const s = p.a.request(0, 0, 20 + n, req)!;
        expect(req[19]).toBe(op);
        expect(s.sendOpts.rdmaMap).toBeUndefined();
        expect(s.sendOpts.rdmaDest).toBe(req.readBigUInt64BE(44));
        const dest = p.f.send(s);
        expect(p.f.regions.get(dest!)!.buffer.byteLength).toBe(3 * 1024);
        p.b.requestReceived(0, 0, req, dest);
        const ack = Buffer.alloc(63);
        const r = p.b.ack(0, 0, 5, ack) as RdmaSend;
        expect(r.sendOpts.rdma!.local.map((l) => l.byteLength)).toEqual([1024, 1024, 1024]);
        expect(r.sendOpts.rdma!.fence).toBe(op === RDMA_OP_READ);
        expect(r.sendOpts.rdma!.notify).toBe(true);
        p.f.send(r);
        p.b.completed(r.sendOpts.rdma!.token!, 0);
        p.a.ackReceived(0, 0, ack);
      }
      expect(p.f.regions.size).toBe(0);
    }
  });

  it('--rdma-cache-mrs keeps one region per slot; --rdma-use-once leaves the freeing to the op', () => {
    const cached = pair(cfg({ useGetMr: true, cacheMrs: true }));
    const keys = [0, 1, 2].map((n) => {
      const r = roundTrip(cached, 11 + n, 0);
      cached.b.completed(r.token, 0);
      cached.a.ackReceived(0, 0, r.ack);
      return r.req.readBigUInt64BE(44);
    });
    expect(new Set(keys).size).toBe(1);
    expect(keys[0]).not.toBe(0n);
    expect(cached.f.regions.size).toBe(1);
    const once = pair(cfg({ useOnce: true }));
    const r = roundTrip(once, 11, 0);
    once.b.completed(r.token, 0);
    once.a.ackReceived(0, 0, r.ack);
    expect(once.f.freed).toEqual([]);
    expect([...once.f.regions.values()][0]!.flags).toBe(constants.RDS_RDMA_READWRITE | constants.RDS_RDMA_USE_ONCE);
  });

  it("an ACK waits for the status of its slot's previous op (rds-tools drains), and wrong data ends the run", () => {
    const p = pair(cfg({ rwMode: 2 }));
    roundTrip(p, 11, 0);
    const req = Buffer.alloc(63);
    const dest = p.f.send(p.a.request(0, 0, 12, req)!);
    p.b.requestReceived(0, 0, req, dest);
    expect(p.b.ack(0, 0, 9, Buffer.alloc(63))).toBe('drain');

    const w = pair(cfg({ rwMode: 2 }));
    const bad = roundTrip(w, 11, 0, { corrupt: true });
    expect(() => w.a.ackReceived(0, 0, bad.ack)).toThrow(/RDMA write from remote task 0 left wrong data at offset 8/);

    const rd = pair(cfg({ rwMode: 1 }));
    const badRead = roundTrip(rd, 11, 0, { corrupt: true });
    expect(() => rd.b.completed(badRead.token, 0)).toThrow(
      /RDMA read from remote task 0 brought wrong data at offset 8/,
    );

    const st = pair(cfg());
    const failed = roundTrip(st, 11, 0);
    // A failed op is counted and named, not fatal (rds-tools logs it): the peer that ends its run
    // first takes its regions with it while our last ops are on the wire.
    const before = st.sb.rdmaFailed;
    expect(st.b.completed(failed.token, constants.RDS_RDMA_REMOTE_ERROR)).toBe(0);
    expect(st.sb.rdmaFailed).toBe(before + 1);
    expect(st.b.lastFailure).toMatch(/failed: remote error/);
  });

  it('a request the run did not agree on is refused as rds-tools refuses it', () => {
    const p = pair(cfg());
    const req = Buffer.alloc(63);
    const dest = p.f.send(p.a.request(0, 0, 11, req)!);
    const other = new StressRdma(new Fabric().socket(), cfg({ size: 8192 }), 1, {
      rdmaIn: 0,
      rdmaOut: 0,
      rdmaFailed: 0,
    });
    expect(() => other.requestReceived(0, 0, req, dest)).toThrow(/Unexpected RDMA size 4096 in request/);
    req[19] = 9;
    expect(() => p.b.requestReceived(0, 0, req, dest)).toThrow(/Unexpected RDMA op 9 in request/);
    const ack = Buffer.alloc(63);
    ack.writeBigUInt64BE(5n, 44);
    expect(() => p.a.ackReceived(0, 1, ack)).toThrow(/an ACK carries RDMA key 0x5 for a request without RDMA/);
    expect(() => p.b.completed(0x1234n, 0)).toThrow(/names no op of ours/);
  });
});
