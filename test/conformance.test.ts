import { describe, expect, it } from 'vitest';
import { RdsError, RdsSocket, constants } from '../lib/index.js';
import { CONFORMANCE_KINDS, counter, pairPerTest, payload, raiseSndbuf, timeout, until } from './helpers.js';

// One suite, run unchanged over every transport (tests/helpers decides how the pair is made;
// npm run test:ib runs it over InfiniBand inside a Soft-RoCE guest).
const KINDS = CONFORMANCE_KINDS;
const NET = 21;

describe.each(KINDS)('conformance over %s', (kind) => {
  const { open } = pairPerTest(kind, NET);

  it('delivers a message with the sender address and bound port', async () => {
    const { a, b } = await open();
    expect(a.sendmsg(Buffer.from('hi'), b.address())).toBe(2);
    const m = await b.recv({ signal: timeout() });
    expect(m.data.toString()).toBe('hi');
    expect(m).toMatchObject({ address: a.address().address, port: 4000 });
  });

  it('keeps order and content for a stream of sizes 0..1 MiB', async () => {
    const { a, b } = await open();
    raiseSndbuf(a, 8 << 20);
    const sizes = [0, 1, 47, 48, 49, 4095, 4096, 4097, 65536, 100_000, 1 << 20, 3, 0];
    const got = (async () => {
      for (let round = 0; round < 4; round++) {
        for (let i = 0; i < sizes.length; i++) {
          const m = await b.recv({ signal: timeout() });
          expect(m.data.length).toBe(sizes[i]);
          expect(m.data.equals(payload(round * 100 + i, sizes[i]!))).toBe(true);
        }
      }
    })();
    for (let round = 0; round < 4; round++) {
      for (let i = 0; i < sizes.length; i++)
        await a.send(payload(round * 100 + i, sizes[i]!), b.address(), { signal: timeout() });
    }
    await got;
  });

  it('a received message keeps its bytes while the sender goes on (large frames are reused once acknowledged)', async () => {
    const { a, b } = await open();
    raiseSndbuf(a, 4 << 20);
    const N = 48;
    const kept: Buffer[] = [];
    const got = (async () => {
      for (let i = 0; i < 2 * N; i++) kept.push((await b.recv({ signal: timeout() })).data);
    })();
    const out = Buffer.alloc(65536);
    for (let i = 0; i < 2 * N; i++) {
      payload(i, 65536).copy(out);
      await a.send(out, b.address(), { signal: timeout() });
      if (i === N - 1) await a.flush({ signal: timeout() });
    }
    await got;
    for (let i = 0; i < 2 * N; i++) expect(kept[i]!.equals(payload(i, 65536)), `message ${i}`).toBe(true);
  });

  it('gathers an array of buffers into one message', async () => {
    const { a, b } = await open();
    a.sendmsg([Buffer.from('ab'), new Uint8Array([0x63]), Buffer.alloc(0), Buffer.from('d')], b.address());
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('abcd');
  });

  it('copies data at send time, like the kernel', async () => {
    const { a, b } = await open();
    const buf = Buffer.from('before');
    a.sendmsg(buf, b.address());
    buf.write('AFTER!');
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('before');
  });

  it('carries traffic both ways at once, each direction in order', async () => {
    const { a, b } = await open();
    const N = 500;
    const recvAll = async (s: RdsSocket, from: RdsSocket): Promise<void> => {
      for (let i = 0; i < N; i++) {
        const m = await s.recv({ signal: timeout() });
        expect(m.port).toBe(from.address().port);
        expect(m.data.readUInt32BE(0)).toBe(i);
      }
    };
    const ra = recvAll(a, b);
    const rb = recvAll(b, a);
    for (let i = 0; i < N; i++) {
      await a.send(payload(i, 4 + (i % 300)), b.address());
      await b.send(payload(i, 4 + (i % 200)), a.address());
    }
    await Promise.all([ra, rb]);
  });

  it('keeps order per socket pair with many sockets on each side', async () => {
    const p = await open();
    const senders = [p.a];
    const receivers = [p.b];
    for (let i = 0; i < 4; i++) {
      const s = new RdsSocket({ stack: p.stackA });
      await s.bind({ address: p.a.address().address, port: 0 });
      senders.push(s);
      const r = new RdsSocket({ stack: p.stackB });
      await r.bind({ address: p.b.address().address, port: 0 });
      receivers.push(r);
    }
    const N = 60;
    for (let i = 0; i < N; i++) {
      for (const s of senders) for (const r of receivers) await s.send(payload(i, 8 + (i % 50)), r.address());
    }
    for (const r of receivers) {
      const next = new Map<number, number>();
      for (let k = 0; k < N * senders.length; k++) {
        const m = await r.recv({ signal: timeout() });
        const want = next.get(m.port) ?? 0;
        expect(m.data.readUInt32BE(0)).toBe(want);
        next.set(m.port, want + 1);
      }
      expect([...next.values()]).toEqual(senders.map(() => N));
    }
  });

  it('answers a ping to port 0 with a zero-length pong from port 0', async () => {
    const { a, b, stackB } = await open();
    a.sendmsg(Buffer.from('up'), b.address()); // bring the connection up (and its handshake) first
    await b.recv({ signal: timeout() });
    await a.flush({ signal: timeout() });
    const pings = await counter(stackB, 'recv_ping');
    const pongs = await counter(stackB, 'send_pong');
    a.sendmsg(Buffer.alloc(0), { address: b.address().address, port: 0 });
    const pong = await a.recv({ signal: timeout() });
    expect(pong).toMatchObject({ address: b.address().address, port: 0 });
    expect(pong.data.length).toBe(0);
    expect(await counter(stackB, 'recv_ping')).toBe(pings + 1);
    expect(await counter(stackB, 'send_pong')).toBe(pongs + 1);
    expect(b.recvmsg()).toBeNull(); // the ping is not delivered to any socket
  });

  it('drops a message to a port nobody bound, counts it, and keeps going', async () => {
    const { a, b, stackB } = await open();
    a.sendmsg(Buffer.from('lost'), { address: b.address().address, port: 4999 });
    a.sendmsg(Buffer.from('kept'), b.address());
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('kept');
    expect(await counter(stackB, 'recv_drop_no_sock')).toBe(1);
  });

  it('receives with for await and ends the loop when the socket closes', async () => {
    const { a, b } = await open();
    for (let i = 0; i < 5; i++) a.sendmsg(payload(i, 16), b.address());
    const seen: number[] = [];
    for await (const m of b) {
      seen.push(m.data.readUInt32BE(0));
      if (seen.length === 5) void b.close();
    }
    expect(seen).toEqual([0, 1, 2, 3, 4]);
  });

  it('send() waits for room in the send buffer instead of failing with EAGAIN', async () => {
    const { a, b } = await open();
    raiseSndbuf(a, 0); // the kernel's minimum budget
    const N = 200;
    const got = (async () => {
      for (let i = 0; i < N; i++) expect((await b.recv({ signal: timeout() })).data.readUInt32BE(0)).toBe(i);
    })();
    for (let i = 0; i < N; i++) await a.send(payload(i, 1000), b.address(), { signal: timeout() });
    await got;
  });

  it('stops queueing at a congested port: ENOBUFS from sendmsg, send() resumes when it clears', async () => {
    const { a, b } = await open();
    b.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 4096);
    raiseSndbuf(a, 1 << 20);
    // Fill b's receive queue past its SO_RCVBUF; it becomes congested and says so.
    let sent = 0;
    let enobufs: RdsError | null = null;
    // Bounded by time, not tries: over an attached socket in another process the congestion map
    // reaches the sender a few hops later, and a loaded machine stretches that.
    const deadline = Date.now() + 20_000;
    for (let i = 0; Date.now() < deadline && enobufs === null; i++) {
      try {
        // Numbered by messages accepted, so a send retried after EAGAIN keeps the sequence whole.
        a.sendmsg(payload(sent, 1000), b.address());
        sent++;
      } catch (e) {
        if (e instanceof RdsError && e.code === 'ENOBUFS') enobufs = e;
        else if (e instanceof RdsError && e.code === 'EAGAIN') await new Promise((r) => setTimeout(r, 2));
        else throw e;
      }
      if (i % 20 === 19) await new Promise((r) => setImmediate(r));
    }
    expect(enobufs?.code).toBe('ENOBUFS');
    const late = a.send(payload(sent, 1000), b.address(), { signal: timeout() });
    for (let i = 0; i <= sent; i++) expect((await b.recv({ signal: timeout() })).data.readUInt32BE(0)).toBe(i);
    expect(await late).toBe(1000);
  });

  it('close() releases the port, rejects a pending recv() and later calls', async () => {
    const { b, stackB } = await open();
    const addr = b.address();
    const pending = b.recv();
    await b.close();
    await expect(pending).rejects.toMatchObject({ code: 'EBADF' });
    expect(() => b.sendmsg(Buffer.alloc(1), addr)).toThrow(RdsError);
    const again = new RdsSocket({ stack: stackB });
    await again.bind(addr);
    expect(again.address()).toEqual(addr);
  });

  it('recv() honours an AbortSignal timeout with ETIMEDOUT and leaves the socket usable', async () => {
    const { a, b } = await open();
    await expect(b.recv({ signal: AbortSignal.timeout(30) })).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    a.sendmsg(Buffer.from('after'), b.address());
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('after');
  });

  it('emits readable, and poll() reports POLLIN then clears it', async () => {
    const { a, b } = await open();
    expect(b.poll() & constants.POLLIN).toBe(0);
    expect(b.poll() & constants.POLLOUT).toBe(constants.POLLOUT);
    const readable = new Promise<void>((r) => b.once('readable', r));
    a.sendmsg(Buffer.from('x'), b.address());
    await readable;
    expect(b.poll() & (constants.POLLIN | constants.POLLRDNORM)).toBe(constants.POLLIN | constants.POLLRDNORM);
    expect(b.recvmsg()?.data.toString()).toBe('x');
    expect(b.poll() & constants.POLLIN).toBe(0);
  });

  it('poll() reports POLLWRBAND, with POLLIN, once after each congestion map received (not with RDS_CONG_MONITOR)', async () => {
    const { a, b } = await open();
    const WR = constants.POLLWRBAND;
    // Each side sends its whole map when a path comes up, and that map is reported too: let the
    // connections come up and take that report first, so the one below is the congestion's (over
    // IB the first map was seen arriving in the middle of the loop, on a busy machine). A round
    // trip: b's map comes before b's reply (over loopback, each direction is a connection of its own).
    a.sendmsg(Buffer.from('warm-up'), b.address());
    const m = await b.recv({ signal: timeout() });
    b.sendmsg(Buffer.from('reply'), { address: m.address, port: m.port });
    await a.recv({ signal: timeout() });
    await until(() => (a.poll() & WR) !== 0, "b's first map");
    expect(a.poll() & WR).toBe(0);
    // b reads nothing and has a small receive buffer: its port congests and a's node hears so.
    b.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 4096);
    let sent = 0;
    let mask = 0;
    for (let i = 0; i < 2000 && (mask & WR) === 0; i++) {
      try {
        a.sendmsg(Buffer.alloc(1024), b.address());
        sent++;
      } catch (e) {
        if (!(e instanceof RdsError) || (e.code !== 'ENOBUFS' && e.code !== 'EAGAIN')) throw e;
      }
      await new Promise((r) => setTimeout(r, 2));
      mask = a.poll();
    }
    expect(mask & (WR | constants.POLLIN)).toBe(WR | constants.POLLIN);
    // Once per map: the next poll() has no POLLWRBAND (a has no message of its own to read).
    expect(a.poll() & (WR | constants.POLLIN)).toBe(0);
    // b reads everything: its port clears, and that map is reported too.
    for (let got = 0; got < sent; got++) await b.recv({ signal: timeout() });
    await until(() => (a.poll() & WR) !== 0, 'POLLWRBAND after the uncongestion map', 10000);
    // With RDS_CONG_MONITOR the maps come as messages (congestionUpdate), not as POLLWRBAND.
    a.setsockopt(constants.SOL_RDS, constants.RDS_CONG_MONITOR, 1);
    expect(a.poll() & WR).toBe(0);
  });

  it('stamps messages with SO_TIMESTAMP', async () => {
    const { a, b } = await open();
    b.setsockopt(constants.SOL_SOCKET, constants.SO_TIMESTAMP, 1);
    const before = Date.now();
    a.sendmsg(Buffer.from('t'), b.address());
    const m = await b.recv({ signal: timeout() });
    expect(m.timestamp).toBeGreaterThanOrEqual(before - 1);
    expect(m.timestamp).toBeLessThanOrEqual(Date.now() + 1);
  });

  it('MSG_ZEROCOPY: messages arrive intact and every cookie completes once, after the peer has it (TCP sockets only)', async () => {
    const { a, b } = await open();
    a.setsockopt(constants.SOL_SOCKET, constants.SO_ZEROCOPY, 1);
    a.setsockopt(constants.SOL_RDS, constants.RDS_CONG_MONITOR, 1); // POLLIN only for what recvmsg returns
    const zc = { flags: constants.MSG_ZEROCOPY };
    if (kind === 'ib') {
      expect(() => a.sendmsg(Buffer.from('x'), b.address(), { ...zc, zcopyCookie: 1 })).toThrow(
        expect.objectContaining({ code: 'EOPNOTSUPP' }),
      );
      // As in the kernel, the flag alone (SO_ZEROCOPY off) is ignored: the data is copied.
      a.setsockopt(constants.SOL_SOCKET, constants.SO_ZEROCOPY, 0);
      expect(a.sendmsg(Buffer.from('copied'), b.address(), zc)).toBe(6);
      expect((await b.recv({ signal: timeout() })).data.toString()).toBe('copied');
      return;
    }
    raiseSndbuf(a, 8 << 20);
    const sizes = [0, 1, 48, 4096, 65536, 100_000, 1 << 20];
    const bufs = sizes.map((n, i) => payload(i, n));
    for (let i = 0; i < sizes.length; i++) a.sendmsg(bufs[i]!, b.address(), { ...zc, zcopyCookie: 1000 + i });
    a.sendmsg([payload(7, 3000), Buffer.alloc(0), payload(8, 5)], b.address(), { ...zc, zcopyCookie: 1007 });
    for (let i = 0; i < sizes.length; i++)
      expect((await b.recv({ signal: timeout() })).data.equals(payload(i, sizes[i]!))).toBe(true);
    expect((await b.recv({ signal: timeout() })).data.equals(Buffer.concat([payload(7, 3000), payload(8, 5)]))).toBe(
      true,
    );
    const done: number[] = [];
    while (done.length < 8) {
      const m = await a.recv({ signal: timeout() });
      expect(m).toMatchObject({ address: '', port: 0 });
      expect(m.data.length).toBe(0);
      done.push(...m.zcopyCompletions!);
    }
    expect(done.sort()).toEqual([1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007]);
    expect(a.poll() & constants.POLLIN).toBe(0);
    // Released buffers are the caller's again: rewriting them changes nothing the peer got.
    bufs[5]!.fill(0);
    a.sendmsg(Buffer.from('after'), b.address());
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('after');
  });

  it('flush() resolves once every queued message is acknowledged', async () => {
    const { a, b } = await open();
    for (let i = 0; i < 50; i++) a.sendmsg(payload(i, 2000), b.address());
    await a.flush({ signal: timeout() });
    for (let i = 0; i < 50; i++) expect((await b.recv({ signal: timeout() })).data.readUInt32BE(0)).toBe(i);
  });
});
