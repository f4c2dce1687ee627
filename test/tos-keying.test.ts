import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LoopTransport, RdsSocket, RdsStack, constants, type RdsTransport } from '../lib/index.js';
import type { RdsConnPath } from '../lib/core/path.js';
import type { RdsOutgoing } from '../lib/core/message.js';
import { until } from './helpers.js';

// A connection per TOS (issue 38), as connection.c keys rds_conn_create by (laddr, faddr,
// transport, tos): a socket's TOS is its transport's map of what SIOCRDSSETTOS asked (IB keeps
// it, TCP maps all to 0), and its messages go over the connection keyed by that TOS. The core
// only keeps the map's answer: two fake transports here, one keeping the TOS as IB does, one
// mapping every TOS to 0 as TCP does, carry nothing and record which connection each message
// took. Addresses 127.141.x.y; nothing goes on the network.
const { SIOCRDSSETTOS, SIOCRDSGETTOS, SOL_RDS, SO_RDS_TRANSPORT, RDS_TRANS_IB, RDS_TRANS_TCP } = constants;

type Sent = { tos: number; dport: number };

/** A transport that connects at once and records each socket message with its connection's TOS. */
function fake(transType: number, map: ((tos: number) => number) | null): RdsTransport & { sent: Sent[] } {
  const sent: Sent[] = [];
  return {
    name: transType === RDS_TRANS_IB ? 'fake-ib' : 'fake-tcp',
    transType,
    mpathCapable: false,
    userSelectable: true,
    sent,
    ...(map !== null ? { tosMap: map } : {}),
    peerKindHint: () => 'kernel',
    attach() {},
    async laddrCheck() {},
    initiates: () => true,
    connPathConnect(cp: RdsConnPath) {
      queueMicrotask(() => cp.connectComplete());
    },
    connPathShutdown() {},
    xmit(cp: RdsConnPath, msg: RdsOutgoing) {
      if (msg.fromSocket) sent.push({ tos: cp.conn.tos, dport: msg.dport });
      return true;
    },
    xmitCong: () => true,
    setRef() {},
    async close() {},
  };
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function stackWith(t: RdsTransport): RdsStack {
  const stack = new RdsStack({ transports: [t, new LoopTransport()] });
  stack.on('error', () => {});
  cleanups.push(() => stack.close());
  return stack;
}

async function bound(stack: RdsStack, address: string, port: number): Promise<RdsSocket> {
  const s = new RdsSocket({ stack });
  await s.bind({ address, port });
  cleanups.push(() => s.close());
  return s;
}

const L = '127.141.0.1';
const P = '127.141.0.2';

describe('a connection per TOS where the transport keeps the TOS (IB)', () => {
  it('sockets with TOS 0, 5 and 5 to one peer: two connections, each socket on the one keyed by its TOS', async () => {
    const t = fake(RDS_TRANS_IB, (tos) => tos);
    const stack = stackWith(t);
    const [s0, s5, s5b] = [await bound(stack, L, 4000), await bound(stack, L, 4001), await bound(stack, L, 4002)];
    expect(s5.ioctl(SIOCRDSSETTOS, 5)).toBe(0);
    expect(s5.ioctl(SIOCRDSGETTOS)).toBe(5); // IB keeps it (rs_tos)
    // A TOS kept is set once: the kernel refuses a second SIOCRDSSETTOS while rs_tos is non-zero.
    expect(() => s5.ioctl(SIOCRDSSETTOS, 6)).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/already has TOS 5/) }),
    );
    expect(s5b.ioctl(SIOCRDSSETTOS, 5)).toBe(0);
    s0.sendmsg(Buffer.from('zero'), { address: P, port: 7000 });
    s5.sendmsg(Buffer.from('five'), { address: P, port: 7001 });
    s5b.sendmsg(Buffer.from('five too'), { address: P, port: 7002 });
    await until(() => t.sent.length === 3, 'three messages sent', 5000);
    expect(t.sent.sort((a, b) => a.dport - b.dport)).toEqual([
      { tos: 0, dport: 7000 },
      { tos: 5, dport: 7001 },
      { tos: 5, dport: 7002 },
    ]);
    const conns = stack.connections().filter((c) => c.peerAddress === P);
    expect(conns.map((c) => c.tos).sort()).toEqual([0, 5]);
    // RDS_INFO_CONNECTIONS: one record per connection, c_tos after the transport name and flags.
    const buf = Buffer.alloc(42 * 8);
    const info = s0.getsockopt(SOL_RDS, constants.RDS_INFO_CONNECTIONS, buf);
    expect(info.recordSize).toBe(42);
    const recs = Array.from({ length: info.length / 42 }, (_, i) => buf.subarray(i * 42, i * 42 + 42));
    expect(recs.map((r) => r[41]).sort()).toEqual([0, 5]);
    expect(() => s5.ioctl(SIOCRDSSETTOS, 0)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
  });

  it("the accepting side's connections are keyed by the TOS it is told (connFor with the peer's TOS)", () => {
    const t = fake(RDS_TRANS_IB, (tos) => tos);
    const stack = stackWith(t);
    const c3 = stack.connFor(L, P, t, 3);
    expect(c3.tos).toBe(3);
    expect(stack.connFor(L, P, t, 3)).toBe(c3);
    expect(stack.connFor(L, P, t)).not.toBe(c3);
    expect(stack.findConn(L, P, t, 4)).toBeUndefined();
    expect(stack.findConn(L, P, t, 3)).toBe(c3);
  });

  it('to a local address the loopback connection is keyed by the TOS too; the message arrives', async () => {
    const t = fake(RDS_TRANS_IB, (tos) => tos);
    const stack = stackWith(t);
    const a = await bound(stack, L, 4100);
    const b = await bound(stack, P, 4101);
    a.ioctl(SIOCRDSSETTOS, 9);
    await a.send(Buffer.from('local'), b.address(), { timeout: 5000 });
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('local');
    const loop = stack.connections().filter((c) => c.transport === 'loopback');
    expect(loop.map((c) => [c.localAddress, c.tos])).toContainEqual([L, 9]);
  });
});

