import { describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, RdsError } from '../lib/index.js';
import {
  RpcClient,
  RpcRemoteError,
  serve,
  encodeRpcHeader,
  decodeRpcHeader,
  RPC_REQUEST,
  RPC_REPLY,
  RPC_DUPLICATE,
  RPC_EXPIRED,
  RPC_HEADER_SIZE,
  type RpcServer,
} from '../lib/rpc/index.js';
import { TEST_TCP_PORT, until } from './helpers.js';

// Addresses 127.140.x.y (this file's range).
const PORT = 5000;

async function node(address: string, port = PORT): Promise<{ stack: RdsStack; sock: RdsSocket }> {
  const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
  const sock = new RdsSocket({ stack });
  await sock.bind({ address, port });
  return { stack, sock };
}

/** A worker whose handler records every request id it ran, to prove none runs twice. */
async function worker(address: string, name: string, runs: Map<string, number>, opts: { delayMs?: number } = {}) {
  const n = await node(address);
  const server = serve(n.sock, async (data, req) => {
    const k = `${req.instance}:${req.id}`;
    runs.set(k, (runs.get(k) ?? 0) + 1);
    if (opts.delayMs) await new Promise((r) => setTimeout(r, opts.delayMs));
    return Buffer.concat([Buffer.from(`${name}:`), data]);
  });
  return { ...n, server };
}

describe('rds-socket/rpc wire format', () => {
  it('encodes the 16-byte big-endian header a C program can read', () => {
    const h = encodeRpcHeader(RPC_REQUEST, 0xdeadbeef, 2 ** 40 + 7);
    expect(h.toString('hex')).toBe('5250' + '01' + '01' + 'deadbeef' + '00000100' + '00000007');
    expect(decodeRpcHeader(h)).toEqual({ type: RPC_REQUEST, instance: 0xdeadbeef, id: 2 ** 40 + 7 });
    // Not ours: wrong magic, version, type, instance 0, id 0, too short.
    for (const bad of [
      '5251010100000001000000000000000001',
      '5250020100000001000000000000000001',
      '5250010900000001000000000000000001',
      '5250010100000000000000000000000001',
      '5250010100000001000000000000000000',
      '52500101',
    ]) {
      expect(decodeRpcHeader(Buffer.from(bad, 'hex'))).toBeNull();
    }
  });
});

