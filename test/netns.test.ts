import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { netnsUnavailable } from './helpers.js';
import { deleteNamespaces, ip, twoHosts } from './netns-kit.js';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// Two hosts in network namespaces this test creates, joined by a veth pair (10.78.0.1, 10.78.0.2).
const PEER = fileURLToPath(new URL('./fixtures/node-peer.mjs', import.meta.url));
const NS_A = 'rdssock-a';
const NS_B = 'rdssock-b';

const why = netnsUnavailable();
if (why) console.log(`netns tests skipped: ${why}`);

interface Proc {
  p: ChildProcess;
  events: Record<string, unknown>[];
  waitFor(pred: (e: Record<string, unknown>) => boolean, ms: number): Promise<Record<string, unknown>>;
}

function run(ns: string, args: string[]): Proc {
  const p = spawn('ip', ['netns', 'exec', ns, process.execPath, PEER, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const events: Record<string, unknown>[] = [];
  const waiters: (() => void)[] = [];
  createInterface({ input: p.stdout! }).on('line', (l) => {
    events.push(JSON.parse(l) as Record<string, unknown>);
    waiters.splice(0).forEach((w) => w());
  });
  return {
    p,
    events,
    async waitFor(pred, ms) {
      const deadline = Date.now() + ms;
      for (;;) {
        const e = events.find(pred);
        if (e) return e;
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`timed out; events: ${JSON.stringify(events.slice(-5))}`);
        await new Promise<void>((r) => {
          const t = setTimeout(r, left);
          waiters.push(() => {
            clearTimeout(t);
            r();
          });
        });
      }
    },
  };
}

describe.skipIf(why !== null)('two hosts in network namespaces', () => {
  beforeAll(() => {
    twoHosts(
      { ns: NS_A, dev: 'rdsveth-a', addr: '10.78.0.1/24' },
      { ns: NS_B, dev: 'rdsveth-b', addr: '10.78.0.2/24' },
    );
  });
  afterAll(() => deleteNamespaces(NS_A, NS_B));

  it('a link that goes down with no FIN is detected by the heartbeat; after it returns every message arrives once, in order', async () => {
    const N = 3000;
    const rx = run(NS_B, [
      '--bind',
      '10.78.0.2',
      '--peer',
      '10.78.0.1',
      '--role',
      'recv',
      '--count',
      String(N),
      '--hb',
      '200',
    ]);
    await rx.waitFor((e) => e.ev === 'ready', 10000);
    const tx = run(NS_A, [
      '--bind',
      '10.78.0.1',
      '--peer',
      '10.78.0.2',
      '--role',
      'send',
      '--count',
      String(N),
      '--hb',
      '200',
    ]);
    await rx.waitFor((e) => e.ev === 'progress' && (e.n as number) >= 500, 20000);
    ip('-n', NS_A, 'link', 'set', 'rdsveth-a', 'down');
    // The sender hears nothing: its heartbeat drops the path (UP -> ERROR) within ~3 intervals.
    await tx.waitFor((e) => e.ev === 'state' && e.from === 'UP' && e.to === 'ERROR', 10000);
    ip('-n', NS_A, 'link', 'set', 'rdsveth-a', 'up');
    const done = await rx.waitFor((e) => e.ev === 'done' || e.ev === 'error', 60000);
    expect(done).toMatchObject({ ev: 'done', n: N });
    const sent = await tx.waitFor((e) => e.ev === 'done', 30000);
    expect((sent.stats as Record<string, number>).heartbeat_timeout).toBeGreaterThanOrEqual(1);
  }, 120_000);
});
