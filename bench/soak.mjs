#!/usr/bin/env node
// npm run soak [-- --short] — 3 rds-socket nodes, one process each, exchange `count` messages of
// mixed sizes in each direction of every pair, through fault proxies that reset the connections
// (inside headers, inside payloads, between messages) at least `resets` times and cut single
// multipath lanes for longer than the failover grace period (so their messages move to live
// lanes and back), while one node stops reading, holds an unread backlog longer than
// ackDelayMaxMs (acknowledged as queued, not read) and is killed with SIGKILL and restarted, and
// another closes its receiving socket with an unread backlog and binds a new one 300 ms later.
// Every message is sent with send({ confirm: true }). Prints, per pair: sent, confirmed, rejected
// (ECONNRESET: discarded unread or its receiver died; ECONNREFUSED: no socket bound), delivered,
// confirmed but never delivered (to any application), lost (sender alive to the end, neither
// confirmed nor rejected, never delivered) and duplicated (delivered twice to the same
// application instance). Exits non-zero unless confirmed-but-never-delivered = lost = duplicated
// = 0 and order held. Senders pause at a third until node 2 holds its reading and at two thirds
// until node 1 does, so both backlogs build and every end marker reaches node 2's last
// incarnation. Nodes exit together once all are done; past --deadline-ms (60 s short, 1 h
// long) every live node prints what it waits for and the soak fails rather than hang.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FaultProxy } from '../dist/testing/index.js';

const short = process.argv.includes('--short');
const arg = (name, d) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : d;
};
const COUNT = arg('--count', short ? 3000 : 200_000);
const RESETS = arg('--resets', short ? 12 : 100);
const TCP_PORT = arg('--tcp-port', 26420);
const nodes = ['127.26.0.1', '127.26.0.2', '127.26.0.3'];
const dir = mkdtempSync(join(tmpdir(), 'rds-soak-'));
const NODE = fileURLToPath(new URL('./soak-node.mjs', import.meta.url));

// One proxy per pair, on the initiator's (smaller address's) path to the acceptor.
const proxies = [];
const dial = [];
for (let a = 0; a < 3; a++)
  for (let b = a + 1; b < 3; b++) {
    const p = await FaultProxy.start({
      listen: { host: '127.26.0.100', port: 0 },
      target: { host: nodes[b], port: TCP_PORT },
      sourceAddress: nodes[a],
    });
    proxies.push(p);
    dial.push(`${nodes[a]}>${nodes[b]}=127.26.0.100:${p.address.port}`);
  }

