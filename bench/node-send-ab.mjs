#!/usr/bin/env node
// node bench/node-send-ab.mjs DIST_A DIST_B [--rounds N --msgs N --size BYTES] [--recv] [--prof DIR]
// CPU per message of the host-node send path (with --recv: its receive path), two builds against
// each other (each a dist/ directory, e.g. this checkout's and a checkout of the commit before a
// change), alternating run by run. Each run is one child process holding all of it: a host node
// (serve()), a socket attached to it (RdsStack.attach) sending `--msgs` messages of `--size`
// bytes over RDS/TCP to a socket on a stack of its own that reads them (--recv: the other way
// round, the attached socket reads), after a warm-up of the same count. `--prof DIR` writes each
// child's V8 CPU profile there (node --cpu-prof). What it reports is the child's own CPU
// time (process.cpuUsage: user + system) per message over the measured messages, so a machine
// loaded by others slows the runs but changes the figure far less than it changes throughput
// (wall time): the figure for comparing two builds on a shared machine. All on 127.153.200.x.
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const SELF = fileURLToPath(import.meta.url);
const arg = (n, d) => {
  const i = process.argv.indexOf(n);
  return i >= 0 ? Number(process.argv[i + 1]) : d;
};

if (process.env.NODE_SEND_AB) await child(JSON.parse(process.env.NODE_SEND_AB));
else await main();

async function child({ dist, msgs, size, recv }) {
  const { RdsSocket, RdsStack } = await import(resolve(dist, 'index.js'));
  const dir = mkdtempSync(join(tmpdir(), 'rds-node-send-ab-'));
  const node = new RdsStack({ tcpPort: 26779 });
  await node.serve({ path: join(dir, 'n.sock') });
  const peerStack = new RdsStack({ tcpPort: 26779 });
  const attached = await RdsStack.attach(join(dir, 'n.sock'));
  const rx = new RdsSocket({ stack: recv ? attached : peerStack });
  await rx.bind({ address: '127.153.200.2', port: 9000 });
  rx.setsockopt(1, 8, 16 << 20);
  const tx = new RdsSocket({ stack: recv ? peerStack : attached });
  await tx.bind({ address: '127.153.200.1', port: 5000 });
  tx.setsockopt(1, 7, 4 << 20);
  const to = rx.address();
  const data = Buffer.alloc(size, 1);
  const phase = async () => {
    let got = 0;
    const reading = (async () => {
      for await (const _ of rx) if (++got === msgs) return;
    })();
    for (let i = 0; i < msgs; i++) {
      try {
        tx.sendmsg(data, to);
      } catch (e) {
        if (e.code !== 'EAGAIN' && e.code !== 'ENOBUFS') throw e;
        await tx.send(data, to);
      }
    }
    await reading;
  };
  await phase(); // warm-up: compile the hot code, fill the pools
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await phase();
  const c = process.cpuUsage(c0);
  const ms = performance.now() - t0;
  process.send({ usPerMsg: (c.user + c.system) / msgs, msgsPerSec: (msgs / ms) * 1000 });
  await attached.close();
  await node.close();
  await peerStack.close();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}

function run(dist, msgs, size) {
  return new Promise((res, rej) => {
    const prof = process.argv.indexOf('--prof');
    const execArgv = prof >= 0 ? ['--cpu-prof', '--cpu-prof-dir', process.argv[prof + 1]] : [];
    const recv = process.argv.includes('--recv');
    const env = { ...process.env, NODE_SEND_AB: JSON.stringify({ dist, msgs, size, recv }) };
    const p = fork(SELF, [], { execArgv, env });
    let r = null;
    p.on('message', (m) => (r = m));
    p.on('exit', (code) => (r !== null ? res(r) : rej(new Error(`run of ${dist} exited ${code}`))));
  });
}

async function main() {
  const [a, b] = process.argv.slice(2, 4);
  if (a === undefined || b === undefined || a.startsWith('--')) {
    console.error(
      'usage: node bench/node-send-ab.mjs DIST_A DIST_B [--rounds N --msgs N --size BYTES] [--recv] [--prof DIR]',
    );
    process.exit(2);
  }
  const rounds = arg('--rounds', 5);
  const size = arg('--size', 1024);
  const msgs = arg('--msgs', size >= 16384 ? 5000 : 50000);
  const res = { [a]: [], [b]: [] };
  for (let i = 0; i < rounds; i++)
    for (const d of i % 2 === 0 ? [a, b] : [b, a]) {
      const r = await run(d, msgs, size);
      res[d].push(r);
      console.log(
        `round ${i + 1} ${d}: ${r.usPerMsg.toFixed(2)} us CPU per message, ${r.msgsPerSec.toFixed(0)} msgs/s`,
      );
    }
  const med = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
  const ma = med(res[a].map((r) => r.usPerMsg));
  const mb = med(res[b].map((r) => r.usPerMsg));
  console.log(
    `${process.argv.includes('--recv') ? 'receive' : 'send'}, ${size} B, medians of ${rounds}: ${a} ${ma.toFixed(2)} us, ${b} ${mb.toFixed(2)} us CPU per message (${b} / ${a} = ${(mb / ma).toFixed(2)}x)`,
  );
}
