import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, RdsError } from '../lib/index.js';
import { until } from './helpers.js';

// Operator-facing behaviour (issue 24): rds-ping's source choice and summary, rds-info's hints,
// RDS_SOCKET_CONTROL, stale control sockets, unhandled stack errors, unknown stack options.
// Addresses 127.143.x.y and, for `rds-ping 127.0.0.1`, 127.0.0.x with this file's own TCP port.

const PORT = 26947;
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const cli = (name: string): string => join(ROOT, 'dist', 'cli', `${name}.js`);
const runtime = mkdtempSync(join(tmpdir(), 'rds-op-'));
const stacks: RdsStack[] = [];
const children: ChildProcess[] = [];

afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  for (const s of stacks) await s.close();
  rmSync(runtime, { recursive: true, force: true });
});

function run(
  args: string[],
  env: Record<string, string> = {},
  ms = 30000,
): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, args, {
      env: { ...process.env, XDG_RUNTIME_DIR: runtime, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    p.stdout!.on('data', (d) => (out += d));
    p.stderr!.on('data', (d) => (err += d));
    const t = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`node ${args.join(' ')} did not finish in ${ms} ms:\n${out}${err}`));
    }, ms);
    p.on('exit', (code) => {
      clearTimeout(t);
      resolve({ code: code ?? 1, out, err });
    });
  });
}

describe('rds-ping', () => {
  it('pings 127.0.0.1 while a local node holds it, from another loopback source, and says so', async () => {
    const node = new RdsStack({ tcpPort: PORT });
    stacks.push(node);
    const s = new RdsSocket({ stack: node });
    await s.bind({ address: '127.0.0.1', port: 4000 });
    const r = await run([cli('rds-ping'), '-c', '2', '-i', '100ms', '--tcp-port', String(PORT), '127.0.0.1']);
    expect(r.err).toContain(
      '127.0.0.1 is held by an RDS node on this host; pinging from 127.0.0.2 (choose the source with -I)',
    );
    expect(r.out.split('\n').filter((l) => l !== '')).toEqual([
      expect.stringMatching(/^ {3}1: \d+ usec$/),
      expect.stringMatching(/^ {3}2: \d+ usec$/),
    ]);
    expect(r.err).toMatch(/--- 127\.0\.0\.1 rds-ping from 127\.0\.0\.2: 2 sent, 2 answered, 0% lost ---/);
    expect(r.code).toBe(0);
    // Asked for explicitly with -I, the held address is refused with what to do.
    const held = await run([cli('rds-ping'), '-c', '1', '-I', '127.0.0.1', '--tcp-port', String(PORT), '127.0.0.1']);
    expect(held.err).toContain('cannot use 127.0.0.1 as the source: an RDS node on this host holds it');
    expect(held.err).toContain('give another local address with -I source');
    expect(held.err).not.toContain('new RdsStack');
    expect(held.code).toBe(1);
  });

  it('prints a summary line for an unreachable destination', async () => {
    const r = await run([
      cli('rds-ping'),
      '-c',
      '2',
      '-i',
      '0.1',
      '-I',
      '127.143.1.1',
      '--tcp-port',
      String(PORT),
      '127.143.1.2',
    ]);
    expect(r.out).toBe('');
    expect(r.err).toContain(
      '--- 127.143.1.2 rds-ping from 127.143.1.1: 2 sent, 0 answered, 100% lost (no RDS node answered',
    );
    expect(r.code).toBe(1);
  });
});

