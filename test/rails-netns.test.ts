import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { netnsUnavailable } from './helpers.js';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

// Rails between two hosts (issue #25): network namespaces rdsr9-a and rdsr9-b joined by two veth
// pairs, the primary link 10.132.0.1 <-> 10.132.0.2 and the rail 10.132.1.1 <-> 10.132.1.2. Each
// node is a process (test/fixtures/rail-peer.mjs, on dist/: run `npm run build` first). Needs root;
// cannot run inside `unshare -n` (it makes its own namespaces).
const PEER = fileURLToPath(new URL('./fixtures/rail-peer.mjs', import.meta.url));
const NS_A = 'rdsr9-a';
const NS_B = 'rdsr9-b';
const A1 = '10.132.0.1';
const B1 = '10.132.0.2';
const RA = '10.132.1.1';
const RB = '10.132.1.2';

const why = netnsUnavailable();
if (why) console.log(`rails netns tests skipped: ${why}`);

const ip = (...a: string[]): void => {
  execFileSync('ip', a, { stdio: 'ignore' });
};

interface Ev {
  ev: string;
  [k: string]: unknown;
}
interface Proc {
  p: ChildProcess;
  events: Ev[];
  send(cmd: string): void;
  waitFor(pred: (e: Ev) => boolean, ms: number, what: string): Promise<Ev>;
}

const procs: Proc[] = [];

