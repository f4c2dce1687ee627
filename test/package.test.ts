import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// The packed tarball, as a user installs it: require() and import from a CommonJS app, a
// TypeScript (module: nodenext) CommonJS app, and the warning when the addon cannot load.
// Installed offline by extracting the tarball into the app's node_modules and linking its two
// dependencies from ours (the npm cache here does not hold them, and tests make no downloads).
// Addresses 127.142.x.y (this file's range).

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
let dir = '';
let app = '';

function run(args: string[], cwd: string, ms = 60000): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    const t = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`node ${args.join(' ')} did not finish in ${ms} ms:\n${out}\n${err}`));
    }, ms);
    p.on('exit', (code) => {
      clearTimeout(t);
      resolve({ code: code ?? 1, out, err });
    });
  });
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'rds-pack-'));
  // dist/ is built by pretest; --ignore-scripts so packing does not rebuild it here.
  const name = execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', dir], {
    cwd: ROOT,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  })
    .trim()
    .split('\n')
    .pop()!;
  app = join(dir, 'app');
  mkdirSync(join(app, 'node_modules', '@types'), { recursive: true });
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'commonjs' }));
  execFileSync('tar', ['xzf', join(dir, name), '-C', join(app, 'node_modules')]);
  execFileSync('mv', [join(app, 'node_modules', 'package'), join(app, 'node_modules', 'rds-socket')]);
  for (const dep of ['eventemitter3', 'node-gyp-build', '@types/node']) {
    symlinkSync(join(ROOT, 'node_modules', dep), join(app, 'node_modules', dep));
  }
}, 120000);

afterAll(() => {
  if (dir !== '') rmSync(dir, { recursive: true, force: true });
});