describe('rds-info and the control endpoint', () => {
  it('with no node says how to open the control endpoint (with -v too); an unknown option is refused', async () => {
    const r = await run([cli('rds-info')]);
    expect(r.code).toBe(1);
    expect(r.err).toContain('RDS_SOCKET_CONTROL=1');
    expect(r.err).toContain('new RdsStack({ control: true })');
    const v = await run([cli('rds-info'), '-v']);
    expect(v.code).toBe(1);
    expect(v.err).toContain('RDS_SOCKET_CONTROL=1');
    expect((await run([cli('rds-info'), '-Z'])).code).toBe(2);
  });

  it("RDS_SOCKET_CONTROL=1 opens it on the default stack; a killed node's socket is removed as stale", async () => {
    const script = join(runtime, 'node.mjs');
    writeFileSync(
      script,
      `
      import { RdsSocket } from ${JSON.stringify(join(ROOT, 'dist', 'index.js'))};
      const s = new RdsSocket();                     // the default stack: no control option in code
      await s.bind({ address: '127.143.2.1', port: 4321 });
      const wait = setInterval(() => { if (s.stack.controlPath) { clearInterval(wait); console.log('ready ' + s.stack.controlPath); } }, 5);
      setInterval(() => {}, 1000);
    `,
    );
    const child = spawn(process.execPath, [script], {
      env: { ...process.env, XDG_RUNTIME_DIR: runtime, RDS_SOCKET_CONTROL: '1' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(child);
    let out = '';
    child.stdout!.on('data', (d) => (out += d));
    await until(() => out.includes('ready '), 'the node to open its control endpoint');
    const path = out.trim().split(' ')[1]!;
    expect(path.startsWith(join(runtime, 'rds-socket'))).toBe(true);
    const k = await run([cli('rds-info'), '-k']);
    expect(k.code).toBe(0);
    expect(k.out).toMatch(/127\.143\.2\.1\s+4321/);
    const ib = await run([cli('rds-info'), '-I']);
    expect(ib.out.split('\n').slice(0, 2)).toEqual([
      'RDMA Connections:',
      expect.stringMatching(/LocalAddr\s+RemoteAddr\s+Tos\s+State/),
    ]);
    child.kill('SIGKILL');
    await until(() => child.exitCode !== null || child.signalCode !== null, 'the node to die');
    expect(existsSync(path)).toBe(true); // left behind by kill -9
    const after = await run([cli('rds-info')]);
    expect(after.code).toBe(1);
    expect(existsSync(path)).toBe(false);
    expect(readdirSync(join(runtime, 'rds-socket')).filter((f) => f.endsWith('.sock'))).toEqual([]);
  });
});

describe('RdsStack', () => {
  it('refuses unknown option names with EINVAL naming the option', () => {
    const err = (() => {
      try {
        new RdsStack({ heartbeatInterval: 500 } as never);
      } catch (e) {
        return e;
      }
      return null;
    })();
    expect(err).toBeInstanceOf(RdsError);
    expect((err as RdsError).code).toBe('EINVAL');
    expect((err as RdsError).message).toContain('"heartbeatInterval"');
    expect((err as RdsError).message).toContain('did you mean heartbeatIntervalMs?');
    expect(() => new RdsStack(null as never)).toThrow(/EINVAL/);
  });

  it('an unhandled error (a control socket that cannot be opened) becomes a process warning; a listener gets it instead', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error): void => {
      warnings.push(w);
    };
    process.on('warning', onWarning);
    try {
      const a = new RdsStack({ control: join(runtime, 'no-such-dir', 'a.sock') });
      stacks.push(a);
      await until(() => warnings.some((w) => w.name === 'RdsStackWarning'), 'the warning');
      const w = warnings.find((x) => x.name === 'RdsStackWarning')!;
      expect(w.message).toContain("unhandled 'error' event on an RdsStack");
      expect(w.message).toContain('no-such-dir');
      expect((w as Error & { code?: string }).code).toBe('RDS_SOCKET_UNHANDLED_ERROR');

      const got: Error[] = [];
      const b = new RdsStack({ control: join(runtime, 'no-such-dir', 'b.sock') });
      b.on('error', (e) => got.push(e));
      stacks.push(b);
      await until(() => got.length === 1, 'the error event');
      await new Promise((r) => setImmediate(r));
      expect(warnings.filter((x) => x.message.includes('b.sock'))).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