function run(ns: string, args: string[]): Proc {
  const p = spawn('ip', ['netns', 'exec', ns, process.execPath, PEER, ...args], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const events: Ev[] = [];
  const waiters: (() => void)[] = [];
  createInterface({ input: p.stdout! }).on('line', (l) => {
    events.push(JSON.parse(l) as Ev);
    waiters.splice(0).forEach((w) => w());
  });
  const proc: Proc = {
    p,
    events,
    send: (cmd) => p.stdin!.write(`${cmd}\n`),
    async waitFor(pred, ms, what) {
      const deadline = Date.now() + ms;
      for (;;) {
        const bad = events.find((e) => e.ev === 'error');
        if (bad) throw new Error(`node reported: ${String(bad.msg)}`);
        const e = events.find(pred);
        if (e) return e;
        const left = deadline - Date.now();
        if (left <= 0)
          throw new Error(`timed out waiting for ${what}; last events: ${JSON.stringify(events.slice(-6))}`);
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
  procs.push(proc);
  return proc;
}

function teardown(): void {
  for (const p of procs.splice(0)) p.p.kill('SIGKILL');
  for (const ns of [NS_A, NS_B]) {
    try {
      ip('netns', 'del', ns);
    } catch {
      /* not there */
    }
  }
}

const node = (side: 'a' | 'b', extra: string[]): string[] =>
  side === 'a'
    ? ['--bind', A1, '--peer', B1, '--rail-local', RA, '--rail-remote', RB, ...extra]
    : ['--bind', B1, '--peer', A1, '--rail-local', RB, '--rail-remote', RA, ...extra];

const K = 4;
const POLICY_UNDER_TEST = 'min-latency';
const ROUNDS = 2500;
/** A stream of K sockets x ROUNDS messages from A to B, ~5 s long, B checking order and duplicates. */
async function stream(extraA: string[] = [], extraB: string[] = []): Promise<{ a: Proc; b: Proc }> {
  const b = run(NS_B, node('b', ['--role', 'recv', '--sockets', String(K), '--count', String(ROUNDS), ...extraB]));
  await b.waitFor((e) => e.ev === 'ready', 10000, 'receiver ready');
  const a = run(
    NS_A,
    node('a', ['--role', 'send', '--sockets', String(K), '--count', String(ROUNDS), '--rate-pps', '500', ...extraA]),
  );
  return { a, b };
}

const isState = (path: number, to: string) => (e: Ev) => e.ev === 'state' && e.path === path && e.to === to;
type PathRow = { index: number; state: string; sent: number; moved: number; ups: number; fails: number };

describe.skipIf(why !== null)('rails between two hosts (two veth pairs)', () => {
  beforeEach(() => {
    teardown();
    for (const ns of [NS_A, NS_B]) {
      ip('netns', 'add', ns);
      ip('-n', ns, 'link', 'set', 'lo', 'up');
    }
    for (const [a, b, net] of [
      ['r9p-a', 'r9p-b', '10.132.0'],
      ['r9r-a', 'r9r-b', '10.132.1'],
    ] as const) {
      ip('link', 'add', a, 'netns', NS_A, 'type', 'veth', 'peer', 'name', b, 'netns', NS_B);
      ip('-n', NS_A, 'addr', 'add', `${net}.1/24`, 'dev', a);
      ip('-n', NS_B, 'addr', 'add', `${net}.2/24`, 'dev', b);
      ip('-n', NS_A, 'link', 'set', a, 'up');
      ip('-n', NS_B, 'link', 'set', b, 'up');
    }
  });
  afterEach(teardown);

  for (const [link, dev, path, other] of [
    ['the rail', 'r9r-a', 8, 0],
    ['the primary link', 'r9p-a', 0, 8],
  ] as const) {
    it(`${link} set down mid-stream: its messages move to the other link and back; no loss, no duplicate, order per socket`, async () => {
      const { a, b } = await stream();
      await a.waitFor(isState(8, 'UP'), 10000, 'rail UP');
      await b.waitFor((e) => e.ev === 'progress' && (e.n as number) >= 1500, 20000, 'traffic flowing');
      ip('-n', NS_A, 'link', 'set', dev, 'down');
      const fo = await a.waitFor((e) => e.ev === 'failover' && e.path === path, 15000, `failover of path ${path}`);
      expect(fo.to).toBe(other);
      expect(fo.moved as number).toBeGreaterThan(0);
      ip('-n', NS_A, 'link', 'set', dev, 'up');
      const backAt = a.events.length;
      await a.waitFor((e) => a.events.indexOf(e) >= backAt && isState(path, 'UP')(e), 15000, `path ${path} back UP`);
      a.send('info');
      const atReturn = await a.waitFor((e) => e.ev === 'info' && a.events.indexOf(e) > backAt, 5000, 'info');
      const sentAtReturn = (atReturn.paths as PathRow[]).find((p) => p.index === path)!.sent;
      const rx = await b.waitFor((e) => e.ev === 'done', 60000, 'receiver done');
      const tx = await a.waitFor((e) => e.ev === 'done', 20000, 'sender done');
      expect(rx.n).toBe(K * ROUNDS); // every message once, in order per socket (the receiver checks)
      const rows = tx.paths as PathRow[];
      const p = rows.find((r) => r.index === path)!;
      expect(p.moved).toBeGreaterThan(0);
      expect(p.state).toBe('UP');
      // Back: the path carried traffic again after it returned.
      expect(p.sent).toBeGreaterThan(sentAtReturn);
      expect(rows.find((r) => r.index === other)!.sent).toBeGreaterThan(0);
      expect((tx.stats as Record<string, number>).failover_moved).toBeGreaterThan(0);
    }, 90000);
  }

  it('a rail added and removed at run time: it carries traffic while it is there; the stream stays whole and in order', async () => {
    const { a, b } = await stream(['--no-rail-at-start']);
    await b.waitFor((e) => e.ev === 'progress' && (e.n as number) >= 800, 20000, 'traffic flowing');
    expect(a.events.some(isState(8, 'UP'))).toBe(false);
    a.send('add-rail');
    await a.waitFor(isState(8, 'UP'), 10000, 'rail UP');
    const upAt = a.events.length;
    await b.waitFor((e) => e.ev === 'progress' && (e.n as number) >= 4000, 20000, 'more traffic');
    a.send('remove-rail');
    const removed = await a.waitFor(
      (e) => e.ev === 'info' && e.cmd === 'remove-rail' && a.events.indexOf(e) > upAt,
      5000,
      'removed',
    );
    const rail = (removed.paths as PathRow[]).find((p) => p.index === 8)!;
    expect(rail.sent).toBeGreaterThan(0);
    expect((removed.counters as Record<string, number>).rail_removed).toBe(1);
    const rx = await b.waitFor((e) => e.ev === 'done', 60000, 'receiver done');
    expect(rx.n).toBe(K * ROUNDS);
    const tx = await a.waitFor((e) => e.ev === 'done', 20000, 'sender done');
    const after = (tx.paths as PathRow[]).find((p) => p.index === 8)!;
    expect(after.state).toBe('DOWN');
    // Nothing more went over the removed rail.
    expect(after.sent).toBe(rail.sent);
  }, 90000);

  it('min-latency: with the primary link slow (tbf 1 Mbit/s), idle sockets settle on the rail', async () => {
    // (netem is not always there; a slow link delays each 2 KiB message by ~16 ms of transmission.)
    ip(
      'netns',
      'exec',
      NS_A,
      'tc',
      'qdisc',
      'add',
      'dev',
      'r9p-a',
      'root',
      'tbf',
      'rate',
      '1mbit',
      'burst',
      '2kb',
      'latency',
      '500ms',
    );
    const rounds = 100;
    const b = run(
      NS_B,
      node('b', ['--role', 'recv', '--sockets', String(K), '--count', String(rounds), '--size', '2048']),
    );
    await b.waitFor((e) => e.ev === 'ready', 10000, 'receiver ready');
    // 10 rounds a second (even all on the slow link, 4 x 2 KiB x 10/s fit in 1 Mbit/s): each
    // socket's message is acknowledged before its next, so it may move.
    const a = run(
      NS_A,
      node('a', [
        ...['--role', 'send', '--sockets', String(K), '--count', String(rounds), '--size', '2048'],
        ...['--rate-pps', '10', '--policy', POLICY_UNDER_TEST],
      ]),
    );
    const rx = await b.waitFor((e) => e.ev === 'done', 60000, 'receiver done');
    expect(rx.n).toBe(K * rounds);
    const tx = await a.waitFor((e) => e.ev === 'done', 20000, 'sender done');
    const rows = tx.paths as PathRow[];
    const primary = rows.find((r) => r.index === 0)!.sent;
    const rail = rows.find((r) => r.index === 8)!.sent;
    // Before the rail is up and measured some go to path 0; after that nearly all go to the rail.
    expect(rail).toBeGreaterThan(3 * primary);
  }, 90000);

  it('maxReconnectAttempts: a rail whose link stays down goes to ERROR and stops; reconnect brings it back', async () => {
    const { a, b } = await stream(['--max-reconnect', '3']);
    await a.waitFor(isState(8, 'UP'), 10000, 'rail UP');
    await b.waitFor((e) => e.ev === 'progress' && (e.n as number) >= 800, 20000, 'traffic flowing');
    ip('-n', NS_A, 'link', 'set', 'r9r-a', 'down');
    await a.waitFor(isState(8, 'ERROR'), 15000, 'rail in ERROR');
    // ERROR after a drop is a passing state; wait for the one that sticks (no CONNECTING after it).
    await a.waitFor(
      (e) => e.ev === 'state' && e.path === 8 && e.from === 'CONNECTING' && e.to === 'ERROR',
      15000,
      'rail gave up',
    );
    a.send('info');
    const gaveUp = await a.waitFor((e) => e.ev === 'info' && e.cmd === 'info', 5000, 'info');
    const row = (gaveUp.paths as PathRow[]).find((p) => p.index === 8)!;
    expect(row.state).toBe('ERROR');
    expect((gaveUp.counters as Record<string, number>).conn_reconnect_exhausted).toBe(1);
    const fails = row.fails;
    ip('-n', NS_A, 'link', 'set', 'r9r-a', 'up');
    const mark = a.events.length;
    a.send('reconnect 8');
    await a.waitFor((e) => a.events.indexOf(e) >= mark && isState(8, 'UP')(e), 15000, 'rail UP after reconnect');
    expect(fails).toBeGreaterThanOrEqual(3);
    const rx = await b.waitFor((e) => e.ev === 'done', 60000, 'receiver done');
    expect(rx.n).toBe(K * ROUNDS);
  }, 90000);
});
