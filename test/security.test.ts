import { connect, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LoopTransport, RdsStack, TcpTransport, wire } from '../lib/index.js';
import { rawConnect } from './raw-peer.js';
import { tlsMaterial } from '../bench/attacks/tls-material.mjs';
import { TEST_TCP_PORT, testNodes, until } from './helpers.js';

const { node, closeAll } = testNodes();
afterEach(closeAll);

describe('access control: allowPeers', () => {
  it('refuses and counts connections from peers outside the allowlist; allowed peers are unaffected', async () => {
    const b = await node('127.32.1.2', { allowPeers: ['127.32.1.1', '10.0.0.0/8'] });
    const a = await node('127.32.1.1');
    const c = await node('127.32.1.3');
    c.sock.sendmsg(Buffer.from('from c'), b.sock.address()); // c is larger: it pokes b, and is refused
    a.sock.sendmsg(Buffer.from('from a'), b.sock.address());
    expect((await b.sock.recv({ timeout: 5000 })).data.toString()).toBe('from a');
    await until(() => b.stack.counters.get('conn_refused_allowlist') >= 1, 'refusal');
    const d = await node('127.32.1.0'); // smaller: connects directly, also refused
    d.sock.sendmsg(Buffer.from('from d'), b.sock.address());
    await until(() => b.stack.counters.get('conn_refused_allowlist') >= 2, 'second refusal');
    expect(b.sock.recvmsg()).toBeNull();
  });

  it('rejects a malformed allowlist', () => {
    expect(() => new RdsStack({ allowPeers: ['10.0.0.0/40'] })).toThrow(/prefix/);
    expect(() => new RdsStack({ allowPeers: ['nonsense'] })).toThrow(/CIDR/);
  });
});

describe('resource bounds', () => {
  it('a flood of silent connections from many addresses is capped, and existing traffic keeps flowing', async () => {
    // headerTimeoutMs well above how long the flood takes to arrive on a loaded machine: the 8 that got
    // in must still hold their slots while the other 42 are refused.
    const b = await node('127.32.2.200', { maxUnidentifiedConnections: 8, headerTimeoutMs: 2000 });
    const a = await node('127.32.2.1');
    a.sock.sendmsg(Buffer.from('before'), b.sock.address());
    expect((await b.sock.recv({ timeout: 5000 })).data.toString()).toBe('before');
    const flood: Socket[] = [];
    for (let i = 10; i < 60; i++) {
      const s = connect({ host: '127.32.2.200', port: TEST_TCP_PORT, localAddress: `127.32.2.${i}` });
      s.on('error', () => {});
      flood.push(s);
    }
    await until(() => b.stack.counters.get('conn_refused_limit') >= 40, 'refusals');
    // The silent ones that got in are dropped once they fail to send a frame in time.
    await until(() => b.stack.counters.get('recv_drop_header_timeout') >= 8, 'silent connections dropped');
    for (let i = 0; i < 100; i++) a.sock.sendmsg(Buffer.alloc(100, i), b.sock.address());
    for (let i = 0; i < 100; i++) expect((await b.sock.recv({ timeout: 5000 })).data[0]).toBe(i);
    for (const s of flood) s.destroy();
  });

  it('drops a peer that sends half a header and stalls, and counts it', async () => {
    const b = await node('127.32.3.2', { headerTimeoutMs: 100 });
    const raw = await rawConnect('127.32.3.1', '127.32.3.2', TEST_TCP_PORT);
    const h = Buffer.alloc(48);
    wire.encodeHeader(h, 0, { sequence: 1, len: 5, sport: 1, dport: 4000 });
    raw.sock.write(h.subarray(0, 20));
    await raw.waitClosed(5000);
    expect(b.stack.counters.get('recv_drop_header_timeout')).toBe(1);
    expect(b.stack.counters.get('recv_drop_protocol_error')).toBe(1);
  });

  it('rejects limits that make no sense', () => {
    expect(() => new RdsStack({ maxConnections: 0 })).toThrow(/maxConnections/);
    expect(() => new RdsStack({ headerTimeoutMs: -1 })).toThrow(/headerTimeoutMs/);
  });
});

describe('TLS with mutual certificate authentication', () => {
  let pki: ReturnType<typeof tlsMaterial>;
  // Nodes a and b have certificates from the shared CA; rogue has one no one trusts.
  beforeAll(() => {
    pki = tlsMaterial(['a', 'b'], { selfSigned: ['rogue'] });
  });
  afterAll(() => pki.remove());

  const tlsNode = (address: string, who: string) =>
    node(address, { transports: [new TcpTransport({ tls: pki.buffers(who) }), new LoopTransport()] });

  it('nodes with certificates from the shared CA exchange messages both ways', async () => {
    const a = await tlsNode('127.32.4.1', 'a');
    const b = await tlsNode('127.32.4.2', 'b');
    a.sock.sendmsg(Buffer.from('a->b'), b.sock.address());
    expect((await b.sock.recv({ timeout: 10000 })).data.toString()).toBe('a->b');
    b.sock.sendmsg(Buffer.from('b->a'), a.sock.address());
    expect((await a.sock.recv({ timeout: 10000 })).data.toString()).toBe('b->a');
    await a.sock.flush({ timeout: 10000 });
  });

  it('a peer without a valid certificate can neither deliver nor read a message', async () => {
    const b = await tlsNode('127.32.5.2', 'b');
    const rogueLow = await tlsNode('127.32.5.1', 'rogue'); // smaller: connects to b
    const rogueHigh = await tlsNode('127.32.5.3', 'rogue'); // larger: b connects to it
    rogueLow.sock.sendmsg(Buffer.from('forged'), b.sock.address());
    b.sock.sendmsg(Buffer.from('secret'), rogueHigh.sock.address());
    await until(() => b.stack.counters.get('conn_refused_tls') >= 2, 'TLS refusals', 10000);
    expect(b.sock.recvmsg()).toBeNull();
    expect(rogueHigh.sock.recvmsg()).toBeNull();
    // A plain-TCP peer gets nowhere either.
    const plain = await node('127.32.5.0');
    plain.sock.sendmsg(Buffer.from('plain'), b.sock.address());
    await until(() => b.stack.counters.get('conn_refused_tls') >= 3, 'plain refused', 10000);
    expect(b.sock.recvmsg()).toBeNull();
  });
});
