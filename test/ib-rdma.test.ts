import { describe, expect, it } from 'vitest';
import {
  RDS_HEADER_SIZE,
  RDS_RDMA_CANCELED,
  RDS_RDMA_DROPPED,
  RDS_RDMA_OTHER_ERROR,
  RDS_RDMA_READWRITE,
  RDS_RDMA_REMOTE_ERROR,
  RDS_RDMA_SUCCESS,
  RDS_RDMA_USE_ONCE,
  RDS_EXTHDR_RDMA,
  RDS_EXTHDR_RDMA_DEST,
} from '../lib/constants.js';
import { MrTable, prepareRdmaControl, RdmaOp, rdmaStatusOf, type RdmaNotifyTarget } from '../lib/core/rdma-ops.js';
import { IbPath, IbShared, RDMA_TAG_BASE, SLOT_SIZE } from '../lib/transports/ib-path.js';
import { IbReceiver } from '../lib/transports/ib-recv.js';
import { IbSender } from '../lib/transports/ib-send.js';
import { rdmaCookie } from '../lib/wire/rdma-ext.js';

// The RDMA half of the IB transport and of the socket, against a fake endpoint: what is posted in
// which order, how completions become statuses, what a teardown reports. The device tests (real
// READ/WRITE over Soft-RoCE) are in test/ib/rdma.test.ts.
const SEND_SLOTS = 4;
const RECV_SLOTS = 8;

function target(recvErr = false): RdmaNotifyTarget & { notes: { token: bigint; status: number }[] } {
  const notes: { token: bigint; status: number }[] = [];
  return { reportsFailures: recvErr, rdmaDone: (token, status) => notes.push({ token, status }), notes };
}

function op(t: RdmaNotifyTarget, o: Partial<{ notify: boolean; fence: boolean; write: boolean; bufs: number }> = {}) {
  const local = Array.from({ length: o.bufs ?? 2 }, () => Buffer.alloc(100));
  return new RdmaOp(rdmaCookie(0x1234, 8), 16, local, o.write ?? true, o.notify ?? true, o.fence ?? false, 5n, 200, t);
}

function harness() {
  const calls: (['send', number[]] | ['rdma', number, boolean, bigint, number, number])[] = [];
  const drops: string[] = [];
  let rdmaRc = 0;
  const host = { counters: { add: () => {} }, recvIncoming: () => {}, reportProtocolError: () => {} };
  const ep = {
    postSend: (_id: number, wrs: Int32Array) => {
      calls.push(['send', [...wrs]]);
      return 0;
    },
    postRecv: () => 0,
    postRdma: (_id: number, tag: number, write: boolean, addr: bigint, rkey: number, local: Uint8Array[]) => {
      if (rdmaRc !== 0) return rdmaRc;
      calls.push(['rdma', tag, write, addr, rkey, local.length]);
      return 0;
    },
  };
  const shared = new IbShared(SEND_SLOTS);
  shared.attach(host as never);
  shared.setEndpoint(ep as never);
  const tp = new IbPath(1, false, { advertise: () => 0, posted: () => {}, grant: () => {} } as never);
  tp.markEstablished();
  tp.ringReady(Buffer.alloc((SEND_SLOTS + 1 + RECV_SLOTS) * SLOT_SIZE), SEND_SLOTS);
  tp.flowControlNegotiated(false);
  tp.peerMarked(true);
  const slot = { current: tp, is: (t: IbPath) => t === tp };
  let kicks = 0;
  const cp = {
    carrier: () => slot,
    heartbeat: { noteRx: () => {} },
    tx: { ackThrough: () => {}, kick: () => kicks++ },
    drop: (why: string) => drops.push(why),
  };
  const sender = new IbSender(shared);
  const receiver = new IbReceiver(shared, sender);
  return {
    tp,
    cp: cp as never,
    sender,
    receiver,
    calls,
    drops,
    kicks: () => kicks,
    setRdmaRc: (rc: number) => (rdmaRc = rc),
  };
}

