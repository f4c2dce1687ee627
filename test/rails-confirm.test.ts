import { afterEach, expect, it } from 'vitest';
import { RdsStack } from '../lib/index.js';
import { TEST_TCP_PORT, bigBufferSocket, until } from './helpers.js';

// send({ confirm: true }) over a rail (a second link to the same peer): the same rule as on any
// path, the confirmation waits for the receiving application's read. Addresses: primary
// 127.29.240.1 <-> 127.29.240.2, rail 127.29.241.1 <-> 127.29.241.2 (test/conformance-confirm
// uses 127.29.x below 240).

let cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

const railUp = (s: RdsStack, peer: string): boolean =>
  s
    .connections()
    .some(
      (c) => c.transport === 'tcp' && c.peerAddress === peer && c.paths.some((p) => p.index === 8 && p.state === 'UP'),
    );
const railSent = (s: RdsStack, peer: string): number =>
  s
    .connections()
    .find((c) => c.transport === 'tcp' && c.peerAddress === peer)
    ?.paths.find((p) => p.index === 8)?.sentMessages ?? 0;

it('over a rail, with the primary path held down: a confirmation resolves only after the read, and rejects with ECONNRESET when the socket closes unread', async () => {
  const [a1, b1, ra, rb] = ['127.29.240.1', '127.29.240.2', '127.29.241.1', '127.29.241.2'];
  const common = { tcpPort: TEST_TCP_PORT, reconnectMaxDelayMs: 20, failoverGraceMs: 200, npaths: 1 };
  const A = new RdsStack(common);
  const B = new RdsStack(common);
  cleanups.push(
    () => A.close(),
    () => B.close(),
  );
  const b = await bigBufferSocket(B, b1, 4000);
  const b2 = await bigBufferSocket(B, b1, 4001);
  const a = await bigBufferSocket(A, a1, 4000);
  await A.addRail({ peer: b1, local: ra, remote: rb });
  await B.addRail({ peer: a1, local: rb, remote: ra });
  a.sendmsg(Buffer.from('up'), b.address());
  await b.recv({ timeout: 10000 });
  await until(() => railUp(A, b1) && railUp(B, a1), 'rail UP on both ends');
  // Only the rail is left to carry messages.
  A.disconnectPath(b1, 0);
  const before = railSent(A, b1);

  let state = 'pending';
  const read = a.send(Buffer.from('read me'), b.address(), { confirm: true, timeout: 20000 }).then(
    () => (state = 'ok'),
    (e: { code: string }) => (state = e.code),
  );
  let state2 = 'pending';
  const unread = a.send(Buffer.from('never read'), b2.address(), { confirm: true, timeout: 20000 }).then(
    () => (state2 = 'ok'),
    (e: { code: string }) => (state2 = e.code),
  );
  // Acknowledged (as queued, after ackDelayMaxMs): at B, unread, so neither is confirmed.
  await a.flush({ timeout: 20000 });
  await new Promise((r) => setImmediate(r));
  expect(railSent(A, b1)).toBeGreaterThanOrEqual(before + 2);
  expect([state, state2]).toEqual(['pending', 'pending']);
  expect((await b.recv({ timeout: 10000 })).data.toString()).toBe('read me');
  await read;
  expect(state).toBe('ok');
  expect(state2).toBe('pending');
  await b2.close();
  await unread;
  expect(state2).toBe('ECONNRESET');
});
