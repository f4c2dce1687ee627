#!/usr/bin/env node
// npm run bench:mprds — what multipath buys: with one TCP connection every socket waits behind the
// largest message (head-of-line blocking); with 8 paths a socket's messages ride their own lane.
// Prints small-message round trips (p50, p99) from one socket while another socket streams 1 MiB
// messages to the same node, and bulk throughput from 4 sockets, with 1 path and with 8 paths.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { RdsSocket, RdsStack, constants } from '../dist/index.js';

const arg = (n, d) => {
  const i = process.argv.indexOf(n);
  return i >= 0 ? process.argv[i + 1] : d;
};
const role = arg('--role', 'main');
const npaths = Number(arg('--npaths', 8));
const SECONDS = Number(arg('--seconds', process.argv.includes('--smoke') ? 0.5 : 3));
const TCP_PORT = 26800 + npaths;
const RX = `127.44.${npaths}.2`,
  TX = `127.44.${npaths}.1`;
// The lane a port hashes to (rds-socket's local choice): pick ports on different lanes.
const lane = (p) => ((Math.imul(p, 0x9e3779b1) >>> 16) & 0xffff) % 8;
const ports = [];
for (let p = 5000; ports.length < 5; p++) if (!ports.some((q) => lane(q) === lane(p))) ports.push(p);
const [PING, ...BULK] = ports;

async function sock(stack, address, port) {
  const s = new RdsSocket({ stack });
  await s.bind({ address, port });
  s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 8 << 20);
  s.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 32 << 20);
  return s;
}

if (role === 'rx') {
  const stack = new RdsStack({ tcpPort: TCP_PORT, npaths });
  const echo = await sock(stack, RX, PING);
  echo.on('readable', () => {
    for (let m = echo.recvmsg(); m; m = echo.recvmsg()) echo.sendmsg(m.data, m);
  });
  let bytes = 0;
  for (const p of BULK) {
    const s = await sock(stack, RX, p);
    s.on('readable', () => {
      for (let m = s.recvmsg(); m; m = s.recvmsg()) bytes += m.data.length;
    });
  }
  setInterval(() => process.stdout.write(`${JSON.stringify({ bytes })}\n`), 200);
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
} else if (role === 'tx') {
  const stack = new RdsStack({ tcpPort: TCP_PORT, npaths });
  const ping = await sock(stack, TX, PING);
  const bulk = await Promise.all(BULK.map((p) => sock(stack, TX, p)));
  // Warm up: bring every lane up before measuring.
  for (const s of [ping, ...bulk]) await s.send(Buffer.alloc(1), { address: RX, port: PING });
  await new Promise((r) => setTimeout(r, 500));
  while (ping.recvmsg());
  const mode = arg('--mode');
  const big = Buffer.alloc(mode === 'latency' ? 1 << 20 : 64 << 10, 1);
  let stop = false;
  const streams = (mode === 'latency' ? bulk.slice(0, 1) : bulk).map(async (s, i) => {
    const dst = { address: RX, port: BULK[i] };
    while (!stop) await s.send(big, dst).catch(() => {});
  });
  const rtts = [];
  if (mode === 'latency') {
    const small = Buffer.alloc(64);
    const end = Date.now() + SECONDS * 1000;
    while (Date.now() < end) {
      const t0 = process.hrtime.bigint();
      ping.sendmsg(small, { address: RX, port: PING });
      await ping.recv({ timeout: 30000 });
      rtts.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
  } else {
    await new Promise((r) => setTimeout(r, SECONDS * 1000));
  }
  stop = true;
  process.stdout.write(`${JSON.stringify({ rtts })}\n`);
  process.exit(0);
  void streams;
} else {
  const self = fileURLToPath(import.meta.url);
  const run = (np, mode) =>
    new Promise((resolve) => {
      const rx = spawn(process.execPath, [self, '--role', 'rx', '--npaths', String(np)], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let rxBuf = '',
        bytes0 = null,
        bytes = 0,
        t0 = 0;
      rx.stdout.setEncoding('utf8');
      rx.stdout.on('data', (d) => {
        rxBuf += d;
        for (let nl = rxBuf.indexOf('\n'); nl >= 0; nl = rxBuf.indexOf('\n')) {
          const m = JSON.parse(rxBuf.slice(0, nl));
          rxBuf = rxBuf.slice(nl + 1);
          if (m.ready) {
            const tx = spawn(
              process.execPath,
              [self, '--role', 'tx', '--npaths', String(np), '--mode', mode, '--seconds', String(SECONDS)],
              { stdio: ['ignore', 'pipe', 'inherit'] },
            );
            let txBuf = '';
            tx.stdout.setEncoding('utf8');
            tx.stdout.on('data', (x) => {
              txBuf += x;
            });
            tx.on('exit', () => {
              rx.kill('SIGKILL');
              const { rtts } = JSON.parse(txBuf.trim().split('\n').pop());
              const s = rtts.sort((a, b) => a - b);
              const q = (f) => s[Math.min(s.length - 1, Math.floor(f * s.length))] ?? NaN;
              resolve({
                p50: q(0.5),
                p99: q(0.99),
                n: s.length,
                mibPerSec: bytes0 === null ? 0 : (bytes - bytes0) / ((Date.now() - t0) / 1000) / 2 ** 20,
              });
            });
          } else if ('bytes' in m) {
            if (bytes0 === null && m.bytes > 0) {
              bytes0 = m.bytes;
              t0 = Date.now();
            }
            bytes = m.bytes;
          }
        }
      });
    });
  const out = {};
  for (const np of [1, 8]) out[np] = { latency: await run(np, 'latency'), throughput: await run(np, 'throughput') };
  console.log('paths  ping p50 (us)  ping p99 (us)  pings   bulk MiB/s (4 sockets x 64 KiB)');
  for (const np of [1, 8]) {
    const l = out[np].latency,
      t = out[np].throughput;
    console.log(
      `${String(np).padStart(5)}  ${l.p50.toFixed(0).padStart(13)}  ${l.p99.toFixed(0).padStart(13)}  ${String(l.n).padStart(5)}   ${t.mibPerSec.toFixed(1)}`,
    );
  }
  console.log('(pings from one socket while another streams 1 MiB messages to the same node)');
  process.exit(0);
}
