import { afterEach, describe, expect, it } from 'vitest';
import { type RdsError, constants } from '../lib/index.js';
import { makePair, payload, until, type Pair } from './helpers.js';

const { SOL_RDS, SOL_SOCKET, SO_RCVBUF, SO_SNDBUF, RDS_CONG_MONITOR, POLLIN, POLLRDNORM, POLLOUT, POLLWRBAND } =
  constants;
let pair: Pair | null = null;
afterEach(async () => {
  await pair?.close();
  pair = null;
});

describe('congestion (spec §5)', () => {
  it('a slow reader congests its port; ENOBUFS; the monitor reports the right bit; the reader drains; send() resumes; nothing lost', async () => {
    pair = await makePair('tcp', 29, 1);
    const { a, b, stackB } = pair;
    b.setsockopt(SOL_SOCKET, SO_RCVBUF, 8192);
    a.setsockopt(SOL_SOCKET, SO_SNDBUF, 1 << 20);
    a.setsockopt(SOL_RDS, RDS_CONG_MONITOR, 1);
    let sent = 0;
    let enobufs = false;
    for (let i = 0; i < 5000 && !enobufs; i++) {
      try {
        a.sendmsg(payload(sent, 1000), b.address());
        sent++;
      } catch (e) {
        if ((e as RdsError).code === 'ENOBUFS') enobufs = true;
        else if ((e as RdsError).code !== 'EAGAIN') throw e;
      }
      if (i % 10 === 9) await new Promise((r) => setTimeout(r, 1));
    }
    expect(enobufs).toBe(true);
    expect(stackB.congMap(b.address().address).test(4000)).toBe(true);
    // Nothing to report yet: the port is still congested.
    expect(a.recvmsg()).toBeNull();
    const resumed = a.send(payload(sent, 1000), b.address(), { timeout: 10000 });
    // Drain: the port clears below half of SO_RCVBUF and the map goes out.
    const got: number[] = [];
    while (got.length < sent + 1) got.push((await b.recv({ timeout: 10000 })).data.readUInt32BE(0));
    expect(got).toEqual(Array.from({ length: sent + 1 }, (_, i) => i));
    expect(await resumed).toBe(1000);
    await until(() => (a.poll() & POLLIN) !== 0, 'congestion notification');
    const note = a.recvmsg()!;
    expect(note.data.length).toBe(0);
    expect(note.congestionUpdate).toBe(1n << BigInt(4000 % 64));
    expect(a.recvmsg()).toBeNull();
  });

  it('sets the bit strictly above SO_RCVBUF and clears it only below half (hysteresis)', async () => {
    pair = await makePair('loopback', 29, 2);
    const { a, b, stackA } = pair;
    b.setsockopt(SOL_SOCKET, SO_RCVBUF, 4000);
    const map = stackA.congMap(b.address().address);
    const send = async (n: number): Promise<void> => {
      a.sendmsg(Buffer.alloc(n), b.address());
      await until(() => (b.poll() & POLLIN) !== 0, 'delivery');
    };
    await send(4000); // exactly SO_RCVBUF: not above it
    expect(map.test(4000)).toBe(false);
    await send(1); // 4001 > 4000
    expect(map.test(4000)).toBe(true);
    // Read the 4000-byte message: 1 byte left, below 2000: clear.
    b.recvmsg();
    expect(map.test(4000)).toBe(false);
    // Between half and full the bit stays as it was.
    for (let i = 0; i < 3; i++) a.sendmsg(Buffer.alloc(1500), b.address());
    await until(() => map.test(4000), 'congested again');
    b.recvmsg(); // 1 + 3000 left: above 2000, still congested
    b.recvmsg();
    expect(map.test(4000)).toBe(true);
    b.recvmsg(); // 1501 left: below 2000
    expect(map.test(4000)).toBe(false);
  });

  it('poll(): POLLIN|POLLRDNORM|POLLWRBAND once after a map update without the monitor', async () => {
    pair = await makePair('tcp', 29, 3);
    const { a, b } = pair;
    expect(a.poll()).toBe(POLLOUT | constants.POLLWRNORM);
    b.setsockopt(SOL_SOCKET, SO_RCVBUF, 2048);
    a.sendmsg(Buffer.alloc(3000), b.address()); // congests b's port: a map update reaches a
    await until(() => (a.poll() & POLLWRBAND) !== 0, 'map update');
    expect(a.poll() & (POLLIN | POLLRDNORM | POLLWRBAND)).toBe(0); // reported once
    expect(a.recvmsg()).toBeNull();
  });

  it('closing a congested socket clears its bit', async () => {
    pair = await makePair('loopback', 29, 4);
    const { a, b, stackA } = pair;
    b.setsockopt(SOL_SOCKET, SO_RCVBUF, 1000);
    a.sendmsg(Buffer.alloc(2000), b.address());
    await until(() => stackA.congMap(b.address().address).test(4000), 'congested');
    await b.close();
    expect(stackA.congMap(b.address().address).test(4000)).toBe(false);
  });
});
