import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants } from '../lib/index.js';
import type { RdsConnection } from '../lib/core/connection.js';
import { TEST_TCP_PORT, until } from './helpers.js';

// Rails (issue #25) on loopback: primary addresses 127.132.N.1 <-> 127.132.N.2, the rail
// 127.132.(N+1).1 <-> 127.132.(N+1).2, a fresh N per test.

let cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});
let net = 0;

type Opts = ConstructorParameters<typeof RdsStack>[0];

async function railPair(optsA: Opts = {}, optsB: Opts = {}, declare = true) {
  const n = (net += 2);
  const a1 = `127.132.${n}.1`;
  const b1 = `127.132.${n}.2`;
  const ra = `127.132.${n + 1}.1`;
  const rb = `127.132.${n + 1}.2`;
  const common = { tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 20, failoverGraceMs: 200, npaths: 1 };
  const A = new RdsStack({ ...common, ...optsA });
  const B = new RdsStack({ ...common, ...optsB });
  cleanups.push(
    () => A.close(),
    () => B.close(),
  );
  const mk = async (stack: RdsStack, address: string, port: number): Promise<RdsSocket> => {
    const s = new RdsSocket({ stack });
    await s.bind({ address, port });
    s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 8 << 20);
    return s;
  };
  const railA = { peer: b1, local: ra, remote: rb };
  const railB = { peer: a1, local: rb, remote: ra };
  const b = await mk(B, b1, 4000);
  const a = await mk(A, a1, 4000);
  if (declare) {
    await A.addRail(railA);
    await B.addRail(railB);
  }
  return { A, B, a, b, a1, b1, ra, rb, railA, railB, mk, n };
}

const tcpConn = (s: RdsStack, peer: string) =>
  s.connections().find((c) => c.transport === 'tcp' && c.peerAddress === peer)!;
const pathInfo = (s: RdsStack, peer: string, index: number) => tcpConn(s, peer)?.paths.find((p) => p.index === index);
const railUp = (s: RdsStack, peer: string): boolean => pathInfo(s, peer, 8)?.state === 'UP';
const internalConn = (s: RdsStack, laddr: string, faddr: string): RdsConnection =>
  s.connFor(laddr, faddr, s.transport('tcp')!);

describe('rails: several links to one peer', () => {
  it('a rail declared on both ends comes up after the handshake and shows in connections()', async () => {
    const { A, B, a, b, a1, b1, ra, rb } = await railPair();
    a.sendmsg(Buffer.from('hello'), b.address());
    await b.recv({ timeout: 5000 });
    await until(() => railUp(A, b1) && railUp(B, a1), 'rail UP on both ends');
    const pa = pathInfo(A, b1, 8)!;
    expect(pa).toMatchObject({ rail: true, source: ra, destination: rb, state: 'UP' });
    expect(pathInfo(B, a1, 8)).toMatchObject({ rail: true, source: rb, destination: ra });
    expect(pathInfo(A, b1, 0)).toMatchObject({ rail: false, source: a1, destination: b1 });
    expect(A.listRails()).toEqual([{ peer: b1, local: ra, remote: rb }]);
  });
});
