import { describe, expect, it } from 'vitest';
import { RdsError, RdsSocket, RdsStack } from '../lib/index.js';
import { RpcClient, RpcTimeoutError, serve } from '../lib/rpc/index.js';
import { TEST_TCP_PORT, until } from './helpers.js';

// What an rpc timeout means (issue 33): queued vs sent, strings, messages. Addresses 127.140.20-29.x
// (the rpc tests' range).
const PORT = 5000;

async function node(address: string): Promise<{ stack: RdsStack; sock: RdsSocket }> {
  const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
  const sock = new RdsSocket({ stack });
  await sock.bind({ address, port: PORT });
  return { stack, sock };
}

/** A server whose handler holds each request until release() and records what it ran. */
async function heldServer(address: string, opts: { concurrency?: number } = {}) {
  const n = await node(address);
  const ran: string[] = [];
  const held: (() => void)[] = [];
  const server = serve(
    n.sock,
    async (data) => {
      ran.push(data.toString());
      await new Promise<void>((r) => held.push(r));
      return data;
    },
    opts,
  );
  return { ...n, server, ran, held };
}

describe('rds-socket/rpc timeouts', () => {
  it('request() takes a string (UTF-8), as handlers may return one', async () => {
    const c = await node('127.140.20.1');
    const w = await node('127.140.20.2');
    serve(w.sock, (d) => `got ${d.toString('utf8')}`);
    const client = new RpcClient(c.sock, { timeout: 5000 });
    try {
      const r = await client.request({ address: '127.140.20.2', port: PORT }, 'héllo');
      expect(r.toString('utf8')).toBe('got héllo');
    } finally {
      client.close();
      await Promise.all([c.stack.close(), w.stack.close()]);
    }
  });

  it('a timeout without a signal says how long and that it means "not confirmed", not "(AbortSignal)"', async () => {
    const c = await node('127.140.21.1');
    const client = new RpcClient(c.sock, { timeout: 200 });
    try {
      // 127.140.21.9 has no node: the request is sent and never confirmed.
      const err = await client.request({ address: '127.140.21.9', port: PORT }, 'x').catch((e) => e);
      expect(err).toBeInstanceOf(RdsError);
      expect(err).toBeInstanceOf(RpcTimeoutError);
      expect(err.code).toBe('ETIMEDOUT');
      expect(err.sent).toBe(true);
      expect(err.message).not.toContain('AbortSignal');
      expect(err.message).toContain('request() to 127.140.21.9:5000 timed out after 200 ms: not confirmed');
      // With a signal, an abort names it.
      const ac = new AbortController();
      const p = client.request({ address: '127.140.21.9', port: PORT }, 'y', { signal: ac.signal });
      ac.abort();
      await expect(p).rejects.toThrow(/aborted \(AbortSignal\)/);
    } finally {
      client.close();
      await c.stack.close();
    }
  });

  it('a request still queued for a slot when queueTimeout or timeout fires is dropped from the queue, never sent, and says so', async () => {
    const c = await node('127.140.22.1');
    const w = await heldServer('127.140.22.2');
    const dest = { address: '127.140.22.2', port: PORT };
    const client = new RpcClient(c.sock, { maxInFlight: 1, timeout: 10000 });
    try {
      const first = client.request(dest, 'first');
      await until(() => w.held.length === 1, 'the first request to run');
      const t0 = Date.now();
      const byQueue = await client.request(dest, 'queued-1', { queueTimeout: 100 }).catch((e) => e);
      expect(Date.now() - t0).toBeLessThan(5000);
      expect(byQueue).toBeInstanceOf(RpcTimeoutError);
      expect(byQueue.code).toBe('ETIMEDOUT');
      expect(byQueue.sent).toBe(false);
      expect(byQueue.message).toContain('waited 100 ms (queueTimeout) for one of 1 in-flight slots');
      expect(byQueue.message).toContain('never sent');
      const byTimeout = await client.request(dest, 'queued-2', { timeout: 100 }).catch((e) => e);
      expect(byTimeout).toBeInstanceOf(RpcTimeoutError);
      expect(byTimeout.sent).toBe(false);
      expect(byTimeout.message).toContain('timed out after 100 ms still queued');
      expect(client.queued).toBe(0);
      expect(client.stats).toMatchObject({ sent: 1, timedOut: 2, timedOutQueued: 2 });

      // Neither reached the server: the next request runs right after the first.
      w.held.shift()!();
      expect((await first).toString()).toBe('first');
      const last = client.request(dest, 'last');
      await until(() => w.held.length === 1, 'the last request to run');
      w.held.shift()!();
      expect((await last).toString()).toBe('last');
      expect(w.ran).toEqual(['first', 'last']);
    } finally {
      client.close();
      await Promise.all([c.stack.close(), w.stack.close()]);
    }
  });

  it('a sent request that timed out is "not confirmed", not "not executed": a server that was stuck runs it once it resumes', async () => {
    const c = await node('127.140.23.1');
    // One handler at a time: while it is stuck, the server reads nothing more (as if stopped).
    const w = await heldServer('127.140.23.2', { concurrency: 1 });
    const dest = { address: '127.140.23.2', port: PORT };
    const client = new RpcClient(c.sock, { timeout: 300 });
    try {
      const outcomes = await Promise.all(
        ['a', 'b', 'c'].map((x) => client.request(dest, x).then(String, (e: RpcTimeoutError) => `${e.code} ${e.sent}`)),
      );
      expect(outcomes).toEqual(['ETIMEDOUT true', 'ETIMEDOUT true', 'ETIMEDOUT true']);
      expect(w.ran).toEqual(['a']);
      // The server resumes: what it had received runs, although its client gave up on it.
      for (let i = 0; i < 3; i++) {
        await until(() => w.held.length > 0, 'a handler to run');
        w.held.shift()!();
      }
      await until(() => w.server.stats.handled === 3, 'the given-up requests to run');
      expect(w.ran).toEqual(['a', 'b', 'c']);
      await until(() => client.stats.lateReplies === 3, 'their replies, dropped');
    } finally {
      client.close();
      await Promise.all([c.stack.close(), w.stack.close()]);
    }
  });
});
