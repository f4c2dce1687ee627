import { afterEach, describe, expect, it } from 'vitest';
import { RdsStack, constants } from '../lib/index.js';
import type { RdsConnection } from '../lib/core/connection.js';
import { TEST_TCP_PORT, bigBufferSocket, until } from './helpers.js';

// Found by the nemesis (npm run nemesis, seed 1 and 3, the rail pair): a socket whose last
// message on its path was cancelled (a send() timeout or signal) was free to move to another
// path while the messages before it still waited on the first, and its next message overtook
// them. A cancelled message says nothing about the ones before it; only an acknowledged one does.
// Loopback: primary 127.137.N.1 <-> .2, rail 127.137.(N+1).1 <-> .2.

let cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});
let net = 0;

async function railPair(policy: 'round-robin' | 'hash') {
  const n = (net += 2);
  const a1 = `127.137.${n}.1`;
  const b1 = `127.137.${n}.2`;
  const ra = `127.137.${n + 1}.1`;
  const rb = `127.137.${n + 1}.2`;
  // failoverGraceMs: nothing moves by failover during the test; only the policy could move the socket.
  const common = { tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 20, failoverGraceMs: 60_000, npaths: 1 };
  const A = new RdsStack({ ...common, pathPolicy: policy });
  const B = new RdsStack(common);
  cleanups.push(
    () => A.close(),
    () => B.close(),
  );
  const b = await bigBufferSocket(B, b1, 4000);
  const a = await bigBufferSocket(A, a1, 4000);
  await A.addRail({ peer: b1, local: ra, remote: rb });
  await B.addRail({ peer: a1, local: rb, remote: ra });
  a.sendmsg(Buffer.from('hello'), b.address());
  await b.recv({ timeout: 5000 });
  const railUp = (s: RdsStack, peer: string) =>
    s
      .connections()
      .find((c) => c.transport === 'tcp' && c.peerAddress === peer)
      ?.paths.find((p) => p.index === 8)?.state === 'UP';
  await until(() => railUp(A, b1) && railUp(B, a1), 'rail up');
  const conn: RdsConnection = A.connFor(a1, b1, A.transports.get('tcp')!);
  await until(() => conn.paths.every((p) => p?.tx.oldestUnacked() === undefined), 'paths idle');
  return { A, a, b, b1, conn };
}

describe('a cancelled message does not free its socket to change paths', () => {
  for (const policy of ['round-robin', 'hash'] as const) {
    it(`${policy}: the message after a timed-out confirm waits behind the ones before it`, async () => {
      const { A, a, b, b1, conn } = await railPair(policy);
      const port = a.address().port;
      a.sendmsg(Buffer.from('m0'), b.address());
      a.sendmsg(Buffer.from('m1'), b.address());
      // Their path is held down in the same turn, before it writes them or hears an ack.
      const p = conn.paths.find((x) => x !== undefined && [...x.tx.sendQueue].some((m) => m.sport === port))!;
      A.disconnectPath(b1, p.index);
      await until(() => p.state !== constants.RDS_CONN_UP, 'path held down');
      // The socket's last message on the held path: its confirmation times out, which cancels it.
      await expect(a.send(Buffer.from('m2'), b.address(), { confirm: true, timeout: 50 })).rejects.toMatchObject({
        code: 'ETIMEDOUT',
      });
      a.sendmsg(Buffer.from('m3'), b.address());
      A.reconnectPath(b1, p.index);
      const got: string[] = [];
      for (let i = 0; i < 3; i++) got.push((await b.recv({ timeout: 5000 })).data.toString());
      expect(got).toEqual(['m0', 'm1', 'm3']);
    });
  }
});
