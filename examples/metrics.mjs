// Prometheus metrics with prom-client: a node's counters and per-path figures, read from
// stack.stats() when Prometheus scrapes (nothing runs between scrapes). Two nodes (127.60.7.1 and
// .2) exchange a few messages, then the example scrapes its own endpoint (an HTTP server on
// 127.0.0.1, a port the system picks) and prints some of the series.
//   node examples/metrics.mjs
// Needs `npm run build` first in a checkout and prom-client 15 (`npm install prom-client`).
// Prints the metric lines it found and "metrics: ... OK".
import http from 'node:http';
import { Registry } from 'prom-client';
import { RdsSocket, RdsStack } from 'rds-socket';
import { registerMetrics } from 'rds-socket/metrics';

const a = new RdsStack();
const b = new RdsStack();
const sa = new RdsSocket({ stack: a });
const sb = new RdsSocket({ stack: b });
await sa.bind({ address: '127.60.7.1', port: 4000 });
await sb.bind({ address: '127.60.7.2', port: 4000 });
for (let i = 0; i < 10; i++) {
  sa.sendmsg(Buffer.from(`message ${i}`), sb.address());
  await sb.recv({ timeout: 10000 });
}
await sa.flush(); // every message acknowledged: the figures below are final

// Node a's metrics, labelled so that several stacks could share the registry.
const registry = new Registry();
const unregister = registerMetrics(a, registry, { labels: { node: 'a' } });
const server = http
  .createServer(async (_req, res) => {
    res.setHeader('content-type', registry.contentType);
    res.end(await registry.metrics());
  })
  .listen(0, '127.0.0.1');
server.keepAliveTimeout = 1; // let the process end soon after the one scrape
await new Promise((r) => server.once('listening', r));

const { port } = /** @type {import('node:net').AddressInfo} */ (server.address());
const text = await (await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { connection: 'close' } })).text();
const series = (name) => text.split('\n').filter((l) => l.startsWith(name));
const sent = series('rds_path_sent_messages_total').reduce((n, l) => n + Number(l.split(' ').pop()), 0);
console.log(`rds_path_state: ${series('rds_path_state{').some((l) => l.includes('state="UP"') && l.endsWith(' 1')) ? 'a path is UP' : 'no path UP'}`);
console.log(`rds_path_sent_messages_total: ${sent >= 10 ? 'at least the 10 messages sent' : sent}`);
console.log(`rds_conn_reset_total: ${series('rds_conn_reset_total').length === 1 ? 'present' : 'missing'}`);
console.log(`rds_path_ack_latency_seconds: ${series('rds_path_ack_latency_seconds_bucket').length > 0 ? 'histogram present' : 'missing'}`);
console.log('metrics: OK');

unregister();
server.close();
await Promise.all([a.close(), b.close()]);
