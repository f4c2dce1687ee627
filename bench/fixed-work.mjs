#!/usr/bin/env node
// node bench/fixed-work.mjs DIST in-process|attached [N] [SIZE]
// A fixed amount of work in one process, for comparing two builds by whole-process CPU (user +
// sys, e.g. /usr/bin/time -v), which a loaded machine disturbs far less than throughput: N
// messages of SIZE bytes (default 20000 x 1 KiB) sent with send() from 127.151.0.1 to 127.151.0.2
// and all received. in-process: two stacks of this process over TCP (port 26790). attached: two
// host nodes (DIST/cli/rds-socketd.js, port 26791), one stack attached to each; the nodes are
// waited for, so their CPU counts too. DIST is a build's dist/ directory (absolute path).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [dist, mode, n, size] = process.argv.slice(2);
if (!dist || (mode !== 'in-process' && mode !== 'attached')) {
  console.error('usage: node bench/fixed-work.mjs DIST in-process|attached [N] [SIZE]');
  process.exit(2);
}
const { RdsSocket, RdsStack } = await import(`${dist}/index.js`);
const N = Number(n ?? 20000);
const SIZE = Number(size ?? 1024);

const dir = mkdtempSync(join(tmpdir(), 'rds-fixed-work-'));
const paths = [join(dir, 'a.sock'), join(dir, 'b.sock')];
const daemons =
  mode === 'attached'
    ? paths.map((p) =>
        spawn(process.execPath, [`${dist}/cli/rds-socketd.js`, '--path', p, '--tcp-port', '26791', '--quiet'], {
          stdio: 'inherit',
        }),
      )
    : [];

/** Attaches once the node listens (bounded: 200 tries 50 ms apart). */
async function attach(p) {
  for (let i = 0; i < 200; i++) {
    try {
      return await RdsStack.attach(p);
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error(`no host node at ${p}`);
}

const [A, B] =
  mode === 'attached'
    ? [await attach(paths[0]), await attach(paths[1])]
    : [new RdsStack({ tcpPort: 26790 }), new RdsStack({ tcpPort: 26790 })];
const tx = new RdsSocket({ stack: A });
const rx = new RdsSocket({ stack: B });
await tx.bind({ address: '127.151.0.1', port: 4000 });
await rx.bind({ address: '127.151.0.2', port: 4000 });
const buf = Buffer.alloc(SIZE, 7);
const dest = { address: '127.151.0.2', port: 4000 };
let got = 0;
const recv = (async () => {
  for await (const _ of rx) if (++got === N) break;
})();
for (let i = 0; i < N; i++) await tx.send(buf, dest);
await recv;
if (got !== N) throw new Error(`received ${got} of ${N}`);
await tx.close();
await rx.close();
await A.close();
await B.close();
await Promise.all(
  daemons.map(
    (d) =>
      new Promise((r) => {
        d.on('exit', r);
        d.kill('SIGTERM');
      }),
  ),
);
rmSync(dir, { recursive: true, force: true });
