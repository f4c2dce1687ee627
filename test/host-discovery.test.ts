import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, defaultNodePath, systemNodePath } from '../lib/index.js';
import { nodeCandidates } from '../lib/host/paths.js';
import { TEST_TCP_PORT } from './helpers.js';

// Where `new RdsSocket()` finds the host node as deployed (issue 33): the system node for a
// member of its group, a warning when a node's files are stale. Addresses 127.150.10.x.
const LOOKUP = fileURLToPath(new URL('./fixtures/node-lookup.mjs', import.meta.url));
const DAEMON = fileURLToPath(new URL('../dist/cli/rds-socketd.js', import.meta.url));
const NOBODY = 65534;
/** The group of the test's system node (a gid no account needs to have: root may chown to any). */
const RDS_GID = 48123;
const isRoot = process.getuid?.() === 0;
if (!isRoot) console.log('non-root lookups skipped: they need root to become another user');

/** Whether every directory above `file` lets other users through (the non-root child imports the package from it). */
function othersCanReach(file: string): boolean {
  for (let dir = dirname(file); ; dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) return false;
    if (dir === dirname(dir)) return true;
  }
}
const reachable = othersCanReach(LOOKUP);
if (isRoot && !reachable)
  console.log(
    `non-root lookups skipped: a directory above ${LOOKUP} is closed to other users (clone it where they may enter)`,
  );
const asOtherUser = isRoot && reachable;

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

/** A fresh directory everyone may enter (a non-root child looks inside it). */
function tmpDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'rds-hdp-'));
  chmodSync(dir, 0o755);
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

interface Lookup {
  uid: number;
  attached: boolean[];
  nodePaths: (string | null)[];
  warnings: { name: string; code: string; message: string }[];
}

/** Runs the lookup fixture with `env` (no inherited RDS_SOCKET_NODE, XDG_RUNTIME_DIR, ...). */
function lookup(cfg: object, env: Record<string, string>): Promise<Lookup> {
  const base: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !k.startsWith('RDS_SOCKET') && k !== 'XDG_RUNTIME_DIR' && k !== 'TMPDIR') base[k] = v;
  const child = spawn(process.execPath, [LOOKUP], {
    env: { ...base, ...env, NODE_LOOKUP: JSON.stringify(cfg) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  cleanup.push(() => child.kill('SIGKILL'));
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`lookup child hung: ${err}`)), 20000);
    child.on('exit', (code) => {
      clearTimeout(t);
      if (code !== 0) reject(new Error(`lookup child exited ${code}: ${err}`));
      else resolve(JSON.parse(out.trim().split('\n').pop()!) as Lookup);
    });
  });
}

/** rds-socketd at `path`; `ready` resolves once it serves, `out()` is its output so far. */
function daemon(path: string): { d: ChildProcess; ready: Promise<void>; out: () => string } {
  const d = spawn(process.execPath, [DAEMON, '--path', path, '--tcp-port', String(TEST_TCP_PORT)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  cleanup.push(() => d.kill('SIGKILL'));
  let out = '';
  const ready = new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`rds-socketd did not start: ${out}`)), 20000);
    const seen = (chunk: Buffer): void => {
      out += chunk;
      if (out.includes('ready: ')) {
        clearTimeout(t);
        resolve();
      }
    };
    d.stdout!.on('data', seen);
    d.stderr!.on('data', seen);
    d.on('exit', (code) => reject(new Error(`rds-socketd exited ${code}: ${out}`)));
  });
  ready.catch(() => {});
  return { d, ready, out: () => out };
}

