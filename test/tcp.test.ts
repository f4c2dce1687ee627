import { execFileSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants, wire } from '../lib/index.js';
import { RawListener, rawConnect } from './raw-peer.js';
import { TEST_TCP_PORT, timeout, until } from './helpers.js';

// Wire behaviour of the TCP transport, checked byte by byte against a raw peer that plays the
// kernel's part. Addresses: 127.23.<test>.1 is always the smaller one.
const P = TEST_TCP_PORT;
let cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

async function node(address: string, port = 4000): Promise<{ stack: RdsStack; sock: RdsSocket }> {
  const stack = new RdsStack({ tcpPort: P });
  cleanups.push(() => stack.close());
  const sock = new RdsSocket({ stack });
  await sock.bind({ address, port });
  return { stack, sock };
}

async function listener(address: string): Promise<RawListener> {
  const l = await RawListener.listen(address, P);
  cleanups.push(() => l.close());
  return l;
}

describe('RDS/TCP wire behaviour (spec §2, §11)', () => {
  it('the smaller side connects, sends its congestion map first, then sequenced data with zero ack/credit/csum', async () => {
    const peer = await listener('127.23.1.2');
    const { sock, stack } = await node('127.23.1.1');
    sock.sendmsg(Buffer.from('one'), { address: '127.23.1.2', port: 4000 });
    sock.sendmsg(Buffer.from('two'), { address: '127.23.1.2', port: 4001 });
    const c = await peer.accept(0);
    expect(c.sock.remoteAddress).toBe('127.23.1.1');
    // No unsequenced hello (a kernel would count it in recv_drop_old_seq): the map first.
    const map = await c.next();
    expect(map.header).toMatchObject({
      sequence: 0,
      ack: 0,
      len: 8192,
      sport: 0,
      dport: 0,
      flags: 1,
      credit: 0,
      csum: 0,
    });
    expect(map.payload.every((b) => b === 0)).toBe(true);
    // Then the multipath probe a 7.0 kernel sends after every connect, as the first sequenced
    // frame of this node's life (queued ahead of the first message), so a peer learns our
    // generation before any data: GEN_NUM (no NPATHS yet), SPORT_IDX, and rds-socket's
    // capabilities last, where kernel parsers stop (type >= 16).
    const probe = await c.next();
    expect(probe.header).toMatchObject({ ack: 0, len: 0, sport: 1, dport: 0, flags: 0 });
    // The path's first number is the clock in microseconds (initialSequence 'clock'), then +1 each.
    expect(probe.header.sequence).toBeGreaterThan(Date.parse('2026-01-01') * 1000);
    const s0 = probe.header.sequence;
    const m1 = await c.next();
    expect(m1.header).toMatchObject({
      sequence: s0 + 1,
      ack: 0,
      len: 3,
      sport: 4000,
      dport: 4000,
      flags: 0,
      credit: 0,
      csum: 0,
    });
    expect(Buffer.from(m1.header.exthdr).every((b) => b === 0)).toBe(true);
    expect(m1.payload.toString()).toBe('one');
    const m2 = await c.next();
    expect(m2.header).toMatchObject({ sequence: s0 + 2, dport: 4001 });
    const ext = Buffer.from(probe.header.exthdr);
    // GEN_NUM, SPORT_IDX (we encode path indexes in source ports), and no NPATHS: the peer is not
    // known yet, and a kernel keeps the count it has (kernel-npaths-restart.test.ts)
    expect(ext[0]).toBe(constants.RDS_EXTHDR_GEN_NUM);
    expect(ext.readUInt32BE(1)).toBe(stack.genNum);
    expect(ext.subarray(5, 7).toString('hex')).toBe('0800');
    expect(ext[7]).toBe(constants.RDSSOCK_EXTHDR_CAPS);
    expect(ext[7]).toBeGreaterThanOrEqual(16);
    const caps = wire.decodeHandshake(wire.parseExtensions(ext)).rdsCaps!;
    expect((caps >> 4) & 0xf).toBe(8); // our real path count
    // Read reports for confirmations, and no hello needed from peers of this version.
    expect(caps & (constants.RDSSOCK_CAP_CONFIRM | constants.RDSSOCK_CAP_NO_HELLO)).toBe(
      constants.RDSSOCK_CAP_CONFIRM | constants.RDSSOCK_CAP_NO_HELLO,
    );
  });

  it('the larger side only pokes, then uses the connection the smaller side opens', async () => {
    const peer = await listener('127.23.2.1');
    const { sock, stack } = await node('127.23.2.2');
    sock.sendmsg(Buffer.from('from larger'), { address: '127.23.2.1', port: 4000 });
    const poke = await peer.accept(0);
    await poke.waitClosed();
    await expect(poke.next(100)).rejects.toThrow(); // nothing was sent on the poke
    expect(stack.counters.get('conn_poke_sent')).toBeGreaterThanOrEqual(1);
    // As the kernel does, the smaller side now connects to the larger one.
    const c = await rawConnect('127.23.2.1', '127.23.2.2', P);
    const first = (await c.mapThenProbe()).header.sequence;
    const m = await c.nextUser();
    expect(m.payload.toString()).toBe('from larger');
    expect(m.header.sequence).toBe(first + 1);
  });

  it('the smaller side resets a connection from a larger address and connects out itself', async () => {
    const peer = await listener('127.23.3.2');
    const { stack } = await node('127.23.3.1');
    // Our reset may arrive before the client's connect completes: either way the poke is refused.
    const poke = await rawConnect('127.23.3.2', '127.23.3.1', P).catch(() => null);
    if (poke) await poke.waitClosed();
    const c = await peer.accept(0);
    await c.mapThenProbe(); // our map on our own connection, then our probe
    expect(stack.counters.get('conn_poke_received')).toBe(1);
  });

  it('delivers from a smaller peer, suppresses retransmitted duplicates, accepts a restarted peer', async () => {
    const { sock, stack } = await node('127.23.4.2');
    const c = await rawConnect('127.23.4.1', '127.23.4.2', P);
    const hdr = { sport: 7000, dport: 4000 };
    c.send({ ...hdr, sequence: 5 }, Buffer.from('five'));
    c.send({ ...hdr, sequence: 5, flags: constants.RDS_FLAG_RETRANSMITTED }, Buffer.from('dup'));
    c.send({ ...hdr, sequence: 6, flags: constants.RDS_FLAG_RETRANSMITTED }, Buffer.from('six'));
    c.send({ ...hdr, sequence: 2 }, Buffer.from('restart'));
    const got: string[] = [];
    for (let i = 0; i < 3; i++) got.push((await sock.recv({ signal: timeout() })).data.toString());
    expect(got).toEqual(['five', 'six', 'restart']);
    expect(stack.counters.get('recv_drop_old_seq')).toBe(1);
    const m = await sock.recvmsg();
    expect(m).toBeNull();
  });

  it('an accepted connection reads into shared slabs too: messages from separate reads are views of one buffer', async () => {
    const { sock } = await node('127.23.11.2');
    const c = await rawConnect('127.23.11.1', '127.23.11.2', P);
    const hdr = { sport: 7000, dport: 4000 };
    c.send({ ...hdr, sequence: 1 }, Buffer.from('first'));
    const a = await sock.recv({ signal: timeout() });
    c.send({ ...hdr, sequence: 2 }, Buffer.from('second'));
    const b = await sock.recv({ signal: timeout() });
    c.send({ ...hdr, sequence: 3 }, Buffer.from('third'));
    const d = await sock.recv({ signal: timeout() });
    expect([a.data.toString(), b.data.toString(), d.data.toString()]).toEqual(['first', 'second', 'third']);
    // Node's 'data' path would give each read a buffer of its own (and a copy per split frame).
    // (After the first short read the connection is quiet: its 64 KiB slab gives way to a small
    // one, which the next reads share.)
    expect(d.data.buffer).toBe(b.data.buffer);
    expect(d.data.byteOffset).toBeGreaterThan(b.data.byteOffset);
  });

  it('applies a received congestion map: sendmsg to a congested port fails with ENOBUFS', async () => {
    const peer = await listener('127.23.5.2');
    const { sock } = await node('127.23.5.1');
    sock.sendmsg(Buffer.from('x'), { address: '127.23.5.2', port: 4000 });
    const c = await peer.accept(0);
    await c.next();
    const map = Buffer.alloc(8192);
    map[4000 >> 3] |= 1 << (4000 & 7);
    c.send({ flags: 1 }, map);
    await until(() => {
      try {
        sock.sendmsg(Buffer.from('y'), { address: '127.23.5.2', port: 4000 });
        return false;
      } catch (e) {
        return (e as { code?: string }).code === 'ENOBUFS';
      }
    }, 'ENOBUFS');
    // another port of the same peer is fine
    expect(sock.sendmsg(Buffer.from('z'), { address: '127.23.5.2', port: 4001 })).toBe(1);
    // a map of the wrong size is consumed and ignored
    c.send({ flags: 1 }, Buffer.alloc(100, 0));
    const clear = Buffer.alloc(8192);
    c.send({ flags: 1 }, clear);
    await sock.send(Buffer.from('w'), { address: '127.23.5.2', port: 4000 }, { signal: timeout() });
  });

  it('answers a ping with a pong on the same connection, and a multipath probe with NPATHS and GEN_NUM', async () => {
    const { stack } = await node('127.23.6.2');
    const c = await rawConnect('127.23.6.1', '127.23.6.2', P);
    await c.next(); // map
    c.send({ sequence: 1, sport: 1, dport: 0, exthdr: wire_npaths(8) });
    const own = await c.nextMatching((f) => f.header.sport === 1 && f.header.dport === 0);
    const pong = await c.nextMatching((f) => f.header.dport === 1);
    expect(pong.header).toMatchObject({ sport: 0, dport: 1, len: 0 });
    expect(pong.header.sequence).toBe(own.header.sequence + 1); // our own probe went first
    const ext = Buffer.from(pong.header.exthdr);
    expect(ext.subarray(0, 3).toString('hex')).toBe('050001');
    expect(ext[3]).toBe(constants.RDS_EXTHDR_GEN_NUM);
    expect(ext.readUInt32BE(4)).toBe(stack.genNum);
    c.send({ sequence: 2, sport: 5555, dport: 0 }, Buffer.from('payload is ignored'));
    const p2 = await c.nextMatching((f) => f.header.dport === 5555);
    expect(p2.header).toMatchObject({ sequence: pong.header.sequence + 1, sport: 0, len: 0 });
    expect(stack.connections()[0]!.npaths).toBe(1);
  });

  it('a protocol violation drops only that connection and is counted', async () => {
    const { sock, stack } = await node('127.23.7.9');
    const bad = await rawConnect('127.23.7.1', '127.23.7.9', P);
    const good = await rawConnect('127.23.7.2', '127.23.7.9', P);
    const violations: unknown[] = [];
    stack.on('protocol-error', (e) => violations.push(e));
    bad.send({ sequence: 1, sport: 9, dport: 4000, len: (1 << 20) + 1 });
    await bad.waitClosed();
    good.send({ sequence: 1, sport: 9, dport: 4000 }, Buffer.from('still here'));
    const m = await sock.recv({ signal: timeout() });
    expect(m).toMatchObject({ address: '127.23.7.2', port: 9 });
    expect(stack.counters.get('recv_drop_protocol_error')).toBe(1);
    expect(violations).toHaveLength(1);
    expect(good.closed).toBe(false);
  });

  it('reconnects when the peer drops the connection and keeps the sequence going', async () => {
    const peer = await listener('127.23.8.2');
    const { sock, stack } = await node('127.23.8.1');
    const dst = { address: '127.23.8.2', port: 4000 };
    sock.sendmsg(Buffer.from('a'), dst);
    const c1 = await peer.accept(0);
    const probe = await c1.nextProbe();
    const a = await c1.nextUser();
    expect(a.header.sequence).toBe(probe.header.sequence + 1); // after the probe
    c1.sock.destroy();
    const c2 = await peer.accept(1);
    expect((await c2.next()).header.flags).toBe(1); // a fresh map on the new connection, no hello
    sock.sendmsg(Buffer.from('b'), dst);
    // 'a' may come again (flagged RETRANSMITTED, same sequence) if TCP had not acknowledged it.
    let m = await c2.nextUser();
    if (m.payload.toString() === 'a') {
      expect(m.header).toMatchObject({ sequence: a.header.sequence, flags: constants.RDS_FLAG_RETRANSMITTED });
      m = await c2.nextUser();
    }
    expect(m.payload.toString()).toBe('b');
    expect(m.header.sequence).toBeGreaterThan(a.header.sequence);
    expect(stack.counters.get('conn_reset')).toBe(1);
    const info = stack.connections()[0]!;
    expect(info.paths[0]).toMatchObject({ state: 'UP', upCount: 2 });
  });

  it('refuses a TCP connection from one of its own addresses', async () => {
    const { stack } = await node('127.23.9.1');
    const other = new RdsSocket({ stack });
    await other.bind({ address: '127.23.9.5', port: 4000 });
    const c = await rawConnect('127.23.9.5', '127.23.9.1', P).catch(() => null);
    if (c) await c.waitClosed();
    expect(stack.counters.get('conn_refused_local_peer')).toBe(1);
  });
});

