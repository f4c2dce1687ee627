import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { FaultProxy } from '../lib/testing/index.js';
import { until } from './helpers.js';

// FaultProxy.partition(): what the failover fuzz (failover-fuzz.test.ts) relies on to play a
// network partition as the nemesis makes one with nftables. Addresses 127.29.90.x.

let cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

/** A target that records, per accepted connection, what it received and whether it closed. */
async function target(host: string): Promise<{ port: number; conns: { data: string; closed: boolean; s: Socket }[] }> {
  const conns: { data: string; closed: boolean; s: Socket }[] = [];
  const server: Server = createServer((s) => {
    const c = { data: '', closed: false, s };
    conns.push(c);
    s.on('data', (d) => (c.data += d.toString()));
    s.on('error', () => {});
    s.on('close', () => (c.closed = true));
  });
  await new Promise<void>((r) => server.listen(0, host, () => r()));
  cleanups.push(() => {
    for (const c of conns) c.s.destroy();
    return new Promise<void>((r) => server.close(() => r()));
  });
  return { port: (server.address() as { port: number }).port, conns };
}

async function client(proxy: FaultProxy): Promise<{ s: Socket; closed: () => boolean }> {
  const s = connect(proxy.address);
  let closed = false;
  s.on('error', () => {});
  s.on('close', () => (closed = true));
  cleanups.push(() => s.destroy());
  await new Promise<void>((r) => s.once('connect', () => r()));
  return { s, closed: () => closed };
}

/** A target on `host`, a proxy in front of it on `proxyHost`, and one client connected through both. */
async function through(host: string, proxyHost: string) {
  const t = await target(host);
  const proxy = await FaultProxy.start({ listen: { host: proxyHost, port: 0 }, target: { host, port: t.port } });
  cleanups.push(() => proxy.close());
  const c = await client(proxy);
  await until(() => t.conns.length === 1, 'the connection through');
  return { t, proxy, c };
}

describe('FaultProxy.partition', () => {
  it('holds bytes both ways, refuses new connections, and delivers what it held at the heal', async () => {
    const { t, proxy, c } = await through('127.29.90.2', '127.29.90.100');
    proxy.partition(true);
    c.s.write('held');
    const late = connect(proxy.address);
    late.on('error', () => {});
    await new Promise<void>((r) => late.once('close', () => r()));
    expect(proxy.refused).toBe(1);
    // Something observable must pass before asserting nothing arrived: a round trip to the proxy.
    await until(() => proxy.connections === 1 && proxy.refused === 1, 'the refusal counted');
    expect(t.conns[0]!.data).toBe('');
    proxy.partition(false);
    await until(() => t.conns[0]!.data === 'held', 'the held bytes delivered at the heal');
  });

  it('a close does not cross it: the other side stays open until the heal, then is reset, and its held bytes are dropped', async () => {
    const { t, proxy, c } = await through('127.29.90.3', '127.29.90.101');
    proxy.partition(true, 'forward');
    c.s.write('lost');
    c.s.destroy();
    await until(() => c.closed() && proxy.connections === 0, 'the client closed, and the proxy saw it');
    // The far side never hears of it while the partition lasts: it can still send (backward is open).
    t.conns[0]!.s.write('x');
    expect(t.conns[0]!.closed).toBe(false);
    proxy.partition(false);
    await until(() => t.conns[0]!.closed, 'the far side reset at the heal');
    expect(t.conns[0]!.data).toBe('');
  });

  it('a stall is its own hold: the heal leaves a stalled direction held, and resume() releases only its own direction', async () => {
    const { t, proxy, c } = await through('127.29.90.4', '127.29.90.102');
    let back = '';
    c.s.on('data', (d) => (back += d.toString()));
    proxy.stall('backward');
    proxy.stall('forward');
    c.s.write('f1');
    t.conns[0]!.s.write('b1');
    await until(() => proxy.heldBytes('forward') === 2 && proxy.heldBytes('backward') === 2, 'both held');
    proxy.resume('forward');
    await until(() => t.conns[0]!.data === 'f1', 'forward released');
    expect(proxy.heldBytes('backward')).toBe(2);
    proxy.partition(true);
    c.s.write('f2');
    await until(() => proxy.heldBytes('forward') === 2, 'forward held by the partition');
    proxy.partition(false);
    await until(() => t.conns[0]!.data === 'f1f2', 'forward delivered at the heal');
    expect(proxy.heldBytes('backward')).toBe(2);
    expect(back).toBe('');
    proxy.resume('backward');
    await until(() => back === 'b1', 'backward released at its resume');
  });
});