describe('one connection for every TOS where the transport maps them to 0 (TCP)', () => {
  it('a socket asking for TOS 5 keeps 0 and shares the connection of TOS 0', async () => {
    const t = fake(RDS_TRANS_TCP, () => 0);
    const stack = stackWith(t);
    const [s0, s5] = [await bound(stack, L, 4200), await bound(stack, L, 4201)];
    expect(s5.ioctl(SIOCRDSSETTOS, 5)).toBe(0);
    expect(s5.ioctl(SIOCRDSGETTOS)).toBe(0);
    s0.sendmsg(Buffer.from('a'), { address: P, port: 7000 });
    s5.sendmsg(Buffer.from('b'), { address: P, port: 7001 });
    await until(() => t.sent.length === 2, 'two messages sent', 5000);
    expect(t.sent.map((x) => x.tos)).toEqual([0, 0]);
    expect(stack.connections().filter((c) => c.peerAddress === P)).toHaveLength(1);
  });

  it('a transport without a map answers ENOTTY', async () => {
    const stack = stackWith(fake(RDS_TRANS_IB, null));
    const s = await bound(stack, L, 4300);
    expect(() => s.ioctl(SIOCRDSSETTOS, 1)).toThrow(expect.objectContaining({ code: 'ENOTTY' }));
  });
});

describe('a socket attached to a host node whose transport keeps the TOS', () => {
  it('the node hears of the TOS set after bind, and of one set before bind (with SO_RDS_TRANSPORT) with bind', async () => {
    const t = fake(RDS_TRANS_IB, (tos) => tos);
    const node = stackWith(t);
    const dir = mkdtempSync(join(tmpdir(), `rds-tos-${process.pid}-`));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    await node.serve({ path: join(dir, 'n.sock') });
    const attached = await RdsStack.attach(join(dir, 'n.sock'));
    cleanups.push(() => attached.close());
    const after = await bound(attached, L, 4400);
    expect(after.ioctl(SIOCRDSSETTOS, 5)).toBe(0);
    expect(after.ioctl(SIOCRDSGETTOS)).toBe(5);
    const before = new RdsSocket({ stack: attached });
    cleanups.push(() => before.close());
    before.setsockopt(SOL_RDS, SO_RDS_TRANSPORT, RDS_TRANS_IB);
    expect(before.ioctl(SIOCRDSSETTOS, 7)).toBe(0);
    await before.bind({ address: L, port: 4401 });
    await after.send(Buffer.from('five'), { address: P, port: 7005 }, { timeout: 5000 });
    await before.send(Buffer.from('seven'), { address: P, port: 7007 }, { timeout: 5000 });
    await until(() => t.sent.length === 2, 'two messages sent', 5000);
    expect(t.sent.sort((a, b) => a.dport - b.dport)).toEqual([
      { tos: 5, dport: 7005 },
      { tos: 7, dport: 7007 },
    ]);
    const report = await attached.report();
    expect(report.connections.filter((c) => c.peerAddress === P).map((c) => c.tos)).toEqual(
      expect.arrayContaining([5, 7]),
    );
  });
});
