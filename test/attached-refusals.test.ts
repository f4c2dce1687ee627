// An attached socket's calls that are not waited for (open, setsockopt, a constructor option)
// and close(): a refusal from the host node is never dropped (issue 33). The node here is a small
// stand-in speaking the attach protocol, so it can refuse what a real node accepts.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { constants, RdsSocket, RdsStack } from '../lib/index.js';
import { C_HELLO, C_REQ, encodeFrame, FrameParser, N_RESP, N_WELCOME, PROTOCOL_VERSION } from '../lib/host/protocol.js';

const { SOL_SOCKET, SO_SNDTIMEO, SO_RCVBUF, POLLERR } = constants;

interface Call {
  op: string;
  level?: number;
  name?: number;
}

/** Answers every call with success, except those `refuse` returns an error code for. */
async function standIn(refuse: (c: Call) => string | null): Promise<{ path: string; calls: Call[]; close(): void }> {
  const dir = mkdtempSync(join(tmpdir(), 'rds-refusals-'));
  const path = join(dir, 'node.sock');
  const calls: Call[] = [];
  const conns: Socket[] = [];
  const server: Server = createServer((c) => {
    conns.push(c);
    const parser = new FrameParser();
    c.on('error', () => {});
    c.on('data', (chunk: Buffer) => {
      for (const f of parser.push(chunk)) {
        if (f.type === C_HELLO) {
          c.write(Buffer.concat(encodeFrame(N_WELCOME, 0, 0, { v: PROTOCOL_VERSION, pid: process.pid })));
          continue;
        }
        if (f.type !== C_REQ) continue;
        const call = f.meta as unknown as Call & { address?: string; port?: number };
        calls.push({ op: call.op, level: call.level, name: call.name });
        const code = refuse(call);
        const answer =
          code !== null
            ? { err: { code, message: `the stand-in node refuses ${call.op}` } }
            : call.op === 'bind'
              ? { ok: true, v: { address: call.address, port: call.port || 4000, transport: constants.RDS_TRANS_TCP } }
              : { ok: true, v: null };
        c.write(Buffer.concat(encodeFrame(N_RESP, 0, f.id, answer)));
      }
    });
  });
  await new Promise<void>((r) => server.listen(path, r));
  return {
    path,
    calls,
    close() {
      for (const c of conns) c.destroy();
      server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function attachTo(refuse: (c: Call) => string | null): Promise<{ stack: RdsStack; calls: Call[] }> {
  const node = await standIn(refuse);
  cleanup.push(() => node.close());
  const stack = await RdsStack.attach(node.path);
  cleanup.push(() => stack.close().catch(() => {}));
  return { stack, calls: node.calls };
}

const refuseSetsockopt = (c: Call): string | null => (c.op === 'setsockopt' ? 'ENOPROTOOPT' : null);

describe('a refusal from the host node surfaces to the caller', () => {
  it('new RdsSocket({ sendTimeout }) forwards SO_SNDTIMEO (21), and its refusal is thrown by the next call', async () => {
    const { stack, calls } = await attachTo(refuseSetsockopt);
    const s = new RdsSocket({ stack, sendTimeout: 500 });
    // The node answers in order: by the time bind() is answered, so is the option.
    await s.bind({ address: '127.0.0.1', port: 4000 });
    expect(calls.find((c) => c.op === 'setsockopt')).toEqual({
      op: 'setsockopt',
      level: SOL_SOCKET,
      name: SO_SNDTIMEO,
    });
    expect(s.poll() & POLLERR).toBe(POLLERR);
    expect(() => s.sendmsg(Buffer.from('x'), { address: '127.0.0.2', port: 4000 })).toThrow(
      expect.objectContaining({ code: 'ENOPROTOOPT', message: expect.stringMatching(/refused setsockopt/) }),
    );
    // Thrown once; the option is back to what the node has (none), not the value it refused.
    expect(s.poll() & POLLERR).toBe(0);
    expect(s.getsockopt(SOL_SOCKET, SO_SNDTIMEO)).toBe(0);
  });

  it('setsockopt() the node refuses: the next call throws it and the option keeps its old value', async () => {
    const { stack } = await attachTo(refuseSetsockopt);
    const s = new RdsSocket({ stack });
    const before = s.getsockopt(SOL_SOCKET, SO_RCVBUF);
    s.setsockopt(SOL_SOCKET, SO_RCVBUF, 8192);
    await s.bind({ address: '127.0.0.1', port: 0 });
    await expect(s.recv({ timeout: 1000 })).rejects.toMatchObject({ code: 'ENOPROTOOPT' });
    expect(s.getsockopt(SOL_SOCKET, SO_RCVBUF)).toBe(before);
  });

  it('a refused open ends the socket with that error', async () => {
    const { stack } = await attachTo((c) => (c.op === 'open' ? 'ENOBUFS' : null));
    const s = new RdsSocket({ stack });
    await s.flush().catch(() => {}); // answered after open
    await expect(s.bind({ address: '127.0.0.1', port: 4000 })).rejects.toMatchObject({
      code: 'ENOBUFS',
      message: expect.stringMatching(/refused opening the socket/),
    });
  });

  it('close() resolves once the node has closed the socket, and rejects with its refusal', async () => {
    const { stack, calls } = await attachTo((c) => (c.op === 'close' ? 'EBADF' : null));
    const s = new RdsSocket({ stack });
    await expect(s.close()).rejects.toMatchObject({ code: 'EBADF' });
    expect(calls.map((c) => c.op)).toEqual(['open', 'close']);
  });
});
