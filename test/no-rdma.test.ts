import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The package must load, and TCP must work, on a host without rdma-core; choosing InfiniBand
// there fails with a clear error. rdma-core is hidden from one child process by bind-mounting
// /dev/null over its libraries in a private mount namespace (root only; skipped otherwise).
const root = process.getuid?.() === 0 && spawnSync('unshare', ['--version']).status === 0;
const DIST = fileURLToPath(new URL('../dist/index.js', import.meta.url));

function rdmaLibraries(): string[] {
  const out = execFileSync('ldconfig', ['-p'], { encoding: 'utf8' });
  const paths = out
    .split('\n')
    .filter((l) => /lib(ibverbs|rdmacm)\.so\.1\b/.test(l))
    .map((l) => l.split('=>')[1]!.trim());
  return [...new Set(paths)].filter((p) => existsSync(p));
}

const script = `
import { RdsSocket, RdsStack } from ${JSON.stringify(DIST)};
const A = new RdsStack({ tcpPort: 26391 }), B = new RdsStack({ tcpPort: 26391 });
const a = new RdsSocket({ stack: A }), b = new RdsSocket({ stack: B });
await a.bind({ address: '127.31.0.1', port: 4000 });
await b.bind({ address: '127.31.0.2', port: 4000 });
a.sendmsg(Buffer.from('tcp works'), b.address());
const got = (await b.recv({ timeout: 10000 })).data.toString();
const ib = new RdsSocket({ stack: A, transport: 'ib' });
const err = await ib.bind({ address: '127.31.0.3', port: 4000 }).then(() => null, (e) => ({ code: e.code, message: e.message }));
await A.close(); await B.close();
console.log(JSON.stringify({ got, err }));
`;

describe.skipIf(!root)('without rdma-core', () => {
  it('the package loads, TCP works, and InfiniBand fails with ENOPROTOOPT naming rdma-core', () => {
    const hide = rdmaLibraries()
      .map((p) => `mount --bind /dev/null ${p}`)
      .join(' && ');
    const r = spawnSync(
      'unshare',
      ['-m', 'sh', '-c', `${hide ? `${hide} && ` : ''}exec "$0" --input-type=module -e "$1"`, process.execPath, script],
      { encoding: 'utf8', timeout: 60000 },
    );
    expect(r.status, r.stderr).toBe(0);
    const res = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
      got: string;
      err: { code: string; message: string } | null;
    };
    expect(res.got).toBe('tcp works');
    expect(res.err?.code).toBe('ENOPROTOOPT');
    expect(res.err?.message).toMatch(/rdma-core|libibverbs/);
  });
});
