// The job queue of job-queue-cluster.mjs with worker_threads instead of cluster processes: the main
// thread serves the host node, two worker threads attach to it (each `new RdsSocket()` finds the
// node through RDS_SOCKET_NODE, which the threads inherit) and bind 127.60.3.1:7001 and :7002, and
// a producer node (127.60.3.2) hands out jobs with `confirm`, resending a job on ECONNRESET (its
// worker closed without reading it) or ECONNREFUSED (no worker bound there). Worker 2 leaves after
// its fifth job.
//   node examples/job-queue-threads.mjs
// Needs `npm run build` first in a checkout. Prints the jobs' results and "job queue: ...".
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { RdsSocket, RdsStack } from 'rds-socket';

const ADDRESS = '127.60.3.1';
const PORTS = [7001, 7002];
const PRODUCER = { address: '127.60.3.2', port: 7000 };
const JOBS = 20;

if (isMainThread) {
  const dir = mkdtempSync(join(tmpdir(), 'rds-example-'));
  process.env.RDS_SOCKET_NODE = join(dir, 'node.sock'); // before the workers start: they copy env
  await RdsStack.default().serve({ path: process.env.RDS_SOCKET_NODE });
  const workers = PORTS.map((port) => new Worker(new URL(import.meta.url), { workerData: { port } }));
  await Promise.all(workers.map((w) => new Promise((resolve) => w.once('message', resolve))));

  const producerNode = new RdsStack(); // another node (another host, in a real cluster)
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
  async function dispatch(job) {
    for (;;) {
      const port = PORTS[next++ % PORTS.length];
      try {
        await producer.send(Buffer.from(String(job)), { address: ADDRESS, port }, { confirm: true, timeout: 10000 });
        return; // a worker has read it
      } catch (e) {
        if (e.code !== 'ECONNRESET' && e.code !== 'ECONNREFUSED') throw e;
        resent++;
      }
    }
  }
  await Promise.all(Array.from({ length: JOBS }, (_, i) => dispatch(i + 1)));
  await collecting;

  const once = [...results.values()].every((r) => r.length === 1);
  for (const [job, [square]] of [...results].sort((a, b) => a[0] - b[0])) console.log(`job ${job}: ${square}`);
  console.log(`job queue: ${results.size} of ${JOBS} jobs done, ${once ? 'each once' : 'SOME TWICE'}; resent after ECONNRESET/ECONNREFUSED: ${resent > 0 ? 'yes' : 'no'}`);
  await Promise.all(workers.map((w) => w.terminate()));
  await producerNode.close();
  await RdsStack.default().close();
  rmSync(dir, { recursive: true, force: true });
  process.exitCode = results.size === JOBS && once && resent > 0 ? 0 : 1;
} else {
  const { port } = workerData;
  const sock = new RdsSocket(); // attached to the main thread's node
  await sock.bind({ address: ADDRESS, port });
  parentPort.postMessage('ready');
  let done = 0;
  for await (const m of sock) {
    const job = Number(m.data.toString());
    sock.sendmsg(Buffer.from(`${job} ${job * job}`), { address: m.address, port: m.port });
    if (port === 7002 && ++done === 5) break; // leave: what is still queued to it is discarded unread
  }
  await sock.flush();
  await sock.close();
}
