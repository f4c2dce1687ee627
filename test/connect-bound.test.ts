import { type ChildProcess, spawn } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { LoopTransport, RdsSocket, RdsStack, TcpTransport } from '../lib/index.js';
import { TEST_TCP_PORT, until } from './helpers.js';

// A connect whose SYN is lost (a partition, a link down) is abandoned after a bound and made
// again: TCP itself resends the SYN only 1, 3, 7, 15, 31 s later, so a path dialled during a fault
// stayed CONNECTING long after the heal (the nemesis's stuck pairs, issue #35).

let cleanups: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

/**
 * A listener that never accepts (its process blocks its event loop) and whose accept queue is
 * full: the kernel drops every further SYN to it, as a partition does.
 */
async function blackHole(host: string, port: number): Promise<void> {
  const code = `
    const net = require('node:net');
    net.createServer().listen({ host: ${JSON.stringify(host)}, port: ${port}, backlog: 1 }, () => {
      process.stdout.write('ready\\n');
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 120000);
    });`;
  const child: ChildProcess = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  cleanups.push(() => {
    child.kill('SIGKILL');
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (c) => reject(new Error(`black hole exited with ${c}`)));
  });
  // Fill the accept queue (backlog 1: two connections) and then some.
  const fillers: Socket[] = [];
  for (let i = 0; i < 4; i++) {
    const s = connect({ host, port });
    s.on('error', () => {});
    fillers.push(s);
  }
  cleanups.push(() => {
    for (const s of fillers) s.destroy();
  });
  await until(() => fillers[0]!.readyState === 'open' && fillers[1]!.readyState === 'open', 'the accept queue to fill');
}

describe('a connect that gets no answer', () => {
  it('is made again within a bound once the peer can be reached', async () => {
    const base = '127.31.1';
    const hole = { host: `${base}.3`, port: TEST_TCP_PORT };
    await blackHole(hole.host, hole.port);
    // Where A's dials go: the black hole until the "heal", then B.
    let target: { host: string; port: number } = hole;
    const A = new RdsStack({
      tcpPort: TEST_TCP_PORT,
      reconnectMaxDelayMs: 20,
      transports: [new TcpTransport({ dial: () => target }), new LoopTransport()],
    });
    const B = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanups.push(() => A.close());
    cleanups.push(() => B.close());
    const b = new RdsSocket({ stack: B });
    await b.bind({ address: `${base}.2`, port: 4000 });
    const a = new RdsSocket({ stack: A });
    await a.bind({ address: `${base}.1`, port: 4000 });
    a.sendmsg(Buffer.from('after the heal'), b.address());
    const path0 = () => A.connections().find((c) => c.transport === 'tcp')?.paths[0]?.state;
    await until(() => path0() === 'CONNECTING', 'the dial into the black hole');
    target = { host: `${base}.2`, port: TEST_TCP_PORT };
    const healed = Date.now();
    const m = await b.recv({ timeout: 8000 });
    expect(m.data.toString()).toBe('after the heal');
    expect(Date.now() - healed).toBeLessThan(8000);
    expect(A.counters.get('tcp_connect_timeout')).toBeGreaterThanOrEqual(1);
  });
});
