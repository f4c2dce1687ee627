import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { RdsSocket, RdsStack } from '../lib/index.js';
import { registerMetrics, ACK_LATENCY_BUCKETS_SECONDS } from '../lib/metrics/index.js';
import { TEST_TCP_PORT, until } from './helpers.js';

// Addresses 127.141.x.y (this file's range).

/** The value of one sample line of a scrape, or undefined. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (m === null || m[1] !== name) continue;
    const got: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) got[l[1]!] = l[2]!;
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) return Number(m[3]);
  }
  return undefined;
}

describe('registerMetrics (prom-client)', () => {
  it('a scrape shows the counters, per-path state, messages, bytes, reconnects and the ack-latency histogram', async () => {
    const stackA = new RdsStack({ tcpPort: TEST_TCP_PORT, npaths: 1 });
    const stackB = new RdsStack({ tcpPort: TEST_TCP_PORT, npaths: 1 });
    const a = new RdsSocket({ stack: stackA });
    const b = new RdsSocket({ stack: stackB });
    await a.bind({ address: '127.141.0.1', port: 4000 });
    await b.bind({ address: '127.141.0.2', port: 4000 });
    const registry = new Registry();
    const stopA = registerMetrics(stackA, registry, { labels: { node: 'a' } });
    registerMetrics(stackB, registry, { labels: { node: 'b' } });
    try {
      const N = 50;
      for (let i = 0; i < N; i++) a.sendmsg(Buffer.alloc(100, i), { address: '127.141.0.2', port: 4000 });
      for (let i = 0; i < N; i++) await b.recv({ timeout: 5000 });
      await a.flush({ timeout: 5000 });
      const text = await registry.metrics();
      const path = { node: 'a', local: '127.141.0.1', peer: '127.141.0.2', transport: 'tcp', path: '0' };
      // Every line is valid exposition format and every name follows the conventions.
      for (const line of text.split('\n').filter((l) => l !== '' && !l.startsWith('#'))) {
        expect(line).toMatch(/^rds_[a-z0-9_]+(\{[^}]*\})? [0-9.e+-]+$/);
      }
      expect(text).toContain('# TYPE rds_send_queued_total counter');
      expect(text).toContain('# TYPE rds_path_ack_latency_seconds histogram');
      expect(text).toContain('# TYPE rds_path_state gauge');
      expect(sample(text, 'rds_send_queued_total', { node: 'a' })).toBe(stackA.counters.get('send_queued'));
      expect(sample(text, 'rds_recv_delivered_total', { node: 'b' })).toBe(stackB.counters.get('recv_delivered'));
      expect(sample(text, 'rds_path_state', { ...path, state: 'UP' })).toBe(1);
      expect(sample(text, 'rds_path_state', { ...path, state: 'DOWN' })).toBe(0);
      // Payload only; the sender's path carries the 50 messages (pings and handshakes are not counted as data).
      expect(sample(text, 'rds_path_sent_messages_total', path)).toBeGreaterThanOrEqual(N);
      expect(sample(text, 'rds_path_sent_bytes_total', path)).toBeGreaterThanOrEqual(N * 100);
      expect(
        sample(text, 'rds_path_received_messages_total', {
          ...path,
          node: 'b',
          local: '127.141.0.2',
          peer: '127.141.0.1',
        }),
      ).toBeGreaterThanOrEqual(N);
      expect(sample(text, 'rds_path_reconnects_total', path)).toBe(0);
      const count = sample(text, 'rds_path_ack_latency_seconds_count', path)!;
      expect(count).toBeGreaterThanOrEqual(N);
      expect(sample(text, 'rds_path_ack_latency_seconds_bucket', { ...path, le: '+Inf' })).toBe(count);
      expect(sample(text, 'rds_path_ack_latency_seconds_sum', path)).toBeGreaterThanOrEqual(0);
      // Buckets are cumulative.
      let prev = 0;
      for (const le of ACK_LATENCY_BUCKETS_SECONDS) {
        const v = sample(text, 'rds_path_ack_latency_seconds_bucket', { ...path, le: String(le) })!;
        expect(v).toBeGreaterThanOrEqual(prev);
        prev = v;
      }
      expect(count).toBeGreaterThanOrEqual(prev);

      // A reconnect shows up: B goes away and comes back on the same address.
      await stackB.close();
      const stackB2 = new RdsStack({ tcpPort: TEST_TCP_PORT, npaths: 1 });
      const b2 = new RdsSocket({ stack: stackB2 });
      await b2.bind({ address: '127.141.0.2', port: 4000 });
      try {
        a.sendmsg(Buffer.from('again'), { address: '127.141.0.2', port: 4000 });
        await b2.recv({ timeout: 10000 });
        await until(() => stackA.connections()[0]!.paths[0]!.upCount >= 2, 'the path to come up again');
        const text2 = await registry.metrics();
        expect(sample(text2, 'rds_path_reconnects_total', path)).toBeGreaterThanOrEqual(1);
        expect(sample(text2, 'rds_conn_reset_total', { node: 'a' })).toBe(stackA.counters.get('conn_reset'));
      } finally {
        await stackB2.close();
      }
      // Unregistering a stack removes its samples; the last one removes the metrics.
      stopA();
      expect(sample(await registry.metrics(), 'rds_send_queued_total', { node: 'a' })).toBeUndefined();
    } finally {
      await stackA.close();
      await stackB.close();
    }
  });

  it('refuses what is not a stack or a registry, reserved label names, and a stack registered twice', () => {
    const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
    const registry = new Registry();
    expect(() => registerMetrics({} as RdsStack, registry)).toThrow(/EINVAL/);
    expect(() => registerMetrics(stack, {} as Registry)).toThrow(/EINVAL/);
    expect(() => registerMetrics(stack, registry, { labels: { peer: 'x' } })).toThrow(/not allowed/);
    const stop = registerMetrics(stack, registry);
    expect(() => registerMetrics(stack, registry)).toThrow(/already registered/);
    stop();
    expect(registry.getMetricsAsArray()).toHaveLength(0);
    return stack.close();
  });
});
