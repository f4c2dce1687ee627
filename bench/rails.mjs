#!/usr/bin/env node
// npm run bench:rails (as root) — what rails buy (issue #25): two hosts in network namespaces
// (rdsr9-ba, rdsr9-bb) joined by two veth pairs, each link shaped on the sending side with
// `tc qdisc ... tbf` to a fixed rate so the sum is visible on one machine. Prints
//   1. bulk throughput over one link (no rail) and over two (the primary link plus a rail);
//   2. small-message latency (p50, p99, max) from 4 sockets with both links up, and while the
//      rail's link goes down mid-stream (its messages wait for the heartbeat to notice and the
//      failover grace period, then move to the primary link),
// then one line per target: figure, target, met / not met.
// Options: --rate-mbit N (per link, default 100), --seconds S (bulk, default 3), --smoke (short).
import { execFileSync, spawn } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const PEER = fileURLToPath(new URL('../test/fixtures/rail-peer.mjs', import.meta.url));
const arg = (n, d) => {
  const i = process.argv.indexOf(n);
  return i >= 0 ? process.argv[i + 1] : d;
};
const SMOKE = process.argv.includes('--smoke');
const RATE = Number(arg('--rate-mbit', 100));
const SECONDS = Number(arg('--seconds', SMOKE ? 1 : 3));
const NS_A = 'rdsr9-ba';
const NS_B = 'rdsr9-bb';
const HB = 200;
const GRACE = 300;
/** --only bulk|small: one part; --policy P: the small-message policy (default round-robin). */
const ONLY = arg('--only', 'all');
const SMALL_POLICY = arg('--policy', 'round-robin');

if (process.getuid?.() !== 0) {
  console.log('bench:rails needs root (it makes network namespaces and shapes links with tc); skipped');
  process.exit(0);
}

const sh = (cmd, ...a) => execFileSync(cmd, a, { stdio: 'ignore' });
function teardown() {
  for (const ns of [NS_A, NS_B]) {
    try {
      sh('ip', 'netns', 'del', ns);
    } catch {
      /* not there */
    }
  }
}
function setup(shape) {
  teardown();
  for (const ns of [NS_A, NS_B]) {
    sh('ip', 'netns', 'add', ns);
    sh('ip', '-n', ns, 'link', 'set', 'lo', 'up');
  }
  for (const [a, b, net] of [
    ['r9p-a', 'r9p-b', '10.132.0'],
    ['r9r-a', 'r9r-b', '10.132.1'],
  ]) {
    sh('ip', 'link', 'add', a, 'netns', NS_A, 'type', 'veth', 'peer', 'name', b, 'netns', NS_B);
    sh('ip', '-n', NS_A, 'addr', 'add', `${net}.1/24`, 'dev', a);
    sh('ip', '-n', NS_B, 'addr', 'add', `${net}.2/24`, 'dev', b);
    sh('ip', '-n', NS_A, 'link', 'set', a, 'up');
    sh('ip', '-n', NS_B, 'link', 'set', b, 'up');
    // Each link carries RATE Mbit/s from A to B (the data direction).
    if (shape)
      sh(
        'tc',
        '-n',
        NS_A,
        'qdisc',
        'add',
        'dev',
        a,
        'root',
        'tbf',
        'rate',
        `${RATE}mbit`,
        'burst',
        '64kb',
        'latency',
        '100ms',
      );
  }
}