describe('receive tracking stays bounded where nothing is acknowledged', () => {
  it("a kernel peer's messages are not kept for acknowledgement once its handshake has arrived", async () => {
    const { sock, stack } = await node('127.23.11.2');
    const c = await rawConnect('127.23.11.1', '127.23.11.2', P);
    c.send({ sequence: 1, sport: 1, dport: 0, exthdr: wire_npaths(8) }); // a kernel's probe: no rds-socket capabilities
    for (let i = 0; i < 200; i++) c.send({ sequence: 2 + i, sport: 9, dport: 4000 }, Buffer.from('k'));
    for (let i = 0; i < 200; i++) await sock.recv({ signal: timeout() });
    const cp = stack.connFor('127.23.11.2', '127.23.11.1', stack.transports.get('tcp')!).paths[0]!;
    expect(cp.acks.rx.pending).toBe(0);
  });

  it('loopback messages are never tracked', async () => {
    const { sock, stack } = await node('127.23.12.1');
    const other = new RdsSocket({ stack });
    await other.bind({ address: '127.23.12.2', port: 4000 });
    for (let i = 0; i < 500; i++) sock.sendmsg(Buffer.from('l'), other.address());
    for (let i = 0; i < 500; i++) await other.recv({ signal: timeout() });
    const cp = stack.connFor('127.23.12.2', '127.23.12.1', stack.transports.get('loopback')!).paths[0]!;
    expect(cp.acks.rx.pending).toBe(0);
  });
});

describe('TCP keepalive as the kernel sets it (spec §2.8)', () => {
  it('5 s idle on every RDS/TCP socket (interval and probes set through the addon)', async () => {
    const peer = await listener('127.23.10.2');
    const { sock } = await node('127.23.10.1');
    sock.sendmsg(Buffer.from('k'), { address: '127.23.10.2', port: 4000 });
    const c = await peer.accept(0);
    await c.nextUser();
    let out = '';
    try {
      out = execFileSync('ss', ['-tno', 'state', 'established', 'src', '127.23.10.1'], { encoding: 'utf8' });
    } catch {
      return; // no ss on this machine
    }
    // e.g. timer:(keepalive,4.9sec,0): armed with the 5 s idle time.
    const m = /timer:\(keepalive,([\d.]+)(ms|sec)/.exec(out);
    expect(m, out).not.toBeNull();
    const secs = m![2] === 'ms' ? Number(m![1]) / 1000 : Number(m![1]);
    expect(secs).toBeLessThanOrEqual(5);
  });
});

function wire_npaths(n: number): Uint8Array {
  return Uint8Array.of(constants.RDS_EXTHDR_NPATHS, 0, n);
}
