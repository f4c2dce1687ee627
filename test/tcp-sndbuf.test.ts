import { execFileSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsError, RdsSocket, RdsStack, TcpTransport } from '../lib/index.js';
import { carrierSndbuf, LARGE_WRITE, SAME_HOST_SNDBUF } from '../lib/transports/tcp-sndbuf.js';
import { TEST_TCP_PORT, timeout, until } from './helpers.js';

// The kernel send buffer of each TCP carrier (tcpSndbuf). Addresses 127.180.<test>.x. The buffer
// is read back with ss(8): skmem's "tb" is the socket's sk_sndbuf.
let cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

/** sk_sndbuf of every TCP socket from `local` (any port) to `remote`'s RDS port, as ss reports it. */
function sndbufs(local: string, remote: string): number[] {
  const out = execFileSync('ss', ['-tnmH', 'state', 'established', `src ${local}`, `dst ${remote}:${TEST_TCP_PORT}`], {
    encoding: 'utf8',
  });
  return [...out.matchAll(/\btb(\d+)/g)].map((m) => Number(m[1]));
}

async function pair(
  test: number,
  a: object,
  b: object = a,
): Promise<{ A: string; B: string; sa: RdsStack; y: RdsSocket }> {
  const A = `127.180.${test}.1`;
  const B = `127.180.${test}.2`;
  const sa = new RdsStack({ tcpPort: TEST_TCP_PORT, npaths: 1, ...a });
  const sb = new RdsStack({ tcpPort: TEST_TCP_PORT, npaths: 1, ...b });
  cleanups.push(
    () => sa.close(),
    () => sb.close(),
  );
  const x = new RdsSocket({ stack: sa });
  const y = new RdsSocket({ stack: sb });
  await x.bind({ address: A, port: 4000 });
  await y.bind({ address: B, port: 4000 });
  // A has the smaller address, so it connects: its carrier is the one from A to B's RDS port.
  await x.send(Buffer.from('up'), { address: B, port: 4000 }, { signal: timeout() });
  await y.recv({ signal: timeout() });
  await until(() => sndbufs(A, B).length > 0, 'the carrier in ss');
  return { A, B, sa, y };
}

describe('tcpSndbuf: the kernel send buffer of each TCP connection', () => {
  it("'auto' (the default) leaves a connection to a peer on this host autotuned until it writes a large message, then 128 KiB, fixed", async () => {
    const { A, B, sa: stackA, y } = await pair(1, {});
    // Small messages (a fan-in of 1 KiB ones lost a quarter of its throughput to the cap).
    expect(sndbufs(A, B)[0]).not.toBe(SAME_HOST_SNDBUF);
    const sa = new RdsSocket({ stack: stackA });
    await sa.bind({ address: A, port: 4001 });
    await sa.send(Buffer.alloc(LARGE_WRITE - 1), { address: B, port: 4000 }, { signal: timeout() });
    expect((await y.recv({ signal: timeout() })).data.length).toBe(LARGE_WRITE - 1);
    expect(sndbufs(A, B)[0]).not.toBe(SAME_HOST_SNDBUF);
    // The first large message caps it (head-of-line: one write of it held the node's thread).
    await sa.send(Buffer.alloc(LARGE_WRITE), { address: B, port: 4000 }, { signal: timeout() });
    expect((await y.recv({ signal: timeout() })).data.length).toBe(LARGE_WRITE);
    expect(sndbufs(A, B)).toEqual([SAME_HOST_SNDBUF]);
  });

  it('0 leaves it to the kernel (autotuning), a number sets it; the transport option wins', async () => {
    const auto = await pair(2, { tcpSndbuf: 0 });
    // Autotuning starts from net.ipv4.tcp_wmem's default (16 KiB here) and grows; it is never
    // pinned to what 'auto' would have set.
    expect(sndbufs(auto.A, auto.B)[0]).not.toBe(SAME_HOST_SNDBUF);
    const set = await pair(3, { tcpSndbuf: 262144 });
    expect(sndbufs(set.A, set.B)).toEqual([262144]);
    const own = await pair(4, { tcpSndbuf: 0, transports: [new TcpTransport({ tcpSndbuf: 196608 })] });
    expect(sndbufs(own.A, own.B)).toEqual([196608]);
  });

  it('refuses values that stall loopback TCP, and words other than auto', () => {
    for (const bad of [65536, 1, -1, 1.5, 'big']) {
      let err: unknown;
      try {
        new RdsStack({ tcpSndbuf: bad as number });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(RdsError);
      expect((err as RdsError).code).toBe('EINVAL');
      expect((err as RdsError).message).toMatch(/tcpSndbuf must be an integer 0 or >= 131072 or 'auto'/);
    }
    expect(() => new TcpTransport({ tcpSndbuf: 4096 })).toThrow(/TcpTransport option tcpSndbuf/);
  });

  it("'auto' picks by the peer's address: this host's or not", () => {
    expect(carrierSndbuf('auto', '127.9.9.9')).toEqual({ now: 0, atLarge: SAME_HOST_SNDBUF });
    expect(carrierSndbuf('auto', '::ffff:127.0.0.1')).toEqual({ now: 0, atLarge: SAME_HOST_SNDBUF });
    // TEST-NET-1 (RFC 5737) is never an address of this host.
    expect(carrierSndbuf('auto', '192.0.2.7')).toEqual({ now: 0, atLarge: 0 });
    expect(carrierSndbuf('auto', undefined)).toEqual({ now: 0, atLarge: 0 });
    expect(carrierSndbuf(0, '127.0.0.1')).toEqual({ now: 0, atLarge: 0 });
    expect(carrierSndbuf(262144, '192.0.2.7')).toEqual({ now: 262144, atLarge: 0 });
  });
});
