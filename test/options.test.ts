import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsError, RdsSocket, RdsStack, TcpTransport } from '../lib/index.js';
import { DEFAULTS, resolveStackOptions } from '../lib/core/options.js';

// The stack's options (lib/core/options.ts): one defaults object, one rule per option, a
// refusal that names the option and says what it takes; and TCP's own knobs on the transport.
// Addresses 127.130.9.x.

function refusal(fn: () => unknown): RdsError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(RdsError);
    return e as RdsError;
  }
  throw new Error('expected an RdsError, nothing was thrown');
}

const stacks: RdsStack[] = [];
afterEach(async () => {
  await Promise.all(stacks.splice(0).map((s) => s.close()));
});

describe('stack options', () => {
  it('no options: exactly the defaults, frozen', () => {
    const r = resolveStackOptions({});
    expect(r).toEqual(DEFAULTS);
    expect(Object.isFrozen(r)).toBe(true);
    expect(DEFAULTS.tcpPort).toBe(16385);
    expect(DEFAULTS.npaths).toBe(8);
  });

  it('given values are kept, Infinity where it means never', () => {
    const r = resolveStackOptions({
      heartbeatIntervalMs: 0,
      peerDownMs: Infinity,
      failoverGraceMs: Infinity,
      npaths: 2,
      tcpPort: 1,
    });
    expect(r.heartbeatIntervalMs).toBe(0);
    expect(r.peerDownMs).toBe(Infinity);
    expect(r.failoverGraceMs).toBe(Infinity);
    expect(r.npaths).toBe(2);
    expect(r.tcpPort).toBe(1);
    expect(r.maxOwnQueued).toBe(DEFAULTS.maxOwnQueued);
  });

  it('a bad value is EINVAL naming the option and what it takes', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ maxUnackedPackets: 0 }, /RdsStack option maxUnackedPackets must be an integer >= 1, got 0/],
      [{ tcpPort: 70000 }, /tcpPort must be an integer 1\.\.65535, got 70000/],
      [{ heartbeatMissedLimit: 1.5 }, /heartbeatMissedLimit must be an integer >= 1, got 1\.5/],
      [{ ackDelayMaxMs: Number.NaN }, /ackDelayMaxMs must be an integer >= 0 or Infinity, got NaN/],
      [{ handshakeTimeoutMs: Infinity }, /handshakeTimeoutMs must be an integer >= 1, got Infinity/],
      [{ peerDownMs: 2 ** 31 }, /peerDownMs must be an integer 0\.\.2147483647 or Infinity \(a timer's limit\)/],
      [
        { maxPartialFrameBytes: 1000 },
        /maxPartialFrameBytes must be an integer >= 1048576 \(one frame of the largest message must always fit\)/,
      ],
      [{ maxConnections: '10' }, /maxConnections must be an integer >= 1, got 10/],
      [
        { reconnectMinDelayMs: 50, reconnectMaxDelayMs: 10 },
        /need 1 <= reconnectMinDelayMs <= reconnectMaxDelayMs, got 50 and 10/,
      ],
      [{ npaths: 3 }, /npaths must be 1, 2, 4 or 8/],
      [{ allowPeers: '10.0.0.0/8' }, /allowPeers must be an array/],
      [{ heartbeatInterval: 5 }, /unknown RdsStack option "heartbeatInterval"; did you mean heartbeatIntervalMs\?/],
    ];
    for (const [opts, message] of cases) {
      const e = refusal(() => new RdsStack(opts as never));
      expect(e.code, JSON.stringify(opts)).toBe('EINVAL');
      expect(e.message, JSON.stringify(opts)).toMatch(message);
    }
    expect(refusal(() => new RdsStack(null as never)).message).toMatch(/must be an object/);
  });
});

describe('TCP knobs on the TCP transport', () => {
  it('a bad value is EINVAL naming the transport option', () => {
    const e = refusal(() => new TcpTransport({ tcpPort: 0 }));
    expect(e.code).toBe('EINVAL');
    expect(e.message).toMatch(/TcpTransport option tcpPort must be an integer 1\.\.65535, got 0/);
    expect(refusal(() => new TcpTransport({ headerTimeoutMs: -1 })).message).toMatch(
      /TcpTransport option headerTimeoutMs/,
    );
    expect(refusal(() => new TcpTransport({ maxConnections: 0 })).message).toMatch(
      /TcpTransport option maxConnections/,
    );
  });

  it("the transport's tcpPort wins over the stack's, which is still taken when the transport gives none", async () => {
    const reach = (host: string, port: number) =>
      new Promise<boolean>((resolve) => {
        const s = connect({ host, port });
        s.once('connect', () => {
          s.destroy();
          resolve(true);
        });
        s.once('error', () => resolve(false));
      });
    const own = new RdsStack({ tcpPort: 26391, transports: [new TcpTransport({ tcpPort: 26392 })] });
    const legacy = new RdsStack({ tcpPort: 26393, transports: [new TcpTransport()] });
    stacks.push(own, legacy);
    await new RdsSocket({ stack: own }).bind({ address: '127.130.9.1', port: 4000 });
    await new RdsSocket({ stack: legacy }).bind({ address: '127.130.9.2', port: 4000 });
    expect(await reach('127.130.9.1', 26392)).toBe(true);
    expect(await reach('127.130.9.1', 26391)).toBe(false);
    expect(await reach('127.130.9.2', 26393)).toBe(true);
    // The stack's options still say what the stack was given.
    expect(own.options.tcpPort).toBe(26391);
  });
});