function message(o: RdmaOp | null, len = 10) {
  const completed: (Error | undefined)[] = [];
  return {
    sport: 4000,
    dport: 5000,
    wire: Buffer.alloc(RDS_HEADER_SIZE + len),
    len,
    rdma: o,
    xmitHold() {},
    xmitDone() {},
    complete(err?: Error) {
      completed.push(err);
    },
    completed,
  };
}

describe('IB RDMA: posting', () => {
  it('the READ/WRITE goes to the queue pair before the SEND of its message, at the cookie offset + remoteOffset', () => {
    const h = harness();
    const t = target();
    const o = op(t, { write: false });
    expect(h.sender.xmit(h.cp, message(o) as never)).toBe(true);
    expect(h.calls.map((c) => c[0])).toEqual(['rdma', 'send']);
    const [, tag, write, addr, rkey, n] = h.calls[0] as ['rdma', number, boolean, bigint, number, number];
    expect(tag).toBeGreaterThanOrEqual(RDMA_TAG_BASE);
    expect([write, addr, rkey, n]).toEqual([false, 24n, 0x1234, 2]);
    expect(o.state).toBe('posted');
    expect(h.tp.rdmaOps.get(tag)).toBe(o);
  });

  it('RDS_RDMA_FENCE sets the fence flag (2) on the first fragment of the SEND only', () => {
    const h = harness();
    h.sender.xmit(h.cp, message(op(target(), { fence: true }), 5000) as never);
    const sends = h.calls.filter((c) => c[0] === 'send').flatMap((c) => c[1] as number[]);
    // [slot, length, flags] per fragment: first has fence, last is solicited.
    expect([sends[2], sends[5]]).toEqual([2, 1]);
  });

  it('no room for its work requests (EAGAIN): nothing is sent until a completion makes room, then READ/WRITE then SEND', () => {
    const h = harness();
    const o = op(target());
    h.setRdmaRc(11);
    expect(h.sender.xmit(h.cp, message(o) as never)).toBe(false);
    expect(h.calls).toEqual([]);
    expect(h.tp.blocked).toBe(true);
    h.setRdmaRc(0);
    // Any send completion pushes the ring again.
    h.receiver.onCompletions(h.cp, 1, Int32Array.of(RDMA_TAG_BASE + 999, 0, 0));
    expect(h.calls.map((c) => c[0])).toEqual(['rdma', 'send']);
    expect(o.state).toBe('posted');
    expect(h.tp.blocked).toBe(false);
    expect(h.kicks()).toBe(1); // the core, told to wait, may send again
  });

  it('a post refused otherwise: status OTHER_ERROR, the message is completed with an error and not sent', () => {
    const h = harness();
    const t = target();
    const m = message(op(t));
    h.setRdmaRc(12);
    expect(h.sender.xmit(h.cp, m as never)).toBe(true);
    expect(h.calls).toEqual([]);
    expect(t.notes).toEqual([{ token: 5n, status: RDS_RDMA_OTHER_ERROR }]);
    expect(m.completed[0]).toMatchObject({ code: 'ENOBUFS' });
  });

  it('a message whose op was posted on an earlier carrier is never retransmitted: dropped, reported once', () => {
    const h = harness();
    const t = target();
    const o = op(t);
    o.state = 'posted';
    const m = message(o);
    expect(h.sender.xmit(h.cp, m as never)).toBe(true);
    expect(h.calls).toEqual([]);
    expect(t.notes).toEqual([{ token: 5n, status: RDS_RDMA_DROPPED }]);
    expect(m.completed[0]).toMatchObject({ code: 'ECONNRESET' });
    // Already reported (say, success before the teardown): dropped without a second status.
    const t2 = target();
    const o2 = op(t2);
    o2.finish(RDS_RDMA_SUCCESS);
    h.sender.xmit(h.cp, message(o2) as never);
    expect(t2.notes).toEqual([{ token: 5n, status: RDS_RDMA_SUCCESS }]);
  });
});