describe('rds-socket/rpc over TCP', () => {
  it('10,000 requests to two workers: every one answered once, by the worker it went to', async () => {
    const runs = new Map<string, number>();
    const c = await node('127.140.0.1');
    const w1 = await worker('127.140.0.2', 'w1', runs);
    const w2 = await worker('127.140.0.3', 'w2', runs);
    const client = new RpcClient(c.sock, { maxInFlight: 200, timeout: 20000 });
    try {
      const N = 10000;
      const dests = [
        { address: '127.140.0.2', port: PORT },
        { address: '127.140.0.3', port: PORT },
      ];
      const replies = await Promise.all(
        Array.from({ length: N }, (_, i) =>
          client.request(dests[i % 2]!, Buffer.from(String(i))).then((r) => r.toString()),
        ),
      );
      for (let i = 0; i < N; i++) expect(replies[i]).toBe(`${i % 2 === 0 ? 'w1' : 'w2'}:${i}`);
      expect(runs.size).toBe(N);
      expect([...runs.values()].every((v) => v === 1)).toBe(true);
      expect(w1.server.stats.handled + w2.server.stats.handled).toBe(N);
      expect(client.stats).toMatchObject({ sent: N, replied: N, failed: 0, timedOut: 0, lateReplies: 0, malformed: 0 });
      expect(client.inFlight).toBe(0);
    } finally {
      client.close();
      await Promise.all([c.stack.close(), w1.stack.close(), w2.stack.close()]);
    }
  }, 60000);

  it('concurrency limit: at most maxInFlight requests are outstanding, the rest wait in order', async () => {
    const c = await node('127.140.1.1');
    const w = await node('127.140.1.2');
    let running = 0;
    let peak = 0;
    const release: (() => void)[] = [];
    serve(w.sock, async () => {
      running++;
      peak = Math.max(peak, running);
      await new Promise<void>((r) => release.push(r));
      running--;
      return 'ok';
    });
    const client = new RpcClient(c.sock, { maxInFlight: 3, maxQueued: 5 });
    try {
      const dest = { address: '127.140.1.2', port: PORT };
      const ps = Array.from({ length: 8 }, () => client.request(dest, Buffer.from('x')));
      expect(client.inFlight).toBe(3);
      expect(client.queued).toBe(5);
      await expect(client.request(dest, Buffer.from('too many'))).rejects.toMatchObject({ code: 'EAGAIN' });
      // The first three reach the server together; the others only as earlier ones are answered.
      await until(() => release.length === 3, 'three handlers to run');
      let done = 0;
      while (done < 8) {
        await until(() => release.length > 0, 'a handler to start');
        expect(running).toBeLessThanOrEqual(3);
        release.shift()!();
        done++;
      }
      expect((await Promise.all(ps)).map(String)).toEqual(Array(8).fill('ok'));
      expect(peak).toBe(3);
    } finally {
      client.close();
      await Promise.all([c.stack.close(), w.stack.close()]);
    }
  });

  it('a handler error comes back as RpcRemoteError; a request to nobody times out and is removed from the send queue', async () => {
    const c = await node('127.140.2.1');
    const w = await node('127.140.2.2');
    serve(w.sock, (d) => {
      if (d.toString() === 'boom') throw new Error('no such thing');
      return d;
    });
    const client = new RpcClient(c.sock, { timeout: 300 });
    try {
      await expect(client.request({ address: '127.140.2.2', port: PORT }, Buffer.from('boom'))).rejects.toThrow(
        RpcRemoteError,
      );
      await expect(client.request({ address: '127.140.2.2', port: PORT }, Buffer.from('boom'))).rejects.toThrow(
        /no such thing/,
      );
      // 127.140.2.3 has no node: the message can never be delivered; the timeout cancels it.
      const cancelledBefore = c.stack.counters.get('send_cancelled');
      const err = await client.request({ address: '127.140.2.3', port: PORT }, Buffer.from('hello')).catch((e) => e);
      expect(err).toBeInstanceOf(RdsError);
      expect(err.code).toBe('ETIMEDOUT');
      expect(c.stack.counters.get('send_cancelled')).toBe(cancelledBefore + 1);
      await c.sock.flush({ timeout: 1000 }); // nothing of it is left queued
      // An AbortSignal cancels the same way.
      const ac = new AbortController();
      const p = client.request({ address: '127.140.2.3', port: PORT }, Buffer.from('x'), {
        signal: ac.signal,
        timeout: 5000,
      });
      ac.abort();
      await expect(p).rejects.toMatchObject({ code: 'ECANCELED' });
      await c.sock.flush({ timeout: 1000 });
      expect(client.stats.timedOut).toBe(1);
    } finally {
      client.close();
      await Promise.all([c.stack.close(), w.stack.close()]);
    }
  });

  it('exactly once: a retransmitted request id never runs the handler again (held reply, DUPLICATE, EXPIRED)', async () => {
    const raw = await node('127.140.3.1');
    const w = await node('127.140.3.2');
    const runs: number[] = [];
    let gate: (() => void) | null = null;
    const server: RpcServer = serve(
      w.sock,
      async (d, req) => {
        runs.push(req.id);
        if (d.toString() === 'slow')
          await new Promise<void>((r) => {
            gate = r;
          });
        return `done ${req.id}`;
      },
      { replyCacheSize: 2, dedupWindow: 10 },
    );
    const dest = { address: '127.140.3.2', port: PORT };
    const reqFrame = (id: number, body: string) => [encodeRpcHeader(RPC_REQUEST, 77, id), Buffer.from(body)];
    const next = async () => {
      const m = await raw.sock.recv({ timeout: 5000 });
      return { h: decodeRpcHeader(m.data)!, body: m.data.subarray(RPC_HEADER_SIZE).toString() };
    };
    try {
      // The same id twice while its handler runs: one run, one reply.
      await raw.sock.send(reqFrame(1, 'slow'), dest);
      await until(() => gate !== null, 'the handler to start');
      await raw.sock.send(reqFrame(1, 'slow'), dest);
      await until(() => server.stats.duplicates === 1, 'the duplicate to be read');
      gate!();
      expect(await next()).toEqual({ h: { type: RPC_REPLY, instance: 77, id: 1 }, body: 'done 1' });
      // Again after it finished: the held reply is sent again, the handler is not run.
      await raw.sock.send(reqFrame(1, 'slow'), dest);
      expect(await next()).toEqual({ h: { type: RPC_REPLY, instance: 77, id: 1 }, body: 'done 1' });
      // Ids out of order are fine; evicted replies give DUPLICATE, ids below the window EXPIRED.
      for (const id of [5, 3, 4]) {
        await raw.sock.send(reqFrame(id, 'x'), dest);
        expect((await next()).h).toMatchObject({ type: RPC_REPLY, id });
      }
      await raw.sock.send(reqFrame(5, 'x'), dest); // only the last two replies (3, 4) are held
      expect((await next()).h).toMatchObject({ type: RPC_DUPLICATE, id: 5 });
      await raw.sock.send(reqFrame(20, 'x'), dest);
      expect((await next()).h).toMatchObject({ type: RPC_REPLY, id: 20 });
      await raw.sock.send(reqFrame(2, 'x'), dest); // 20 - 10 >= 2: below the window, never run
      expect((await next()).h).toMatchObject({ type: RPC_EXPIRED, id: 2 });
      expect(runs).toEqual([1, 5, 3, 4, 20]);
      expect(server.stats).toMatchObject({ handled: 5, duplicates: 3, expired: 1 });
      // The same id from another instance or another source port is another request.
      await raw.sock.send([encodeRpcHeader(RPC_REQUEST, 78, 1), Buffer.from('x')], dest);
      expect((await next()).h).toMatchObject({ type: RPC_REPLY, instance: 78, id: 1 });
      expect(runs).toEqual([1, 5, 3, 4, 20, 1]);
    } finally {
      await Promise.all([raw.stack.close(), w.stack.close()]);
    }
  });

  it('a worker killed mid-run: its requests time out, the other worker answers, nothing is answered twice; restarted, it answers again', async () => {
    const runs = new Map<string, number>();
    const runsAfterRestart = new Map<string, number>();
    const c = await node('127.140.4.1');
    const w1 = await worker('127.140.4.2', 'w1', runs, { delayMs: 1 });
    // Slower than w1, so it is still mid-run when killed after 200 requests.
    let w2 = await worker('127.140.4.3', 'w2', runs, { delayMs: 5 });
    // Every request in flight at once, so requests to the dead worker do not hold slots that the
    // live one's requests wait for (a request's timeout counts from request(), queueing included).
    const client = new RpcClient(c.sock, { maxInFlight: 2000, timeout: 1500 });
    const dests = [
      { address: '127.140.4.2', port: PORT },
      { address: '127.140.4.3', port: PORT },
    ];
    const outcome = new Map<number, string>();
    const settle = (i: number, what: string) => {
      expect(outcome.has(i)).toBe(false); // a request settles once
      outcome.set(i, what);
    };
    try {
      const N = 2000;
      const all = Array.from({ length: N }, (_, i) =>
        client.request(dests[i % 2]!, Buffer.from(String(i))).then(
          (r) => settle(i, r.toString()),
          (e: RdsError) => settle(i, `error ${e.code}`),
        ),
      );
      await until(() => w2.server.stats.handled >= 200, 'worker 2 to be mid-run');
      await w2.stack.close(); // killed: no more reads, no replies
      await Promise.all(all);
      let ok1 = 0;
      let ok2 = 0;
      let lost2 = 0;
      for (let i = 0; i < N; i++) {
        const o = outcome.get(i)!;
        if (i % 2 === 0) {
          expect(o).toBe(`w1:${i}`);
          ok1++;
        } else if (o === `w2:${i}`) ok2++;
        else {
          expect(o).toMatch(/^error (ETIMEDOUT|ECONNREFUSED|ECONNRESET)$/);
          lost2++;
        }
      }
      expect(ok1).toBe(N / 2);
      expect(ok2).toBeGreaterThanOrEqual(1);
      expect(lost2).toBeGreaterThanOrEqual(1);
      expect(ok2).toBeLessThanOrEqual(w2.server.stats.handled);
      expect([...runs.values()].every((v) => v === 1)).toBe(true);
      expect(client.stats.timedOut + client.stats.failed).toBe(lost2);
      // Requests that timed out were cancelled, not left queued for the dead worker.
      await c.sock.flush({ timeout: 1000 });

      // Restarted on the same address: new requests are answered, each once.
      w2 = await worker('127.140.4.3', 'w2', runsAfterRestart, { delayMs: 1 });
      const again = await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          client.request(dests[1]!, Buffer.from(`r${i}`), { timeout: 10000 }).then(String),
        ),
      );
      expect(again).toEqual(Array.from({ length: 200 }, (_, i) => `w2:r${i}`));
      expect([...runsAfterRestart.values()].every((v) => v === 1)).toBe(true);
      expect(client.stats.lateReplies).toBe(0);
    } finally {
      client.close();
      await Promise.all([c.stack.close(), w1.stack.close(), w2.stack.close()]);
    }
  }, 60000);
});
