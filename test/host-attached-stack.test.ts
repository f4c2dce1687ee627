import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsError, RdsSocket, RdsStack } from '../lib/index.js';
import { registerMetrics } from '../lib/metrics/index.js';
import { TEST_TCP_PORT, timeout } from './helpers.js';

// An attached stack (RdsStack.attach()) holds none of the node's tables: report() asks the node,
// and the synchronous views throw EOPNOTSUPP instead of answering with empty local data.
// Addresses 127.157.x.

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function attachedToNode(): Promise<{ node: RdsStack; attached: RdsStack; path: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'rds-attached-stack-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'node.sock');
  const node = new RdsStack({ tcpPort: TEST_TCP_PORT });
  cleanup.push(() => node.close());
  await node.serve({ path });
  const attached = await RdsStack.attach(path);
  cleanup.push(() => attached.close());
  return { node, attached, path };
}

/** A socket of a stack of this process at 127.157.`net`.2 and one of `attached` at 127.157.`net`.1, port 4000. */
async function peerAndAttached(attached: RdsStack, net: number): Promise<{ peer: RdsSocket; a: RdsSocket }> {
  const peerStack = new RdsStack({ tcpPort: TEST_TCP_PORT });
  cleanup.push(() => peerStack.close());
  const peer = new RdsSocket({ stack: peerStack });
  await peer.bind({ address: `127.157.${net}.2`, port: 4000 });
  const a = new RdsSocket({ stack: attached });
  await a.bind({ address: `127.157.${net}.1`, port: 4000 });
  return { peer, a };
}

function expectNotHere(call: () => unknown, hint: RegExp): void {
  let err: unknown;
  try {
    call();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(RdsError);
  expect((err as RdsError).code).toBe('EOPNOTSUPP');
  expect((err as RdsError).message).toMatch(hint);
}

describe('an attached stack', () => {
  it("reports the node's counters, connections and peers, and they move when its sockets send", async () => {
    const { node, attached } = await attachedToNode();
    expect(attached).toBeInstanceOf(RdsStack);
    const { peer, a } = await peerAndAttached(attached, 1);

    const before = await attached.report();
    expect(before.counters.recv_delivered).toBe(0);
    expect(before.connections).toEqual([]);

    for (let i = 0; i < 3; i++) await a.send(Buffer.from(`m${i}`), peer.address(), { signal: timeout() });
    for (let i = 0; i < 3; i++) await peer.recv({ signal: timeout() });
    await peer.send(Buffer.from('back'), a.address(), { signal: timeout() });
    expect((await a.recv({ signal: timeout() })).data.toString()).toBe('back');

    const after = await attached.report();
    // The node's figures, as the node itself reads them.
    expect(after.counters.recv_delivered).toBe(1);
    expect(after.counters.recv_delivered).toBe(node.counters.get('recv_delivered'));
    expect(after.counters.send_queued).toBeGreaterThan(before.counters.send_queued);
    const conn = after.connections.find((c) => c.peerAddress === '127.157.1.2');
    expect(conn?.localAddress).toBe('127.157.1.1');
    expect(conn?.paths[0]?.sentMessages).toBeGreaterThanOrEqual(3);
    expect(after.peers.map((p) => p.address)).toContain('127.157.1.2');
    // A stack of this process answers the same call from its own tables.
    expect((await node.report()).connections).toEqual(node.connections());
  });

  it("exports the node's figures to Prometheus (registerMetrics reads report())", async () => {
    const { node, attached } = await attachedToNode();
    const { peer, a } = await peerAndAttached(attached, 3);
    const registry = new Registry();
    const stop = registerMetrics(attached, registry, { labels: { node: 'attached' } });
    cleanup.push(stop);
    await peer.send(Buffer.from('in'), a.address(), { signal: timeout() });
    await a.recv({ signal: timeout() });
    await a.send(Buffer.from('out'), peer.address(), { signal: timeout() });
    await peer.recv({ signal: timeout() });
    const text = await registry.metrics();
    const line = (name: string): string | undefined => text.split('\n').find((l) => l.startsWith(`${name}{`));
    expect(line('rds_recv_delivered_total')).toBe(
      `rds_recv_delivered_total{node="attached"} ${node.counters.get('recv_delivered')}`,
    );
    expect(node.counters.get('recv_delivered')).toBe(1);
    expect(text).toMatch(
      /rds_path_sent_messages_total\{node="attached",local="127\.157\.3\.1",peer="127\.157\.3\.2",transport="tcp",path="\d+"\} [1-9]/,
    );
  });

  it('refuses the synchronous views of the node with EOPNOTSUPP, saying what to call', async () => {
    const { attached, path } = await attachedToNode();
    expectNotHere(() => attached.stats(), /await stack\.report\(\)/);
    expectNotHere(() => attached.connections(), /report\(\)\)\.connections/);
    expectNotHere(() => attached.peers(), /report\(\)\)\.peers/);
    expectNotHere(() => attached.counters.get('recv_delivered'), /report\(\)\)\.counters\.recv_delivered/);
    expectNotHere(() => attached.counters.snapshot(), /report\(\)\)\.counters/);
    expectNotHere(() => attached.resetStats(), new RegExp(`rds-ctl --socket ${path} reset-stats`));
    expectNotHere(() => attached.reconnectPath('127.157.2.2', 0), /rds-ctl --socket .* reconnect 127\.157\.2\.2 0/);
    expectNotHere(() => attached.listRails(), /rails/);
    expectNotHere(() => attached.pathPolicy('127.157.2.2'), /path policies/);
    expectNotHere(() => attached.reclaimIdleConnections(), /connections/);
    await expect(attached.serve({ path: `${path}.2` })).rejects.toMatchObject({ code: 'EOPNOTSUPP' });
    await expect(attached.openControl()).rejects.toMatchObject({ code: 'EOPNOTSUPP' });
  });

  it('report() after close() is EBADF, and a dead node makes it ENETDOWN', async () => {
    const { node, attached } = await attachedToNode();
    await node.close();
    await expect(attached.report()).rejects.toMatchObject({ code: 'ENETDOWN' });
    await attached.close();
    await expect(attached.report()).rejects.toMatchObject({ code: 'EBADF' });
  });
});
