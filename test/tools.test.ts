import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack } from '../lib/index.js';
import { native } from '../lib/native.js';
import { runNode } from './helpers.js';

// The commands in bin/ (compiled to dist/cli), run as a user would, their output parsed.
const cli = (name: string): string => fileURLToPath(new URL(`../dist/cli/${name}.js`, import.meta.url));
const PORT = 26440;

const run = (name: string, args: string[], ms = 30000) => runNode([cli(name), ...args], ms);

const stacks: RdsStack[] = [];
afterAll(async () => {
  for (const s of stacks) await s.close();
});

describe('rds-ping', () => {
  it('prints one line per pong and exits 0 against an rds-socket node', async () => {
    const node = new RdsStack({ tcpPort: PORT });
    stacks.push(node);
    const s = new RdsSocket({ stack: node });
    await s.bind({ address: '127.28.0.2', port: 4000 });
    const r = await run('rds-ping', [
      '-c',
      '3',
      '-i',
      '100ms',
      '-I',
      '127.28.0.1',
      '--tcp-port',
      String(PORT),
      '127.28.0.2',
    ]);
    // (the summary line, on stderr, is not one of rds-tools' lines)
    const lines = r.out.split('\n').filter((l) => l !== '' && !l.startsWith('--- '));
    expect(lines).toHaveLength(3);
    // rds-ping's " %3u: %ld usec"
    lines.forEach((l, i) => expect(l).toMatch(new RegExp(`^ {3}${i + 1}: \\d+ usec$`)));
    expect(r.code).toBe(0);
    expect(node.counters.get('send_pong')).toBeGreaterThanOrEqual(3);
  });

  it('exits 1 when nothing answers, and 2 on bad usage', async () => {
    const r = await run('rds-ping', [
      '-c',
      '1',
      '-i',
      '0.1',
      '-I',
      '127.28.1.1',
      '--tcp-port',
      String(PORT),
      '127.28.1.2',
    ]);
    expect(r.code).toBe(1);
    expect((await run('rds-ping', ['-c', 'x', '127.0.0.1'])).code).toBe(2);
    expect((await run('rds-ping', [])).code).toBe(2);
  });
});

describe('rds-info', () => {
  it('reads a node through its control endpoint: sockets, connections with path state, counters, --json', async () => {
    const a = new RdsStack({ tcpPort: PORT, control: true });
    const b = new RdsStack({ tcpPort: PORT });
    stacks.push(a, b);
    const sa = new RdsSocket({ stack: a });
    await sa.bind({ address: '127.28.2.1', port: 4000 });
    const sb = new RdsSocket({ stack: b });
    await sb.bind({ address: '127.28.2.2', port: 4000 });
    sa.sendmsg(Buffer.from('x'), sb.address());
    await sb.recv({ timeout: 5000 });
    await sa.flush({ timeout: 5000 });
    sb.sendmsg(Buffer.from('unread'), sa.address());
    const deadline = Date.now() + 5000;
    while (sa.poll() === 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5)); // until readable
    const path = await a.openControl();
    const k = await run('rds-info', ['--socket', path, '-k']);
    expect(k.code).toBe(0);
    expect(k.out).toMatch(/BoundAddr\s+BPort\s+ConnAddr\s+CPort\s+SndBuf\s+RcvBuf\s+Inode/);
    expect(k.out).toMatch(/127\.28\.2\.1\s+4000\s+0\.0\.0\.0\s+0\s+106496\s+106496/);
    const n = await run('rds-info', ['--socket', path, '-n']);
    expect(n.out).toMatch(/127\.28\.2\.1\s+127\.28\.2\.2\s+0\s+\d+\s+\d+\s+\S+\s+0\s+UP/);
    const rq = await run('rds-info', ['--socket', path, '-r']);
    expect(rq.out).toMatch(/Receive Message Queue:[\s\S]*127\.28\.2\.1\s+4000\s+127\.28\.2\.2\s+4000\s+0\s+\d+\s+6/);
    const c = await run('rds-info', ['--socket', path, '-c']);
    expect(c.out).toMatch(/^\s+recv_delivered\s+\d+$/m);
    const j = await run('rds-info', ['--socket', path, '--json']);
    const info = JSON.parse(j.out) as { pid: number; counters: Record<string, number>; sockets: unknown[] };
    expect(info.pid).toBe(process.pid);
    expect(info.counters.send_queued).toBeGreaterThanOrEqual(1);
    expect(info.sockets).toHaveLength(1);
  });

  it('says so when no node is reachable', async () => {
    const r = await run('rds-info', ['--socket', '/nonexistent/rds.sock']);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/no rds-socket node answered/);
  });
});

