import { describe, expect, it } from 'vitest';
import { portHash } from '../lib/core/ext/path-policy.js';
import { bigBufferSocket, cleanupsPerTest, payload, proxiedRailStacks, until } from './helpers.js';

// A message whose send() timed out after it went out is still in its carrier, and when that
// carrier dies its bytes may yet come out at the peer: a receiver that was stopped (SIGSTOP) takes
// the connection from its backlog when it wakes and reads it to the end, after whatever its other
// paths brought meanwhile. The sender used to forget such a message at the reset, so its socket's
// next message went on another path unheld and was read first (the nemesis, seed 6067's replays:
// the one reorder left on the rail pair, issue #35). Now a withdrawn record keeps its place.

const cleanups = cleanupsPerTest();

const RAIL = 8;

/** A port whose messages use path 0 while the rail is down, the rail once it is up (one lane and a rail). */
function portPath0ThenRail(from: number): number {
  for (let p = from; p < from + 1000; p++) if (portHash(p) % 2 === 1) return p;
  throw new Error('no such port');
}

describe('a cancelled message in a carrier that died keeps its place (withdrawn record)', () => {
  // The send times out in the carrier, then the carrier dies (the reset finds it cancelled); or
  // the carrier dies first and the send times out while the message waits to be resent (the
  // second replay on the first fix: the failover found it cancelled in the send queue).
  it.each([
    ['times out in its carrier, which then dies', true],
    ['times out waiting to be resent after its carrier died', false],
  ])(
    'a send that %s: its late copy, read after the next message came over the rail, is dropped',
    async (_what, timeoutFirst) => {
      // One lane through a FaultProxy whose stall acts as a stopped receiver, and the rail.
      const { A, B, proxy, b, a1, b1, path, up } = await proxiedRailStacks(200, 1, cleanups.push, {
        closeAfterHeld: true,
      });
      const s = await bigBufferSocket(A, a1, portPath0ThenRail(5000));
      s.sendmsg(payload(900, 64), b.address());
      expect((await b.recv({ timeout: 5000 })).data.readUInt32BE(0)).toBe(900);
      await until(() => up(RAIL), 'the rail up');
      // The rail goes down (B keeps it down): the socket's messages use path 0.
      B.disconnectPath(a1, RAIL);
      await until(() => !up(RAIL), 'the rail down');
      s.sendmsg(payload(901, 64), b.address());
      expect((await b.recv({ timeout: 5000 })).data.readUInt32BE(0)).toBe(901);

      // B's process stops reading path 0 (its kernel keeps what comes): #1 goes out and times out.
      proxy.stall('forward');
      const sent0 = path(0)!.sentMessages;
      const first = s.send(payload(1, 64), b.address(), { confirm: true, timeout: 300 });
      const timedOut = expect(first).rejects.toMatchObject({ code: 'ETIMEDOUT' });
      await until(() => path(0)!.sentMessages > sent0, '#1 sent on path 0');
      if (timeoutFirst) await timedOut;
      // Path 0's carrier dies with #1 in it (B gets the bytes and the close when it reads again).
      A.disconnectPath(b1, 0);
      await until(() => !up(0), 'path 0 down');
      await timedOut;

      // The rail is back and the socket's port hashes to it: #2 goes there.
      B.reconnectPath(a1, RAIL);
      await until(() => up(RAIL), 'the rail back');
      s.sendmsg(payload(2, 64), b.address());
      expect((await b.recv({ timeout: 5000 })).data.readUInt32BE(0)).toBe(2);

      // B reads path 0's old carrier now: #1 must not come after #2.
      const dup0 = B.counters.get('recv_drop_moved_dup');
      proxy.resume('forward');
      await until(
        // (Not poll()'s POLLIN: a congestion map sets it once, with nothing to read.)
        () => B.counters.get('recv_drop_moved_dup') > dup0 || b.receiveQueue().length > 0,
        "the old carrier's copy of #1 taken",
      );
      const late: number[] = [];
      for (let m = b.recvmsg(); m !== null; m = b.recvmsg()) late.push(m.data.readUInt32BE(0));
      expect(late).toEqual([]);
      // The record went in #1's place, and B took it without delivering anything.
      expect(A.counters.get('send_withdrawn')).toBe(1);
      expect(B.counters.get('recv_withdrawn')).toBe(1);
    },
  );
});
