import { afterEach, describe, expect, it } from 'vitest';
import { RdsStack } from '../lib/core/stack.js';
import { RDS_CTR } from '../lib/core/stats.js';
import { IB_LIMIT_DEFAULTS, ibAdmissionRefusal } from '../lib/transports/ib-admission.js';
import { IbTransport } from '../lib/transports/ib.js';
import { RDS_PROTOCOL_3_1, encodeIbPrivateData } from '../lib/wire/ib-private-data.js';
import { thrownCode } from './helpers.js';

// The bounds on the InfiniBand connections a peer can make a node hold (one queue pair and its
// rings each; one per TOS): connect requests go through the transport's rdma_cm handler against
// a fake endpoint that records accepts and rejects (the device tests are in test/ib/).
const LADDR = '10.9.0.1';

interface FakeEp {
  accepted: number[];
  rejected: number[];
}

function harness(opts: { maxConnections?: number; maxTosPerPeer?: number }) {
  const t = new IbTransport({ sendSlots: 4, recvSlots: 16, ...opts });
  const stack = new RdsStack({ transports: [t] });
  const ep: FakeEp & Record<string, unknown> = {
    accepted: [],
    rejected: [],
    setupQp: (_id: number, s: number, r: number, size: number) => Buffer.alloc((s + r) * size),
    postRecv: () => 0,
    accept(id: number) {
      this.accepted.push(id);
    },
    reject(id: number) {
      this.rejected.push(id);
    },
    unref: () => {},
    ref: () => {},
    destroyId: () => {},
    disconnect: () => {},
    close: () => {},
  };
  const inner = t as unknown as { ep: unknown; listeners: Map<string, number> };
  inner.ep = ep;
  inner.listeners.set(LADDR, 1);
  let nextId = 100;
  /** A connect request from `saddr` with `tos`, as rdma_cm hands it to the transport; returns its id. */
  const request = (saddr: string, tos: number): number => {
    const id = nextId++;
    const pdata = encodeIbPrivateData({
      saddr,
      daddr: LADDR,
      major: RDS_PROTOCOL_3_1 >> 8,
      minor: RDS_PROTOCOL_3_1 & 0xff,
      minorMask: 3,
      tos,
      ackSeq: 0,
      credit: 0,
    });
    (t as unknown as { onCmEvent: (...a: unknown[]) => void }).onCmEvent(
      id,
      'RDMA_CM_EVENT_CONNECT_REQUEST',
      0,
      pdata,
      { localAddress: LADDR },
    );
    return id;
  };
  const conns = (faddr: string) =>
    stack.connections().filter((c) => c.peerAddress === faddr && c.transport === 'infiniband');
  return { t, stack, ep, request, conns };
}

let open: RdsStack[] = [];
afterEach(async () => {
  for (const s of open) await s.close().catch(() => {});
  open = [];
});

describe('InfiniBand admission limits', () => {
  it('a peer gets connections for maxTosPerPeer TOS values; one more is refused, counted, and leaves no connection behind', () => {
    const h = harness({ maxTosPerPeer: 2 });
    open.push(h.stack);
    const a = h.request('10.9.0.2', 0);
    const b = h.request('10.9.0.2', 3);
    expect(h.ep.accepted).toEqual([a, b]);
    const c = h.request('10.9.0.2', 7);
    expect(h.ep.rejected).toEqual([c]);
    expect(h.stack.counters.get('conn_refused_limit')).toBe(1);
    expect(
      h
        .conns('10.9.0.2')
        .map((x) => x.tos)
        .sort(),
    ).toEqual([0, 3]);
    // Another peer has an allowance of its own.
    const d = h.request('10.9.0.3', 7);
    expect(h.ep.accepted).toContain(d);
  });

  it('a request for a TOS the peer already holds is not a new connection: the accept rules settle it, not the limit', () => {
    const h = harness({ maxTosPerPeer: 1 });
    open.push(h.stack);
    h.request('10.9.0.2', 5);
    h.request('10.9.0.2', 5); // a race with the first (still connecting): refused by the race rule
    expect(h.stack.counters.get('conn_refused_limit')).toBe(0);
    expect(h.stack.counters.get('ib_connect_raced')).toBe(1);
  });

  it('maxConnections bounds the queue pairs of all peers together', () => {
    const h = harness({ maxConnections: 3 });
    open.push(h.stack);
    for (let i = 0; i < 3; i++) h.request(`10.9.1.${i + 1}`, 0);
    expect(h.ep.accepted).toHaveLength(3);
    const over = h.request('10.9.1.9', 0);
    expect(h.ep.rejected).toEqual([over]);
    expect(h.stack.counters.get('conn_refused_limit')).toBe(1);
    expect(h.conns('10.9.1.9')).toEqual([]);
  });

  it('options are checked: EINVAL naming the option', () => {
    expect(thrownCode(() => new IbTransport({ maxTosPerPeer: 0 }))).toBe('EINVAL');
    expect(thrownCode(() => new IbTransport({ maxConnections: 1.5 }))).toBe('EINVAL');
    expect(() => new IbTransport({ maxTosPerPeer: -1 })).toThrow(/maxTosPerPeer/);
  });

  it('defaults: 1024 queue pairs, 16 TOS values per peer', () => {
    expect(IB_LIMIT_DEFAULTS).toEqual({ maxConnections: 1024, maxTosPerPeer: 16 });
    expect(ibAdmissionRefusal([], LADDR, '10.9.0.2', 0, IB_LIMIT_DEFAULTS)).toBeNull();
    expect(RDS_CTR.conn_refused_limit).toBeGreaterThanOrEqual(0);
  });
});
