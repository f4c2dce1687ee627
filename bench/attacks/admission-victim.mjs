#!/usr/bin/env node
// The victim of an admission attack (bench/attacks/admission-lib.mjs starts it):
//   node bench/attacks/admission-victim.mjs '<json>'
// json: { address, tcpPort, stack: RdsStack options, tls?: { key, cert, ca } (file paths) }.
// It answers every message with the same bytes (so a good peer measures round trips), prints
// "ready" once bound, then a JSON line of figures every 200 ms. Imported (an attack runner
// loading every file here), it does nothing: it is not an attack.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { LoopTransport, RdsSocket, RdsStack, TcpTransport } from '../../dist/index.js';

/** The victim node: runs until killed. */
export async function victim(cfg) {
  const transports = cfg.tls
    ? [
        new TcpTransport({
          tls: { key: readFileSync(cfg.tls.key), cert: readFileSync(cfg.tls.cert), ca: readFileSync(cfg.tls.ca) },
        }),
        new LoopTransport(),
      ]
    : undefined;
  const stack = new RdsStack({ tcpPort: cfg.tcpPort, ...cfg.stack, ...(transports ? { transports } : {}) });
  stack.on('error', () => {});
  // Connection attempts (pokes included): each one enters CONNECTING.
  let dials = 0;
  stack.on('state', (e) => {
    if (e.to === 'CONNECTING') dials++;
  });
  const sock = new RdsSocket({ stack });
  await sock.bind({ address: cfg.address, port: 4000 });
  const COUNTERS = [
    'conn_refused_allowlist',
    'conn_refused_limit',
    'conn_refused_tls',
    'recv_drop_header_timeout',
    'conn_poke_received',
    'conn_poke_sent',
    'conn_reclaimed',
    'tcp_accept_no_free_path',
  ];
  setInterval(() => {
    const c = stack.counters.snapshot();
    const counters = Object.fromEntries(COUNTERS.filter((n) => n in c).map((n) => [n, c[n]]));
    process.stdout.write(
      `${JSON.stringify({ t: Date.now(), rssMiB: +(process.memoryUsage().rss / 2 ** 20).toFixed(1), conns: stack.connections().length, dials, counters })}\n`,
    );
  }, 200);
  process.stdout.write('ready\n');
  for (;;) {
    const m = await sock.recv();
    try {
      sock.sendmsg(m.data, { address: m.address, port: m.port });
    } catch {
      /* ENOBUFS / EAGAIN: the good peer times that round trip out */
    }
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await victim(JSON.parse(process.argv[2]));