describe('the packed tarball', () => {
  it('holds the build, the addon, the man pages; builds on prepack, runs no install script', () => {
    const pkg = JSON.parse(readFileSync(join(app, 'node_modules', 'rds-socket', 'package.json'), 'utf8'));
    for (const f of [
      'dist/index.js',
      'dist/index.d.ts',
      'dist/rpc/index.js',
      'dist/metrics/index.js',
      'prebuilds/linux-x64/node.napi.node',
      'man/RdsSocket.3',
      'man/rds-socketd.8',
    ]) {
      expect(existsSync(join(app, 'node_modules', 'rds-socket', f)), f).toBe(true);
    }
    expect(pkg.scripts.prepack).toBeDefined();
    for (const s of ['prepare', 'preinstall', 'install', 'postinstall']) expect(pkg.scripts[s], s).toBeUndefined();
    expect(pkg.engines.node).toBe('>=20.19');
    expect(pkg.peerDependenciesMeta['prom-client'].optional).toBe(true);
  });

  it('carries the addon for linux-x64 and linux-arm64, each built for its machine and exporting the N-API entry', () => {
    for (const [dir, machine] of [
      ['linux-x64', 62],
      ['linux-arm64', 183],
    ] as const) {
      const f = readFileSync(join(app, 'node_modules', 'rds-socket', 'prebuilds', dir, 'node.napi.node'));
      expect(f.subarray(0, 4).toString('latin1'), dir).toBe('\x7fELF');
      expect(f[4], `${dir}: 64-bit`).toBe(2);
      expect(f.readUInt16LE(16), `${dir}: a shared object`).toBe(3); // ET_DYN
      expect(f.readUInt16LE(18), `${dir}: e_machine`).toBe(machine); // EM_X86_64, EM_AARCH64
      expect(f.includes(Buffer.from('napi_register_module_v1\0')), `${dir}: N-API module`).toBe(true);
    }
  });

  it('require() and import both load it, as one copy (one default stack)', async () => {
    writeFileSync(
      join(app, 'both.js'),
      `
      const cjs = require('rds-socket');
      const rpc = require('rds-socket/rpc');
      const metrics = require('rds-socket/metrics');
      const testing = require('rds-socket/testing');
      import('rds-socket').then(async (esm) => {
        const rpcEsm = await import('rds-socket/rpc');
        console.log(JSON.stringify({
          socket: typeof cjs.RdsSocket, client: typeof rpc.RpcClient, serve: typeof rpc.serve,
          metrics: typeof metrics.registerMetrics, proxy: typeof testing.FaultProxy,
          same: esm.RdsStack === cjs.RdsStack && esm.RdsStack.default() === cjs.RdsStack.default() && rpcEsm.RpcClient === rpc.RpcClient,
          sol: cjs.constants.SOL_RDS,
        }));
      });
    `,
    );
    const r = await run(['both.js'], app);
    expect(r.err).toBe('');
    expect(JSON.parse(r.out)).toEqual({
      socket: 'function',
      client: 'function',
      serve: 'function',
      metrics: 'function',
      proxy: 'function',
      same: true,
      sol: 276,
    });
  });

  it('a TypeScript CommonJS app (module: nodenext) compiles against the declarations and runs', async () => {
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          strict: true,
          outDir: 'out',
          types: ['node'],
        },
        files: ['main.ts'],
      }),
    );
    writeFileSync(
      join(app, 'main.ts'),
      `
      import { RdsSocket, RdsStack, RdsError, constants } from 'rds-socket';
      import { RpcClient, serve } from 'rds-socket/rpc';
      async function main(): Promise<void> {
        const stack = new RdsStack({ tcpPort: 26385 });
        const ws = new RdsSocket({ stack });
        const cs = new RdsSocket({ stack });
        await ws.bind({ address: '127.142.0.1', port: 7000 });
        await cs.bind({ address: '127.142.0.1', port: 7001 });
        const server = serve(ws, (data) => 'echo ' + data.toString());
        const client = new RpcClient(cs, { timeout: 5000 });
        const reply: Buffer = await client.request({ address: '127.142.0.1', port: 7000 }, Buffer.from('ts'));
        const size: number | boolean = cs.getsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF);
        client.close();
        await server.close();
        await stack.close();
        console.log(reply.toString(), typeof size, new RdsError('EINVAL', 'x').code);
      }
      void main();
    `,
    );
    const c = await run([TSC, '-p', 'tsconfig.json'], app, 90000);
    expect(c.out + c.err).toBe('');
    expect(c.code).toBe(0);
    expect(readFileSync(join(app, 'out', 'main.js'), 'utf8')).toContain('require("rds-socket")');
    const r = await run(['out/main.js'], app);
    expect(r.err).toBe('');
    expect(r.out.trim()).toBe('echo ts number EINVAL');
  }, 120000);

  it('says once, with an RdsNativeWarning, which guarantee is weaker when the addon cannot load', async () => {
    const script = `
      const { RdsSocket, RdsStack } = require('rds-socket');
      const warnings = [];
      process.on('warning', (w) => warnings.push(w));
      (async () => {
        const a = new RdsStack({ tcpPort: 26385 });
        const b = new RdsStack({ tcpPort: 26385 });
        const sa = new RdsSocket({ stack: a });
        const sb = new RdsSocket({ stack: b });
        await sa.bind({ address: '127.142.1.1', port: 4000 });
        await sb.bind({ address: '127.142.1.2', port: 4000 });
        for (let i = 0; i < 3; i++) {
          await sa.send(Buffer.from('x'), { address: '127.142.1.2', port: 4000 });
          await sb.recv({ timeout: 5000 });
        }
        await a.close();
        await b.close();
        await new Promise((r) => setImmediate(r));
        const ours = warnings.filter((w) => w.name === 'RdsNativeWarning');
        console.log(JSON.stringify({ n: ours.length, code: ours[0] && ours[0].code, text: ours[0] && ours[0].message }));
      })();
    `;
    writeFileSync(join(app, 'warn.js'), script);
    // With the prebuilt addon: no warning.
    const withAddon = await run(['warn.js'], app);
    expect(JSON.parse(withAddon.out)).toMatchObject({ n: 0 });
    // Without it (as on a platform with no prebuild): exactly one, saying what is weaker.
    rmSync(join(app, 'node_modules', 'rds-socket', 'prebuilds'), { recursive: true });
    const without = await run(['warn.js'], app);
    const w = JSON.parse(without.out);
    expect(w.n).toBe(1);
    expect(w.code).toBe('RDS_SOCKET_NO_NATIVE');
    expect(w.text).toMatch(/kernel peers.*handed to the local TCP/);
    expect(without.err).toContain('RdsNativeWarning');
  });
});