function run(ns, args) {
  const p = spawn('ip', ['netns', 'exec', ns, process.execPath, PEER, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
  const events = [];
  const waiters = [];
  createInterface({ input: p.stdout }).on('line', (l) => {
    events.push(JSON.parse(l));
    waiters.splice(0).forEach((w) => w());
  });
  return {
    p,
    events,
    send: (c) => p.stdin.write(`${c}\n`),
    async waitFor(pred, ms, what) {
      const deadline = Date.now() + ms;
      for (;;) {
        const bad = events.find((e) => e.ev === 'error');
        if (bad) throw new Error(`node reported: ${bad.msg}`);
        const e = events.find(pred);
        if (e) return e;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => {
          const t = setTimeout(r, Math.max(1, deadline - Date.now()));
          waiters.push(() => {
            clearTimeout(t);
            r();
          });
        });
      }
    },
  };
}

const ends = (side, rails) => {
  const [bind, peer, rl, rr] =
    side === 'a'
      ? ['10.132.0.1', '10.132.0.2', '10.132.1.1', '10.132.1.2']
      : ['10.132.0.2', '10.132.0.1', '10.132.1.2', '10.132.1.1'];
  return [
    '--bind',
    bind,
    '--peer',
    peer,
    '--hb',
    String(HB),
    '--grace',
    String(GRACE),
    ...(rails ? ['--rail-local', rl, '--rail-remote', rr] : []),
  ];
};

/** One run: K sockets x rounds messages of `size` from A to B; `during(a, b)` runs once traffic flows. */
async function session({ rails, sockets, rounds, size, ratePps, policy, during }) {
  const common = ['--sockets', String(sockets), '--count', String(rounds), '--size', String(size), '--policy', policy];
  const b = run(NS_B, [...ends('b', rails), '--role', 'recv', ...common]);
  await b.waitFor((e) => e.ev === 'ready', 10000, 'receiver');
  const a = run(NS_A, [
    ...ends('a', rails),
    '--role',
    'send',
    '--wait-go',
    ...common,
    ...(ratePps ? ['--rate-pps', String(ratePps)] : []),
  ]);
  await a.waitFor((e) => e.ev === 'ready', 10000, 'sender');
  // The sender's ping opened the connection: wait for it (and the rail) to be up, then measure.
  await a.waitFor((e) => e.ev === 'state' && e.path === (rails ? 8 : 0) && e.to === 'UP', 15000, 'paths up');
  a.send('go');
  if (during) await during(a, b);
  const rx = await b.waitFor((e) => e.ev === 'done', 120000, 'receiver done');
  await a.waitFor((e) => e.ev === 'done', 30000, 'sender done');
  a.p.kill();
  b.p.kill();
  // Paths that left UP on the sending side (a link taken down, or heartbeats missed on a busy host).
  const end = a.events.findIndex((e) => e.ev === 'done');
  rx.drops = a.events.slice(0, end).filter((e) => e.ev === 'state' && e.from === 'UP').length;
  return rx;
}

const targets = [];
try {
  // 1. Throughput, each link shaped to RATE.
  if (ONLY !== 'small') {
    setup(true);
    const size = 64 << 10;
    const bytesWanted = ((RATE * 1e6) / 8) * SECONDS * 2; // enough for SECONDS at the two-link rate
    const rounds = Math.max(10, Math.round(bytesWanted / size / 4));
    const one = await session({
      rails: false,
      sockets: 4,
      rounds: Math.round(rounds / 2),
      size,
      policy: 'min-inflight',
    });
    const two = await session({ rails: true, sockets: 4, rounds, size, policy: 'min-inflight' });
    const mbit = (r) => (r.bytes * 8) / (r.ms * 1000);
    console.log(`links shaped to ${RATE} Mbit/s each (tc tbf), 4 sockets x 64 KiB messages, policy min-inflight`);
    console.log(`  one link (no rail):      ${mbit(one).toFixed(1)} Mbit/s`);
    console.log(`  two links (one rail):    ${mbit(two).toFixed(1)} Mbit/s`);
    targets.push([
      'throughput over two links / over one',
      mbit(two) / mbit(one),
      '>= 1.6x',
      mbit(two) / mbit(one) >= 1.6,
    ]);
  }
  // 2. Small messages, links unshaped: steady, then with the rail's link going down mid-stream.
  if (ONLY !== 'bulk') {
    setup(false);
    const pps = 500;
    const secs = SMOKE ? 3 : 5;
    // The same small-message run three times: one link, both links, the rail's link cut mid-way.
    const small = { sockets: 4, rounds: pps * secs, size: 256, ratePps: pps, policy: SMALL_POLICY };
    const single = await session({ ...small, rails: false });
    const steady = await session({ ...small, rails: true });
    const failing = await session({
      ...small,
      rails: true,
      during: async (_a, b) => {
        await b.waitFor((e) => e.ev === 'progress' && e.n >= pps * 4, 20000, 'traffic');
        sh('ip', '-n', NS_A, 'link', 'set', 'r9r-a', 'down');
      },
    });
    console.log(
      `small messages (256 B), 4 sockets x ${pps}/s, policy ${SMALL_POLICY}, heartbeat ${HB} ms x 3, failoverGraceMs ${GRACE}`,
    );
    const row = (n, r) =>
      console.log(
        `  ${n.padEnd(24)} p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  max ${r.max.toFixed(2)} ms  (${r.n} messages, all in order; ${r.drops} path drops)`,
      );
    row('one link (no rail):', single);
    row('both links up:', steady);
    row('rail link down mid-way:', failing);
    // A message caught on the dead rail waits for the heartbeat to notice (3 intervals) and the
    // grace period; the bound allows one interval of slack for the check's timer and the move.
    const bound = HB * 4 + GRACE + 100;
    targets.push(['small-message p99 during a rail failure (ms)', failing.p99, `<= ${bound}`, failing.p99 <= bound]);
    // With both links up, a rail costs nothing: p99 within that of one link (x1.5, + 2 ms of noise).
    const steadyBound = single.p99 * 1.5 + 2;
    targets.push([
      'small-message p99 both links up (ms)',
      steady.p99,
      `<= ${steadyBound.toFixed(1)}`,
      steady.p99 <= steadyBound,
    ]);
  }
} finally {
  teardown();
}
// Tail latencies on a shared machine follow its load: say what it was.
console.log(
  `\nload average ${loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')} on ${cpus().length} CPUs`,
);
for (const [n, f, t, met] of targets)
  console.log(`${n.padEnd(50)}${f.toFixed(2).padEnd(10)}target ${t.padEnd(10)}${met ? 'met' : 'not met'}`);
