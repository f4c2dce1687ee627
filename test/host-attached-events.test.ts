import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsError, RdsSocket, RdsStack } from '../lib/index.js';
import type { PeerEvent } from '../lib/core/ext/peer-state.js';
import type { PathStateEvent } from '../lib/core/types.js';
import { AttachedStack } from '../lib/host/attached-stack.js';
import { StackWatch } from '../lib/host/stack-watch.js';
import { optionsFromWire, optionsToWire } from '../lib/host/node-options.js';
import { ProtocolError } from '../lib/host/protocol-error.js';
import { TEST_TCP_PORT, timeout, until } from './helpers.js';

// What an attached stack answers without a round trip: its node's options (sent in the node's
// welcome) and its node's path and peer events (forwarded while a listener waits for them).
// Addresses 127.158.x.

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function served(opts: ConstructorParameters<typeof RdsStack>[0]): Promise<{ node: RdsStack; path: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'rds-attached-events-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'node.sock');
  const node = new RdsStack({ tcpPort: TEST_TCP_PORT, ...opts });
  cleanup.push(() => node.close());
  await node.serve({ path });
  return { node, path };
}

async function attachTo(path: string): Promise<RdsStack> {
  const attached = await RdsStack.attach(path);
  cleanup.push(() => attached.close());
  return attached;
}

describe("an attached stack's options", () => {
  it("are the node's, not the defaults, Infinity included", async () => {
    const { node, path } = await served({ peerDownMs: 321, heartbeatIntervalMs: 1234, failoverGraceMs: Infinity });
    const attached = await attachTo(path);
    expect(attached.options).toEqual(node.options);
    expect(attached.options.peerDownMs).toBe(321);
    expect(attached.options.heartbeatIntervalMs).toBe(1234);
    expect(attached.options.failoverGraceMs).toBe(Infinity);
    expect(attached.options.maxReconnectAttempts).toBe(Infinity);
    expect(Object.isFrozen(attached.options)).toBe(true);
  });

  it('are checked as the RdsStack constructor checks them: a welcome with options no stack could have is a protocol error', () => {
    const node = new RdsStack({ transports: [], maxReconnectAttempts: 7, failoverGraceMs: Infinity });
    cleanup.push(() => node.close());
    expect(optionsFromWire(JSON.parse(JSON.stringify(optionsToWire(node.options))))).toEqual(node.options);
    expect(() => optionsFromWire({ ...optionsToWire(node.options), peerDownMs: -1 })).toThrow(ProtocolError);
    expect(() => optionsFromWire({ ...optionsToWire(node.options), noSuchOption: 1 })).toThrow(ProtocolError);
    expect(() => optionsFromWire([1])).toThrow(ProtocolError);
  });

  it('before the node has answered, reading them is ENOTCONN saying to await attached()', async () => {
    const { path } = await served({ peerDownMs: 400 });
    const early = new AttachedStack(path);
    cleanup.push(() => early.close());
    let err: unknown;
    try {
      void early.options;
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RdsError);
    expect((err as RdsError).code).toBe('ENOTCONN');
    expect((err as RdsError).message).toMatch(/await stack\.attached\(\)/);
    await early.attached();
    expect(early.options.peerDownMs).toBe(400);
  });
});

