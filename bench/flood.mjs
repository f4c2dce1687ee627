#!/usr/bin/env node
// npm run bench:flood [-- --seconds N] — memory under load. Three sender processes flood one
// receiver process that never reads. Congestion (SO_RCVBUF) and the senders' SO_SNDBUF must keep
// the receiver's memory bounded: heap and RSS are printed every second, then the growth between
// the first and the last quarter of the run.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { RdsSocket, RdsStack, constants } from '../dist/index.js';

const arg = (n, d) => {
  const i = process.argv.indexOf(n);
  return i >= 0 ? process.argv[i + 1] : d;
};
const role = arg('--role', 'main');
const TCP_PORT = Number(arg('--tcp-port', 26450));
const SECONDS = Number(arg('--seconds', 30));
const RX = '127.30.0.1';

if (role === 'receiver') {
  const stack = new RdsStack({ tcpPort: TCP_PORT });
  const s = new RdsSocket({ stack });
  await s.bind({ address: RX, port: 4000 });
  const t0 = Date.now();
  const samples = [];
  const tick = setInterval(() => {
    const m = process.memoryUsage();
    const queued = stack.info().recvQueue.reduce((n, q) => n + q.bytes, 0);
    samples.push({
      t: Math.round((Date.now() - t0) / 1000),
      heapMiB: +(m.heapUsed / 2 ** 20).toFixed(1),
      rssMiB: +(m.rss / 2 ** 20).toFixed(1),
      queuedKiB: Math.round(queued / 1024),
      delivered: stack.counters.get('recv_delivered'),
    });
    console.log(JSON.stringify(samples.at(-1)));
    if (Date.now() - t0 >= SECONDS * 1000) {
      clearInterval(tick);
      process.exit(0);
    }
  }, 1000);
} else if (role === 'sender') {
  const me = arg('--self');
  const stack = new RdsStack({ tcpPort: TCP_PORT });
  const s = new RdsSocket({ stack });
  await s.bind({ address: me, port: 4000 });
  s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 1 << 20);
  const data = Buffer.alloc(8192, 7);
  for (;;) await s.send(data, { address: RX, port: 4000 }).catch(() => {});
} else {
  const self = fileURLToPath(import.meta.url);
  const rx = spawn(
    process.execPath,
    [self, '--role', 'receiver', '--seconds', String(SECONDS), '--tcp-port', String(TCP_PORT)],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const senders = [2, 3, 4].map((h) =>
    spawn(process.execPath, [self, '--role', 'sender', '--self', `127.30.0.${h}`, '--tcp-port', String(TCP_PORT)], {
      stdio: 'inherit',
    }),
  );
  const rows = [];
  rx.stdout.setEncoding('utf8');
  let buf = '';
  rx.stdout.on('data', (d) => {
    buf += d;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const r = JSON.parse(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
      rows.push(r);
      console.log(
        `t=${String(r.t).padStart(3)}s  heap ${String(r.heapMiB).padStart(6)} MiB  rss ${String(r.rssMiB).padStart(6)} MiB  unread ${String(r.queuedKiB).padStart(7)} KiB  delivered ${r.delivered}`,
      );
    }
  });
  await new Promise((res) => rx.on('exit', res));
  for (const s of senders) s.kill('SIGKILL');
  const q = Math.max(1, Math.floor(rows.length / 4));
  const avg = (xs, k) => xs.reduce((n, r) => n + r[k], 0) / xs.length;
  const first = rows.slice(0, q),
    last = rows.slice(-q);
  console.log(`\nunread bytes stay bounded by congestion: max ${Math.max(...rows.map((r) => r.queuedKiB))} KiB`);
  console.log(
    `rss first quarter ${avg(first, 'rssMiB').toFixed(1)} MiB, last quarter ${avg(last, 'rssMiB').toFixed(1)} MiB; heap ${avg(first, 'heapMiB').toFixed(1)} -> ${avg(last, 'heapMiB').toFixed(1)} MiB`,
  );
  const grew = avg(last, 'rssMiB') > avg(first, 'rssMiB') * 1.5 + 16;
  console.log(grew ? 'memory GREW under a non-reading receiver' : 'memory stayed flat under a non-reading receiver');
  process.exit(grew ? 1 : 0);
}
