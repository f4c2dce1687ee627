// A job queue over `cluster` and the host node: the primary serves the host's RDS node, two
// cluster workers attach to it and bind their own ports of one address (127.60.2.1:7001 and
// :7002), and a producer (another node, 127.60.2.2) hands out jobs with `confirm`, so each job is
// known to be read by a worker. A job whose worker closed without reading it (ECONNRESET) or that
// met no worker at all (ECONNREFUSED) is resent to another worker: every job is done exactly once.
// Here worker 2 leaves after its fifth job, while jobs are still on their way to it.
//   node examples/job-queue-cluster.mjs
// Needs `npm run build` first in a checkout. Prints the jobs' results and "job queue: ... OK".
import cluster from 'node:cluster';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RdsSocket, RdsStack } from 'rds-socket';

const WORKERS = [
  { address: '127.60.2.1', port: 7001 },
  { address: '127.60.2.1', port: 7002 },
];
const PRODUCER = { address: '127.60.2.2', port: 7000 };
const JOBS = 20;

if (cluster.isPrimary) {
  // The host node: every worker's `new RdsSocket()` attaches to it through this path.
  const dir = mkdtempSync(join(tmpdir(), 'rds-example-'));
  process.env.RDS_SOCKET_NODE = join(dir, 'node.sock');
  await RdsStack.default().serve({ path: process.env.RDS_SOCKET_NODE });
  const ready = WORKERS.map(
    (w) =>
      new Promise((resolve) => cluster.fork({ WORKER_PORT: String(w.port) }).once('message', resolve)),
  );
  await Promise.all(ready);

  // The producer is another RDS node (in a real cluster, another host).
  const producerNode = new RdsStack();
  const producer = new RdsSocket({ stack: producerNode });
  await producer.bind(PRODUCER);
  const results = new Map();
  const collecting = (async () => {
    for await (const m of producer) {
      const [job, square] = m.data.toString().split(' ').map(Number);
      results.set(job, (results.get(job) ?? []).concat(square));
      if (results.size === JOBS) break;
    }
  })();

  let next = 0;
  let resent = 0;
  // Send one job until a worker has read it: a rejected confirmation means it never was.
  async function dispatch(job) {
    for (;;) {
      const worker = WORKERS[next++ % WORKERS.length];
      try {
        await producer.send(Buffer.from(String(job)), worker, { confirm: true, timeout: 10000 });
        return;
      } catch (e) {
        if (e.code !== 'ECONNRESET' && e.code !== 'ECONNREFUSED') throw e;
        resent++; // the worker closed unread, or no worker is bound there: try the next one
      }
    }
  }
  await Promise.all(Array.from({ length: JOBS }, (_, i) => dispatch(i + 1)));
  await collecting;

  const once = [...results.values()].every((r) => r.length === 1);
  for (const [job, [square]] of [...results].sort((a, b) => a[0] - b[0])) console.log(`job ${job}: ${square}`);
  console.log(`job queue: ${results.size} of ${JOBS} jobs done, ${once ? 'each once' : 'SOME TWICE'}; resent after ECONNRESET/ECONNREFUSED: ${resent > 0 ? 'yes' : 'no'}`);
  for (const w of Object.values(cluster.workers)) w.kill();
  await producerNode.close();
  await RdsStack.default().close();
  rmSync(dir, { recursive: true, force: true });
  process.exitCode = results.size === JOBS && once && resent > 0 ? 0 : 1;
} else {
  const port = Number(process.env.WORKER_PORT);
  const sock = new RdsSocket(); // attached to the primary's node: no code of its own for that
  await sock.bind({ address: WORKERS[0].address, port });
  process.send('ready');
  let done = 0;
  for await (const m of sock) {
    const job = Number(m.data.toString());
    sock.sendmsg(Buffer.from(`${job} ${job * job}`), { address: m.address, port: m.port });
    // Worker 2 leaves after five jobs: what is still queued to it is discarded unread.
    if (port === 7002 && ++done === 5) break;
  }
  await sock.flush(); // the last reply is acknowledged before close() (which discards what is not)
  await sock.close();
  process.exit(0);
}