describe('IB RDMA: RDS_RDMA_SILENT', () => {
  it('an empty message whose op is silent: only the op is posted (no SEND); the message is done with the op', () => {
    const h = harness();
    const t = target();
    const o = op(t);
    o.silent = true;
    const m = message(o, 0);
    expect(h.sender.xmit(h.cp, m as never)).toBe(true);
    expect(h.calls.map((c) => c[0])).toEqual(['rdma']);
    expect(m.completed).toEqual([]);
    h.receiver.onCompletions(h.cp, 1, Int32Array.of(h.calls[0]![1] as number, 0, 200));
    expect(t.notes).toEqual([{ token: 5n, status: RDS_RDMA_SUCCESS }]);
    expect(m.completed).toEqual([undefined]);
  });

  it('a silent op with payload still sends its message (the kernel sends data whatever the op)', () => {
    const h = harness();
    const o = op(target());
    o.silent = true;
    h.sender.xmit(h.cp, message(o, 10) as never);
    expect(h.calls.map((c) => c[0])).toEqual(['rdma', 'send']);
  });
});

describe('IB RDMA: completions', () => {
  it('success, remote access error and flush map to the RDS statuses; an error drops the connection', () => {
    expect([0, 10, 5, 4, 12].map(rdmaStatusOf)).toEqual([
      RDS_RDMA_SUCCESS,
      RDS_RDMA_REMOTE_ERROR,
      RDS_RDMA_DROPPED,
      RDS_RDMA_OTHER_ERROR,
      RDS_RDMA_OTHER_ERROR,
    ]);
    const h = harness();
    const t = target();
    h.sender.xmit(h.cp, message(op(t)) as never);
    const tag = h.calls[0]![1] as number;
    h.receiver.onCompletions(h.cp, 1, Int32Array.of(tag, 0, 200));
    expect(t.notes).toEqual([{ token: 5n, status: RDS_RDMA_SUCCESS }]);
    expect(h.tp.rdmaOps.size).toBe(0);
    expect(h.drops).toEqual([]);
    const t2 = target();
    h.sender.xmit(h.cp, message(op(t2)) as never);
    const tag2 = h.calls.filter((c) => c[0] === 'rdma')[1]![1] as number;
    h.receiver.onCompletions(h.cp, 1, Int32Array.of(tag2, 10, 0));
    expect(t2.notes).toEqual([{ token: 5n, status: RDS_RDMA_REMOTE_ERROR }]);
    expect(h.drops).toHaveLength(1);
  });

  it('without notify: success is silent, a failure is reported only with RDS_RECVERR', () => {
    const quiet = target(false);
    op(quiet, { notify: false }).finish(RDS_RDMA_SUCCESS);
    op(quiet, { notify: false }).finish(RDS_RDMA_REMOTE_ERROR);
    expect(quiet.notes).toEqual([]);
    const recvErr = target(true);
    op(recvErr, { notify: false }).finish(RDS_RDMA_SUCCESS);
    op(recvErr, { notify: false }).finish(RDS_RDMA_CANCELED);
    expect(recvErr.notes).toEqual([{ token: 5n, status: RDS_RDMA_CANCELED }]);
  });
});

