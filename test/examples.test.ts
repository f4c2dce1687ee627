import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runExample } from './run-example.js';

// Every example in examples/ that runs on loopback, run as a user would (`node examples/x.mjs`,
// importing the built package by its name: npm test builds first), with a deadline, and what it
// prints checked line by line. Addresses 127.60.x.y. kernel-peer.mjs needs a kernel with rds_tcp
// and rdma.mjs an RDMA device: those two run in their suites (test/interop/kernel-example.test.ts,
// test/ib/rdma.test.ts) and are type-checked by test/readme-types.test.ts; the list below must
// name every other example.

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const NOT_HERE = ['kernel-peer.mjs', 'rdma.mjs'];
const hasOpenssl = spawnSync('openssl', ['version']).status === 0;
if (!hasOpenssl) console.log('examples/tls.mjs skipped: openssl is not installed (it makes the example certificates)');

const run = (file: string, ms = 50_000) => runExample(file, [], ms);

const lines = (out: string) => out.trimEnd().split('\n');

const EXPECTED: Record<string, string[]> = {
  'echo.mjs': [
    'echo reply 1: hello 1 (from 127.60.1.1:4000)',
    'echo reply 2: hello 2 (from 127.60.1.1:4000)',
    'echo reply 3: hello 3 (from 127.60.1.1:4000)',
    'echo: 3 of 3 replies matched',
  ],
  'job-queue-cluster.mjs': [
    ...Array.from({ length: 20 }, (_, i) => `job ${i + 1}: ${(i + 1) ** 2}`),
    'job queue: 20 of 20 jobs done, each once; resent after ECONNRESET/ECONNREFUSED: yes',
  ],
  'job-queue-threads.mjs': [
    ...Array.from({ length: 20 }, (_, i) => `job ${i + 1}: ${(i + 1) ** 2}`),
    'job queue: 20 of 20 jobs done, each once; resent after ECONNRESET/ECONNREFUSED: yes',
  ],
  'rpc.mjs': [
    'set a 1 -> ok',
    'set a 1 -> ok (again: same state)',
    'get a -> 1',
    'set slow x with a 200 ms timeout -> ETIMEDOUT',
    'set slow x retried -> ok',
    'drop everything -> EREMOTE (the handler threw)',
    'rpc: store a=1 slow=x OK',
  ],
  'fan-out.mjs': [
    ...[1, 2, 3, 4].map((i) => `127.60.5.${i} got 200 updates in order`),
    'fan-out: 4 nodes x 200 updates, each once and in order OK',
  ],
  'congestion-producer.mjs': [
    'producer: met ENOBUFS yes, waited for the port to clear each time',
    'consumer: 3000 of 3000 messages, in order',
    'congestion: OK',
  ],
  'metrics.mjs': [
    'rds_path_state: a path is UP',
    'rds_path_sent_messages_total: at least the 10 messages sent',
    'rds_conn_reset_total: present',
    'rds_path_ack_latency_seconds: histogram present',
    'metrics: OK',
  ],
  'tls.mjs': [
    'b got "hello over TLS" from 127.60.8.2:4000',
    'a got "and back"',
    "rogue node: refused by b (conn_refused_tls); b's socket has nothing from it",
    'tls: OK',
  ],
  'rails.mjs': [
    'path 0: 127.60.9.1 -> 127.60.9.2 UP',
    'path 8 (rail): 127.60.10.1 -> 127.60.10.2 UP',
    'path 0 held down: yes',
    '100 of 100 messages arrived in order over the rail',
    'path 0 back: UP',
    'rails: OK',
  ],
};

describe('examples/', () => {
  it('every example is run here, or named as run elsewhere', () => {
    const all = readdirSync(`${ROOT}examples`).filter((f) => f.endsWith('.mjs'));
    expect(all.filter((f) => !NOT_HERE.includes(f)).sort()).toEqual(Object.keys(EXPECTED).sort());
    expect(all.length).toBeGreaterThanOrEqual(10);
  });

  // Concurrently: each is a few seconds of start-up and waiting, not of CPU.
  it.concurrent.each(Object.keys(EXPECTED))(
    '%s runs and prints what it says',
    async (file) => {
      if (file === 'tls.mjs' && !hasOpenssl) return;
      const r = await run(file);
      expect(lines(r.out)).toEqual(EXPECTED[file]);
      expect(r.code).toBe(0);
    },
    60_000,
  );
});