const procs = new Map();
// Nodes stay up until every node is done, so none takes away read reports another still waits for.
const done = new Set();
function nodeDone(key) {
  done.add(key);
  if (!rebound || !['0.0', '1.0', '2.1'].every((k) => done.has(k))) return;
  for (const [, { p }] of procs) p.stdin.write('exit\n');
}
/** Set once node 1 has closed and rebound its receiving socket: no node leaves before that. */
let rebound = false;
const summaries = [];
const held = new Map();
function start(i, epoch) {
  const p = spawn(
    process.execPath,
    [NODE, String(i), String(epoch), String(COUNT), dir, nodes.join(','), dial.join(','), String(TCP_PORT)],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  let out = '';
  p.stdin.on('error', () => {}); // a node killed or gone: nothing more to tell it
  p.stdout.on('data', (d) => {
    out += d;
    const m = /\{"ev":"held","unread":(\d+)\}/.exec(out.slice(out.lastIndexOf('{"ev":"held"')));
    if (m && !held.has(`${i}.${epoch}`)) held.set(`${i}.${epoch}`, Number(m[1]));
    if (!done.has(`${i}.${epoch}`) && out.includes('{"ev":"done"')) nodeDone(`${i}.${epoch}`);
  });
  const exited = new Promise((res) => p.on('exit', (code, sig) => res({ code, sig, out })));
  procs.set(i, { p, epoch, exited });
  return exited;
}
/** Sends a command to a node and waits until it reports its backlog aged past ackDelayMaxMs. */
async function holdBacklog(i, cmd, phase) {
  const { p, epoch } = procs.get(i);
  p.stdin.write(`${cmd}\n`);
  // Only now do the senders go on (they wait at a third and at two thirds): the backlog builds.
  for (const [, { p: q }] of procs) q.stdin.write(`${phase}\n`);
  for (let t = 0; t < 1500 && !held.has(`${i}.${epoch}`); t++) await new Promise((r) => setTimeout(r, 20));
  return held.get(`${i}.${epoch}`) ?? -1;
}
const t0 = Date.now();
const exits = [0, 1, 2].map((i) => start(i, 0));

// Faults: resets at random offsets while traffic flows.
let resetting = true;
const kinds = ['header', 'payload', 'between'];
const faults = (async () => {
  let k = 0;
  while (resetting) {
    const p = proxies[k % proxies.length];
    await Promise.race([
      p.resetAt(k % 2 ? 'forward' : 'backward', kinds[k % 3]),
      new Promise((r) => setTimeout(r, 200)),
    ]);
    k++;
    await new Promise((r) => setTimeout(r, short ? 20 : 40));
  }
})();
// Alongside: one lane at a time down past the nodes' 100 ms failover grace, so its messages move
// to live lanes and come back when it returns.
let cuts = 0;
const laneCuts = (async () => {
  while (resetting) {
    const p = proxies[cuts % proxies.length];
    const lane = 1 + (cuts % 7);
    p.cutLane(lane);
    await new Promise((r) => setTimeout(r, 250));
    p.cutLane(lane, false);
    cuts++;
    await new Promise((r) => setTimeout(r, 100));
  }
})();

// Kill node 2 once, early in its run, holding an unread backlog older than ackDelayMaxMs, and
// restart it as epoch 1.
const victim = 2;
await new Promise((r) => setTimeout(r, short ? 700 : 3000));
const victimUnread = await holdBacklog(victim, 'hold', 'phase1');
procs.get(victim).p.kill('SIGKILL');
await exits[victim];
const restarted = start(victim, 1);
for (const [i, { p }] of procs) {
  for (let j = 0; j < 3; j++) if (j !== i) p.stdin.write(`final ${j} ${j === victim ? 1 : 0}\n`);
  p.stdin.write('go\n');
}
// Node 1 closes its receiving socket with an unread backlog and binds a new one, mid-stream.
const rebinder = 1;
await new Promise((r) => setTimeout(r, short ? 300 : 3000));
const rebindUnread = await holdBacklog(rebinder, 'rebind', 'phase2');
rebound = true;
nodeDone('rebound');
// A soak that hangs says what it waits for: past the deadline every live node dumps its
// per-pair progress and path states, then all are killed and the soak fails.
const DEADLINE_MS = arg('--deadline-ms', short ? 60_000 : 3_600_000);
let deadline;
const timedOut = new Promise((res) => {
  deadline = setTimeout(res, Math.max(1000, DEADLINE_MS - (Date.now() - t0)), 'timeout');
});
const results = await Promise.race([Promise.all([exits[0], exits[1], restarted]), timedOut]);
if (results === 'timeout') {
  console.error(`soak: not finished after ${DEADLINE_MS} ms; what each node waits for:`);
  for (const [, { p }] of procs) if (p.exitCode === null) p.stdin.write('dump\n');
  await new Promise((r) => setTimeout(r, 1000));
  for (const [, { p }] of procs) if (p.exitCode === null) p.kill('SIGKILL');
  console.log('soak FAILED: timed out');
  process.exit(1);
}
clearTimeout(deadline);
resetting = false;
await faults;
await laneCuts;
const resets = proxies.reduce((n, p) => n + p.resets, 0);
for (const p of proxies) await p.close();
for (const r of results) {
  if (r.code !== 0) {
    console.error('a node failed:', r);
    process.exit(1);
  }
  summaries.push(JSON.parse(r.out.trim().split('\n').pop()));
}

// Accounting from the synchronous logs of every incarnation.
const read = (f) =>
  existsSync(f)
    ? readFileSync(f, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split(' ').map(Number))
    : [];
const epochsOf = (i) => (i === victim ? [0, 1] : [0]);
// Each reason the soak fails, named in its last line (CI shows a failure's first lines only).
const reasons = [];
const moved = summaries.reduce((n, x) => n + (x.counters?.failover_moved ?? 0), 0);
const movedDups = summaries.reduce((n, x) => n + (x.counters?.recv_drop_moved_dup ?? 0), 0);
console.log(
  `\nsoak: ${COUNT} messages per direction per pair, ${resets} connection resets, ${cuts} lane cuts, ${moved} messages moved by failover (${movedDups} already delivered, dropped), node ${victim} killed with ${victimUnread} messages unread past ackDelayMaxMs and restarted, node ${rebinder} closed its receiving socket with ${rebindUnread} unread and bound a new one, ${((Date.now() - t0) / 1000).toFixed(1)} s`,
);
console.log(
  'sender(epoch) -> receiver   sent  confirmed  rejected  delivered  redelivered-after-restart  confirmed-but-never-delivered  lost  duplicated  order',
);
for (let s = 0; s < 3; s++)
  for (const se of epochsOf(s))
    for (let r = 0; r < 3; r++) {
      if (r === s) continue;
      const acked = new Set(
        read(join(dir, `acked.${s}.${se}`))
          .filter(([p]) => p === r)
          .map(([, i]) => i),
      );
      const rejected = new Set(
        read(join(dir, `rejected.${s}.${se}`))
          .filter(([p]) => p === r)
          .map(([, i]) => i),
      );
      const deliveredAll = new Set();
      let dups = 0,
        redelivered = 0;
      for (const re of epochsOf(r)) {
        const seen = new Set();
        for (const [ss, e, i] of read(join(dir, `delivered.${r}.${re}`))) {
          if (ss !== s || e !== se) continue;
          // The end marker is sent again after each rejection (which says "may not have been read"):
          // a second copy is a second message then, not a duplicate.
          if (seen.has(i)) {
            if (!(i === COUNT && rejected.has(i))) dups++;
          } else if (deliveredAll.has(i)) redelivered++;
          seen.add(i);
          deliveredAll.add(i);
        }
      }
      let confirmedLost = 0;
      for (const i of acked) if (!deliveredAll.has(i)) confirmedLost++;
      // A sender that lived to the end learned the fate of every message: none may be silently gone.
      const survived = !(se === 0 && s === victim);
      let lost = 0;
      if (survived)
        for (let i = 0; i <= COUNT; i++) if (!acked.has(i) && !rejected.has(i) && !deliveredAll.has(i)) lost++;
      const sent = survived ? String(COUNT + 1) : `${acked.size + rejected.size}+`;
      const recv = summaries.find((x) => x.node === r && x.epoch === epochsOf(r).at(-1));
      const order = (recv?.violations?.[`${s}.${se}`] ?? 0) === 0 ? 'ok' : 'VIOLATED';
      if (confirmedLost || lost || dups || order !== 'ok')
        reasons.push(
          `${s}(${se})->${r}: confirmed-but-never-delivered ${confirmedLost}, lost ${lost}, duplicated ${dups}, order ${order}`,
        );
      console.log(
        `${String(s).padStart(6)}(${se})    -> ${String(r).padEnd(8)} ${sent.padStart(7)} ${String(acked.size).padStart(10)} ${String(rejected.size).padStart(9)} ${String(deliveredAll.size).padStart(10)} ${String(redelivered).padStart(26)} ${String(confirmedLost).padStart(30)} ${String(lost).padStart(5)} ${String(dups).padStart(11)}  ${order}`,
      );
    }
if (resets < RESETS) {
  reasons.push(`only ${resets} resets happened (wanted ${RESETS})`);
}
rmSync(dir, { recursive: true, force: true });
if (victimUnread <= 0 || rebindUnread <= 0) {
  reasons.push(`no unread backlog when killing (${victimUnread}) or rebinding (${rebindUnread})`);
}
console.log(
  reasons.length
    ? `soak FAILED: ${reasons.join('; ')}`
    : 'soak passed: nothing confirmed was lost, nothing lost silently, nothing delivered twice, order held',
);
process.exit(reasons.length ? 1 : 0);