describe('RDMA regions and control messages', () => {
  function table() {
    const regs = new Map<number, { mem: Uint8Array; rw: boolean }>();
    let next = 1;
    const t = new MrTable({
      regMr: (_laddr, mem, rw) => {
        const handle = next++;
        regs.set(handle, { mem, rw });
        return { handle, rkey: 0x100 + handle, offset: handle === 3 ? 0x10 : 0 };
      },
      deregMr: (h) => {
        regs.delete(h);
      },
      atomics: () => true,
    });
    return { t, regs };
  }

  it('cookies are rkey | offset << 32; READWRITE asks for remote write; free, USE_ONCE and close release the registration', () => {
    const { t, regs } = table();
    const c1 = t.register('10.0.0.1', Buffer.alloc(10), RDS_RDMA_READWRITE);
    const c2 = t.register('10.0.0.1', Buffer.alloc(10), RDS_RDMA_USE_ONCE);
    const c3 = t.register('10.0.0.1', Buffer.alloc(10), 0);
    expect([c1, c2, c3]).toEqual([0x101n, 0x102n, (0x10n << 32n) | 0x103n]);
    expect([...regs.values()].map((r) => r.rw)).toEqual([true, false, false]);
    t.used(0x101); // not USE_ONCE: stays
    t.used(0x102); // USE_ONCE: released
    expect([...regs.keys()]).toEqual([1, 3]);
    expect(t.free(c2)).toBe(false);
    expect(t.free(c3)).toBe(true);
    t.clear();
    expect(regs.size).toBe(0);
  });

  it('atomic FADD/CSWP: exthdr RDMA, the addon kind and operands; alignment, size, device and mixing checked', () => {
    const { t } = table();
    const local = Buffer.alloc(8);
    const f = prepareRdmaControl(
      { atomic: { op: 'fadd', cookie: rdmaCookie(0x77, 8), remoteOffset: 8, local, add: 5n } },
      t,
      target(),
      () => true,
    );
    expect(f.exts.map((e) => e.type)).toEqual([RDS_EXTHDR_RDMA]);
    expect([f.op?.atomicKind, f.op?.compareAdd, f.op?.remoteAddr, f.op?.bytes]).toEqual([2, 5n, 16n, 8]);
    const c = prepareRdmaControl(
      { atomic: { op: 'cswp', cookie: rdmaCookie(0x77, 0), local, compare: 3n, swap: 9n } },
      t,
      target(),
      () => true,
    );
    expect([c.op?.atomicKind, c.op?.compareAdd, c.op?.swap]).toEqual([3, 3n, 9n]);
    const bad = (o: object, code: string, re: RegExp, atomics = true) =>
      expect(() => prepareRdmaControl(o as never, t, target(), () => atomics)).toThrow(
        expect.objectContaining({ code, message: expect.stringMatching(re) }),
      );
    bad({ atomic: { op: 'fadd', cookie: rdmaCookie(0x77, 4), local } }, 'EINVAL', /aligned/);
    bad({ atomic: { op: 'fadd', cookie: 0x77n, local: Buffer.alloc(16) } }, 'EINVAL', /8-byte/);
    bad({ atomic: { op: 'fadd', cookie: 0x77n, local }, rdmaDest: 1n }, 'EINVAL', /one RDMA or atomic/);
    bad({ atomic: { op: 'fadd', cookie: 0x77n, local } }, 'EOPNOTSUPP', /atomics/, false);
  });

  it('an atomic op is posted with its kind and operands before the SEND', () => {
    const h = harness();
    const o = op(target(), { bufs: 1 });
    o.atomicKind = 3;
    o.compareAdd = 4n;
    o.swap = 6n;
    const calls: unknown[][] = [];
    const ep = (h.sender as unknown as { ib: { ep: { postRdma: (...a: unknown[]) => number } } }).ib.ep;
    ep.postRdma = (...a: unknown[]) => {
      calls.push(a);
      return 0;
    };
    h.sender.xmit(h.cp, message(o) as never);
    expect(calls.map((c) => [c[2], c[6], c[7]])).toEqual([[3, 4n, 6n]]);
    expect(h.calls.map((c) => c[0])).toEqual(['send']);
  });

  it('rdma carries exthdr RDMA (the remote rkey), rdmaDest exthdr RDMA_DEST, and only a region of the socket', () => {
    const { t } = table();
    const cookie = t.register('10.0.0.1', Buffer.alloc(10), 0);
    const r = prepareRdmaControl(
      { rdma: { cookie: rdmaCookie(0xabc, 4), local: [Buffer.alloc(1)], write: true } },
      t,
      target(),
    );
    expect(r.exts.map((e) => [e.type, [...e.data]])).toEqual([[RDS_EXTHDR_RDMA, [0, 0, 0xa, 0xbc]]]);
    expect(r.op?.remoteAddr).toBe(4n);
    const d = prepareRdmaControl({ rdmaDest: cookie }, t, target());
    expect(d.op).toBeNull();
    expect(d.exts.map((e) => e.type)).toEqual([RDS_EXTHDR_RDMA_DEST]);
    expect(() => prepareRdmaControl({ rdmaDest: cookie + 1n }, t, target())).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    expect(() => prepareRdmaControl({ rdmaDest: cookie }, null, target())).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
  });
});