describe('rds-ctl', () => {
  it('disconnects and reconnects a path and resets the figures through the control endpoint', async () => {
    const a = new RdsStack({ tcpPort: PORT, control: true, npaths: 1, reconnectMaxDelayMs: 50 });
    const b = new RdsStack({ tcpPort: PORT, npaths: 1 });
    stacks.push(a, b);
    const sa = new RdsSocket({ stack: a });
    await sa.bind({ address: '127.28.4.1', port: 4000 });
    const sb = new RdsSocket({ stack: b });
    await sb.bind({ address: '127.28.4.2', port: 4000 });
    sa.sendmsg(Buffer.from('x'), sb.address());
    await sb.recv({ timeout: 5000 });
    const path = await a.openControl();
    const path0 = () => a.connections().find((c) => c.peerAddress === '127.28.4.2')!.paths[0]!;
    const d = await run('rds-ctl', ['--socket', path, 'disconnect', '127.28.4.2', '0']);
    expect(d.code, d.out).toBe(0);
    expect(path0().state).toBe('DOWN');
    // Held down: a message waits, nothing reconnects.
    sa.sendmsg(Buffer.from('held'), sb.address());
    const info = await run('rds-info', ['--socket', path, '-R']);
    expect(info.out).toMatch(/127\.28\.4\.1\s+127\.28\.4\.2\s+0\s+lane\s+\S+\s+\S+\s+DOWN\(held\)/);
    expect(sb.recvmsg()).toBeNull();
    const r = await run('rds-ctl', ['--socket', path, 'reconnect', '127.28.4.2', '0']);
    expect(r.code, r.out).toBe(0);
    expect((await sb.recv({ timeout: 5000 })).data.toString()).toBe('held');
    expect(a.counters.get('send_queued')).toBeGreaterThan(0);
    const z = await run('rds-ctl', ['--socket', path, 'reset-stats']);
    expect(z.code, z.out).toBe(0);
    expect(a.counters.get('send_queued')).toBe(0);
    // A path that is not there, bad usage, no node.
    const none = await run('rds-ctl', ['--socket', path, 'reconnect', '127.28.4.9', '0']);
    expect(none.code).toBe(1);
    expect(none.out).toMatch(/reconnect refused: ENOENT: no path 0 to 127\.28\.4\.9/);
    expect((await run('rds-ctl', ['--socket', path, 'reconnect', '127.28.4.2'])).code).toBe(2);
    expect((await run('rds-ctl', ['--socket', path, 'frobnicate'])).code).toBe(2);
    expect((await run('rds-ctl', ['--socket', '/nonexistent/rds.sock', 'reset-stats'])).code).toBe(1);
  });

  it("steers a host node when asked by the node's own user", async () => {
    const node = new RdsStack({ tcpPort: PORT });
    stacks.push(node);
    const sock = `${tmpdir()}/rds-ctl-test-${process.pid}.sock`;
    await node.serve({ path: sock });
    const total = (): number => Object.values(node.counters.snapshot()).reduce((x, y) => x + y, 0);
    node.counters.add(0, 5);
    expect(total()).toBeGreaterThan(0);
    const z = await run('rds-ctl', ['--socket', sock, 'reset-stats']);
    // The node knows who asks only through SO_PEERCRED (the native addon); without it, it refuses.
    const verified = native()?.peerCred !== undefined;
    expect(z.code, z.out).toBe(verified ? 0 : 1);
    if (verified) expect(total()).toBe(0);
    else expect(z.out).toMatch(/refused: only the node's user.*\(EPERM\)/);
    const none = await run('rds-ctl', ['--socket', sock, 'disconnect', '127.28.5.9', '3']);
    expect(none.code).toBe(1);
    expect(none.out).toMatch(verified ? /no path 3 to 127\.28\.5\.9/ : /only the node's user/);
  });
});