describe('finding the host node', () => {
  it('looks for the system node at /run/rds-socket/node.sock after the per-user one, unless RDS_SOCKET_NODE names one', () => {
    const saved = { ...process.env };
    cleanup.push(() => {
      for (const k of ['RDS_SOCKET_NODE', 'RDS_SOCKET_SYSTEM_NODE', 'XDG_RUNTIME_DIR'])
        if (saved[k] === undefined) delete process.env[k];
        else process.env[k] = saved[k];
    });
    delete process.env.RDS_SOCKET_NODE;
    delete process.env.RDS_SOCKET_SYSTEM_NODE;
    process.env.XDG_RUNTIME_DIR = '/run/user/1000';
    expect(systemNodePath()).toBe('/run/rds-socket/node.sock');
    expect(nodeCandidates()).toEqual(['/run/user/1000/rds-socket/node.sock', '/run/rds-socket/node.sock']);
    delete process.env.XDG_RUNTIME_DIR;
    if (isRoot) expect(defaultNodePath()).toBe('/run/rds-socket/node.sock');
    expect(nodeCandidates().at(-1)).toBe('/run/rds-socket/node.sock');
    process.env.RDS_SOCKET_SYSTEM_NODE = '/srv/rds/node.sock';
    expect(nodeCandidates().at(-1)).toBe('/srv/rds/node.sock');
    process.env.RDS_SOCKET_NODE = '/tmp/mine.sock';
    expect(nodeCandidates()).toEqual(['/tmp/mine.sock']);
  });

  it.skipIf(!asOtherUser)(
    "a non-root member of the node's group attaches to the system node; a non-member runs embedded and is told why",
    async () => {
      const base = tmpDir();
      const tmp = join(base, 'tmp');
      mkdirSync(tmp, { mode: 0o1777 });
      chmodSync(tmp, 0o1777);
      const sys = join(base, 'run', 'node.sock');
      const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
      cleanup.push(() => stack.close());
      // As the unit in docs/operations.md: root serves, mode 0660, group rds, its directory 0750.
      const node = await stack.serve({ path: sys, group: RDS_GID });
      expect(statSync(join(base, 'run')).mode & 0o777).toBe(0o750);
      const rx = new RdsSocket({ stack });
      await rx.bind({ address: '127.150.10.1', port: 9000 });
      const env = { RDS_SOCKET_SYSTEM_NODE: sys, TMPDIR: tmp };
      const member = { uid: NOBODY, gid: NOBODY, groups: [RDS_GID] };
      const got = rx.recv({ timeout: 15000 });
      got.catch(() => {}); // awaited below, once the child is done
      const r = await lookup(
        { drop: member, sockets: 1, send: { from: '127.150.10.2', to: { address: '127.150.10.1', port: 9000 } } },
        env,
      );
      expect(r.uid).toBe(NOBODY);
      expect(r.attached).toEqual([true]);
      expect(r.nodePaths).toEqual([sys]);
      expect(r.warnings).toEqual([]);
      expect((await got).data.toString()).toBe(`from uid ${NOBODY}`);
      expect(node.counters.attached).toBe(1);

      // Not in the group: the directory (0750) or the socket (0660) is closed to it. It runs a
      // node of its own, and hears so once.
      const outsider = { uid: NOBODY, gid: NOBODY, groups: [] };
      for (const dirMode of [0o750, 0o755]) {
        chmodSync(join(base, 'run'), dirMode);
        const denied = await lookup({ drop: outsider, sockets: 2 }, env);
        expect(denied.attached).toEqual([false, false]);
        expect(denied.warnings).toHaveLength(1);
        expect(denied.warnings[0]!.code).toBe('RDS_NODE_NOT_ATTACHED');
        expect(denied.warnings[0]!.message).toContain(
          `this process may not connect to the RDS node at ${sys} (permission denied`,
        );
      }
    },
    60000,
  );

  it("prefers this user's own node to the system node while it lives, and the system node once it is stale", async () => {
    const base = tmpDir();
    const own = join(base, 'xdg', 'rds-socket', 'node.sock');
    const sys = join(base, 'run', 'node.sock');
    const sysStack = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanup.push(() => sysStack.close());
    await sysStack.serve({ path: sys });
    const { d, ready } = daemon(own);
    await ready;
    const env = { RDS_SOCKET_SYSTEM_NODE: sys, XDG_RUNTIME_DIR: join(base, 'xdg') };
    expect((await lookup({ sockets: 1 }, env)).nodePaths).toEqual([own]);
    d.kill('SIGKILL');
    await new Promise((r) => d.once('exit', r));
    expect(existsSync(own)).toBe(true);
    const r = await lookup({ sockets: 1 }, env);
    expect(r.nodePaths).toEqual([sys]);
    expect(r.warnings).toEqual([]);
  }, 60000);

  it('a SIGKILLed rds-socketd: new RdsSocket() warns once, naming the stale files and the dead pid; the next rds-socketd says it takes them over', async () => {
    const path = join(tmpDir(), 'node.sock');
    const first = daemon(path);
    await first.ready;
    const pid = first.d.pid!;
    first.d.kill('SIGKILL');
    await new Promise((r) => first.d.once('exit', r));
    expect(existsSync(path) && existsSync(`${path}.pid`)).toBe(true);

    const env = { RDS_SOCKET_NODE: path };
    const r = await lookup({ sockets: 3 }, env);
    expect(r.attached).toEqual([false, false, false]);
    expect(r.warnings).toHaveLength(1);
    const w = r.warnings[0]!;
    expect(w.name).toBe('RdsSocketWarning');
    expect(w.code).toBe('RDS_NODE_NOT_ATTACHED');
    expect(w.message).toContain(`the RDS node at ${path} is gone`);
    expect(w.message).toContain(`${path}.pid are stale (pid ${pid} is not running`);
    expect(w.message).toContain('runs its own embedded RDS node');

    const second = daemon(path);
    await second.ready;
    expect(second.out()).toContain(`taking over stale ${path} and ${path}.pid (left by pid ${pid}`);
    const again = await lookup({ sockets: 1 }, env);
    expect(again.attached).toEqual([true]);
    expect(again.warnings).toEqual([]);
  }, 60000);
});
