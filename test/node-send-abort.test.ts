import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants } from '../lib/index.js';
import { TEST_TCP_PORT } from './helpers.js';

// The host node's send backlog (lib/host/node-send.ts) and confirm sends that time out: a message
// the client gave up on (send({ confirm, timeout }) rejected with ETIMEDOUT) while it still waited
// in the node's backlog must not be sent later, as an embedded socket's send() cancels a message
// it gave up on before the peer acknowledged it. Found by the nemesis: such a message was read
// after later ones. Addresses 127.152.x.
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function node(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'rds-node-send-'));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'node.sock');
  const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
  await stack.serve({ path });
  cleanup.push(() => stack.close());
  return path;
}

async function peer(address: string, rcvbuf?: number): Promise<RdsSocket> {
  const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
  cleanup.push(() => stack.close());
  const s = new RdsSocket({ stack });
  await s.bind({ address, port: 9000 });
  if (rcvbuf !== undefined) s.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, rcvbuf);
  return s;
}

/** Fills `to`'s port until the attached sender hears it is congested (ENOBUFS); returns how many were queued. */
async function congest(a: RdsSocket, to: { address: string; port: number }): Promise<number> {
  let n = 0;
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      a.sendmsg(Buffer.from(`fill ${n}`.padEnd(1000, '.')), to);
      n++;
    } catch (e) {
      const code = (e as { code?: string }).code;
      if (code === 'ENOBUFS') return n;
      if (code !== 'EAGAIN') throw e;
    }
    if (Date.now() > deadline) throw new Error(`${to.address} never congested after ${n} messages`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

describe("a host node's backlog and aborted confirm sends", () => {
  it('a confirm send that timed out while waiting behind a message to a congested port is never sent', async () => {
    const path = await node();
    const attached = await RdsStack.attach(path);
    cleanup.push(() => attached.close());
    const a = new RdsSocket({ stack: attached });
    await a.bind({ address: '127.152.1.1', port: 5000 });
    const slow = await peer('127.152.1.2', 4096);
    const other = await peer('127.152.1.3');
    // The node's head message waits for the slow port to clear; what a sends next waits behind it.
    const filled = await congest(a, slow.address());
    await expect(
      a.send(Buffer.from('timed out'), other.address(), { confirm: true, timeout: 300 }),
    ).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    a.sendmsg(Buffer.from('after'), other.address());
    // The slow port clears: the head goes, then what is behind it.
    let read = 0;
    while (read < filled) {
      await slow.recv({ timeout: 10_000 });
      read++;
    }
    const first = await other.recv({ timeout: 10_000 });
    expect(first.data.toString()).toBe('after');
    // And the timed-out message does not follow it either.
    await expect(other.recv({ timeout: 500 })).rejects.toMatchObject({ code: 'ETIMEDOUT' });
  }, 30_000);
});

describe("a host node's backlog and confirm sends to co-located sockets", () => {
  it('a confirm send to an unread co-located socket does not hold back what the sender sends next', async () => {
    const path = await node();
    const attached = await RdsStack.attach(path);
    cleanup.push(() => attached.close());
    const a = new RdsSocket({ stack: attached });
    const b = new RdsSocket({ stack: attached });
    await a.bind({ address: '127.152.3.1', port: 5000 });
    await b.bind({ address: '127.152.3.1', port: 5001 });
    const other = await peer('127.152.3.2');
    // Queued at once (the node's loopback takes it within the call), confirmed only once b reads it.
    const confirmed = a.send(Buffer.from('to b'), b.address(), { confirm: true, timeout: 20_000 });
    a.sendmsg(Buffer.from('to other'), other.address());
    expect((await other.recv({ timeout: 5000 })).data.toString()).toBe('to other');
    expect((await b.recv({ timeout: 5000 })).data.toString()).toBe('to b');
    await confirmed;
  }, 30_000);
});