describe("an attached stack's path and peer events", () => {
  it("hears the node's 'peer-down', 'state' and 'drop' when a peer goes away, and 'peer-up' when it comes back", async () => {
    const { node, path } = await served({ peerDownMs: 150, reconnectMaxDelayMs: 50 });
    const attached = await attachTo(path);
    const down: PeerEvent[] = [];
    const up: PeerEvent[] = [];
    const states: PathStateEvent[] = [];
    const drops: { peerAddress: string; reason: string }[] = [];
    const onNode: PeerEvent[] = [];
    node.on('peer-down', (e) => onNode.push(e));
    attached.on('peer-down', (e) => down.push(e));
    attached.on('peer-up', (e) => up.push(e));
    attached.on('state', (e) => states.push(e));
    attached.on('drop', (e) => drops.push(e));

    const peerStack = new RdsStack({ tcpPort: TEST_TCP_PORT });
    const peer = new RdsSocket({ stack: peerStack });
    await peer.bind({ address: '127.158.1.2', port: 4000 });
    const a = new RdsSocket({ stack: attached });
    await a.bind({ address: '127.158.1.1', port: 4000 });
    await a.send(Buffer.from('hi'), peer.address(), { signal: timeout() });
    await peer.recv({ signal: timeout() });
    await until(() => states.some((s) => s.peerAddress === '127.158.1.2' && s.to === 'UP'), "'state' UP");

    await peerStack.close();
    await until(() => down.length === 1, "'peer-down' on the attached stack");
    expect(down[0]).toEqual(onNode[0]);
    expect(down[0]!.address).toBe('127.158.1.2');
    expect(down[0]!.unreachableMs).toBeGreaterThanOrEqual(140);
    expect(drops.some((d) => d.peerAddress === '127.158.1.2' && d.reason.length > 0)).toBe(true);

    const back = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanup.push(() => back.close());
    const peer2 = new RdsSocket({ stack: back });
    await peer2.bind({ address: '127.158.1.2', port: 4000 });
    await a.send(Buffer.from('again'), peer2.address(), { signal: timeout() });
    await peer2.recv({ signal: timeout() });
    await until(() => up.length === 1, "'peer-up' on the attached stack");
    expect(up[0]!.address).toBe('127.158.1.2');
  });

  it("rebuilds a 'protocol-error' event's error as an RdsError, and a once() listener stops the forwarding after its event", async () => {
    const { node, path } = await served({});
    const attached = await attachTo(path);
    const errors: { peerAddress: string; error: Error }[] = [];
    const failovers: { to: number; moved: number }[] = [];
    attached.on('protocol-error', (e) => errors.push(e));
    attached.once('failover', (e) => failovers.push(e));
    await attached.report();
    const where = { localAddress: '127.158.3.1', peerAddress: '127.158.3.2', transport: 'tcp', path: 2 };
    // The node's stack emits them as its paths would (stack-events.ts).
    node.emit('protocol-error', { ...where, error: new RdsError('EPROTO', 'bad frame header') });
    node.emit('failover', { ...where, to: 3, moved: 5 });
    await until(() => errors.length === 1 && failovers.length === 1, 'the forwarded events');
    expect(errors[0]!.peerAddress).toBe('127.158.3.2');
    expect(errors[0]!.error).toBeInstanceOf(RdsError);
    expect((errors[0]!.error as RdsError).code).toBe('EPROTO');
    expect(errors[0]!.error.message).toMatch(/bad frame header/);
    expect(failovers[0]).toEqual({ ...where, to: 3, moved: 5 });
    await attached.report();
    expect(node.listenerCount('failover')).toBe(0);
    expect(node.listenerCount('protocol-error')).toBe(1);
  });

  it('asks the node only for events with listeners, and stops when the last one goes or the stack closes', async () => {
    const { node, path } = await served({});
    const attached = await attachTo(path);
    const fn = (): void => {};
    expect(node.listenerCount('peer-down')).toBe(0);
    attached.on('peer-down', fn);
    // Requests are answered in order: once report() answers, the watch has been set.
    await attached.report();
    expect(node.listenerCount('peer-down')).toBe(1);
    expect(node.listenerCount('state')).toBe(0);
    attached.once('state', fn);
    await attached.report();
    expect(node.listenerCount('state')).toBe(1);
    attached.off('peer-down', fn);
    attached.removeAllListeners('state');
    await attached.report();
    expect(node.listenerCount('peer-down')).toBe(0);
    expect(node.listenerCount('state')).toBe(0);

    attached.on('drop', fn);
    await attached.report();
    expect(node.listenerCount('drop')).toBe(1);
    await attached.close();
    await until(() => node.listenerCount('drop') === 0, "the node forgets a closed stack's watch");
  });

  it("refuses to watch what it does not forward (the node's 'error', or more names than there are events)", () => {
    const stack = new RdsStack({ transports: [] });
    cleanup.push(() => stack.close());
    const sent: unknown[] = [];
    const w = new StackWatch(stack, (m) => sent.push(m));
    expect(() => w.set(['error'])).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(() => w.set(new Array(8).fill('state'))).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(() => w.set('state')).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(stack.listenerCount('error')).toBe(0);
    w.set(['protocol-error']);
    stack.emit('protocol-error', {
      localAddress: '127.158.9.1',
      peerAddress: '127.158.9.2',
      transport: 'tcp',
      path: 0,
      error: new RdsError('EPROTO', 'x'.repeat(5000)),
    });
    expect(sent).toHaveLength(1);
    const m = sent[0] as { name: string; error: { code: string; message: string } };
    expect(m.name).toBe('protocol-error');
    expect(m.error.code).toBe('EPROTO');
    expect(m.error.message.length).toBe(1024);
    w.close();
    expect(stack.listenerCount('protocol-error')).toBe(0);
  });
});
