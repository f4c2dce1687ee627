import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack } from '../lib/index.js';
import { LocalBackend } from '../lib/core/local-backend.js';
import { NodeSock, NodeStateError } from '../lib/host/node-sock.js';
import type { Client } from '../lib/host/server-client.js';
import { TEST_TCP_PORT, timeout, until } from './helpers.js';

// The host node's per-socket record: one checked state (IDLE, RUNNING, CLOSED); an illegal move is
// refused, counted and ends that one client, never the node. Addresses 127.158.x.

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

function nodeSock(): { s: NodeSock; counters: { stateRefused: number } } {
  const stack = new RdsStack({ transports: [] });
  cleanup.push(() => stack.close());
  const local = new LocalBackend(stack);
  const real = new RdsSocket({ stack, backend: local });
  const counters = { stateRefused: 0 };
  return { s: new NodeSock(1, real, local, counters), counters };
}

function refused(call: () => unknown): NodeStateError {
  try {
    call();
  } catch (e) {
    expect(e).toBeInstanceOf(NodeStateError);
    return e as NodeStateError;
  }
  throw new Error('the move was not refused');
}

describe('NodeSock', () => {
  it('moves IDLE -> RUNNING -> IDLE -> CLOSED, and refuses and counts every other move', () => {
    const { s, counters } = nodeSock();
    expect(s.state).toBe('IDLE');
    s.startRun();
    expect(s.running).toBe(true);
    // Two send loops on one backlog would hand its messages out of order.
    expect(refused(() => s.startRun()).message).toBe('socket 1: RUNNING -> RUNNING refused');
    expect(s.state).toBe('RUNNING');
    s.endRun();
    expect(s.state).toBe('IDLE');
    expect(refused(() => s.endRun()).message).toBe('socket 1: IDLE -> IDLE refused');
    s.close();
    expect(s.closed).toBe(true);
    expect(refused(() => s.close()).message).toBe('socket 1: CLOSED -> CLOSED refused');
    expect(refused(() => s.startRun()).message).toBe('socket 1: CLOSED -> RUNNING refused');
    expect(counters.stateRefused).toBe(4);
    expect(s.state).toBe('CLOSED');
  });

  it('a loop that ends after the socket closed leaves it CLOSED; the backlog and its bytes go with close()', () => {
    const { s } = nodeSock();
    const it1 = {
      data: Buffer.alloc(10),
      dest: { address: '127.158.0.2', port: 1 },
      flags: 0,
      cookie: undefined,
      confirm: false,
      id: 0,
      ac: null,
    };
    const it2 = { ...it1, data: Buffer.alloc(20), id: 7, ac: new AbortController() };
    s.queue(it1);
    s.queue(it2);
    expect([s.backlogLength, s.backlogBytes, s.accepted]).toEqual([2, 30, 30]);
    s.startRun();
    expect(s.take(it1)).toBe(true);
    expect([s.backlogLength, s.backlogBytes, s.sentMsgs]).toEqual([1, 20, 1]);
    expect(s.close()).toEqual([it2]);
    expect(it2.ac.signal.aborted).toBe(true);
    expect(s.backlogBytes).toBe(0);
    s.endRun();
    expect(s.state).toBe('CLOSED');
  });

  it('an illegal move in the node drops that client, counted; the node and its other clients go on', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rds-node-sock-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'node.sock');
    const nodeStack = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanup.push(() => nodeStack.close());
    const node = await nodeStack.serve({ path });
    const victim = await RdsStack.attach(path);
    cleanup.push(() => victim.close());
    const other = await RdsStack.attach(path);
    cleanup.push(() => other.close());
    const v = new RdsSocket({ stack: victim });
    await v.bind({ address: '127.158.1.1', port: 4000 });
    const a = new RdsSocket({ stack: other });
    const b = new RdsSocket({ stack: other });
    await a.bind({ address: '127.158.1.1', port: 4001 });
    await b.bind({ address: '127.158.1.1', port: 4002 });
    // A bug's effect, made by hand: the node closed the victim's socket but still lists it.
    const clients = (node as unknown as { clientSet: Set<Client> }).clientSet;
    const victimClient = [...clients].find((c) => c.sockCount().some((x) => x.bound === '127.158.1.1:4000'))!;
    victimClient.sockets.get(1)!.close();
    // The client's close reaches the node, which finds CLOSED -> CLOSED: refused, the client dropped.
    await v.close();
    await until(() => node.counters.dropped === 1, 'the victim to be dropped');
    expect(node.counters.stateRefused).toBe(1);
    expect(clients.has(victimClient)).toBe(false);
    await a.send(Buffer.from('still here'), b.address(), { signal: timeout() });
    expect((await b.recv({ signal: timeout() })).data.toString()).toBe('still here');
  });
});
