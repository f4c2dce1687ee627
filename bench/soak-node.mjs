// One soak node (see soak.mjs). Sends `count` messages to each peer with send({ confirm: true })
// through a window from one socket (port 4001), receives on another (port 4000) with for await,
// and logs synchronously, so a SIGKILL loses no record:
//   <dir>/acked.<me>.<epoch>      one line "peer index" per message the peer confirmed (read)
//   <dir>/rejected.<me>.<epoch>   one line "peer index code" per confirmation that rejected
//   <dir>/delivered.<me>.<epoch>  one line "sender epoch index" per message the application took
// Messages carry (sender id, sender epoch, index). On stdin: "final <peer> <epoch>" tells which
// epoch of a peer is the last one; the node prints {"ev":"done"} once it has that epoch's end marker
// from every peer and all its own messages are confirmed or rejected, and exits after that when
// told "exit" (the soak says so once every node is done; "dump" prints what it still waits for).
// Senders pause at a third of their messages until "phase1" (or "go") and at two thirds until
// "phase2" (see below). "hold" stops reading until killed,
// "rebind" stops reading, then closes the receiving socket with its backlog unread and binds a
// new one 300 ms later; both print {"ev":"held","unread":n} once the backlog has waited longer
// than ackDelayMaxMs (acknowledged as queued, not read).
import { openSync, writeSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { LoopTransport, RdsSocket, RdsStack, TcpTransport, constants } from '../dist/index.js';

const [me, epoch, count, dir, nodesArg, dialArg, tcpPort] = process.argv.slice(2);
const id = Number(me),
  ep = Number(epoch),
  N = Number(count);
const nodes = nodesArg.split(',');
const dial = new Map(
  dialArg
    ? dialArg.split(',').map((x) => {
        const [pair, hp] = x.split('=');
        const [h, p] = hp.split(':');
        return [pair, { host: h, port: Number(p) }];
      })
    : [],
);
const self = nodes[id];
const peers = nodes.map((a, i) => ({ i, a })).filter((p) => p.i !== id);
const WINDOW = 256;
const ACK_DELAY_MS = 100;

const stack = new RdsStack({
  tcpPort: Number(tcpPort),
  reconnectMaxDelayMs: 100,
  heartbeatIntervalMs: 500,
  failoverGraceMs: 100,
  ackDelayMaxMs: ACK_DELAY_MS,
  transports: [
    new TcpTransport({ dial: (l, f, port) => dial.get(`${l}>${f}`) ?? { host: f, port } }),
    new LoopTransport(),
  ],
});
const sock = new RdsSocket({ stack });
await sock.bind({ address: self, port: 4001 });
sock.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 8 << 20);
async function receiver() {
  const r = new RdsSocket({ stack });
  await r.bind({ address: self, port: 4000 });
  r.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 8 << 20);
  return r;
}
let rsock = await receiver();
const ackedFd = openSync(`${dir}/acked.${id}.${ep}`, 'a');
const rejectedFd = openSync(`${dir}/rejected.${id}.${ep}`, 'a');
const delivFd = openSync(`${dir}/delivered.${id}.${ep}`, 'a');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** While set, the receive loop waits on it: nothing is read. */
let gate = null;
let openGate = () => {};
function holdReading() {
  gate = new Promise(
    (r) =>
      (openGate = () => {
        gate = null;
        r();
      }),
  );
}
/** Waits until unread messages sat longer than ackDelayMaxMs (so they were acknowledged as queued). */
async function backlogAged() {
  // Up to 20 s for the first unread message: on a loaded 2-core machine senders can take seconds.
  for (let i = 0; i < 1000 && rsock.receiveQueue().length === 0; i++) await sleep(20);
  await sleep(ACK_DELAY_MS * 3);
  console.log(JSON.stringify({ ev: 'held', unread: rsock.receiveQueue().length }));
}

/**
 * Senders stop at a third of their messages until "phase1" (or "go"), and at two thirds until
 * "phase2". The soak sends "phase1" once node 2 holds its reading and "phase2" once node 1 does
 * (after "go", after node 2's last incarnation started), so both have a backlog whatever the
 * machine's speed, and no end marker can be read by an incarnation that is about to die (a fast
 * sender used to finish before the kill: its marker went to the old life and the new one waited
 * for it forever).
 */
let phase1Reached = () => {},
  phase2Reached = () => {};
const phase1 = new Promise((r) => {
  phase1Reached = r;
});
const phase2 = new Promise((r) => {
  phase2Reached = r;
});
let sendPhase = 0;
let finished = false; // see check()
let exitAsked = false;
const finalEpoch = new Map(peers.map((p) => [p.i, 0]));
const ended = new Set();
let finalKnown = false;
// The soak speaks to a node only through stdin: when it is gone (killed, or its test timed out)
// the pipe closes, and a node left running would hold its address and port for the next run.
process.stdin.on('end', () => process.exit(3));
createInterface({ input: process.stdin }).on('line', (l) => {
  const [w, p, e] = l.split(' ');
  if (w === 'final') finalEpoch.set(Number(p), Number(e));
  if (w === 'go') {
    finalKnown = true;
    phase1Reached();
  }
  if (w === 'phase1') phase1Reached();
  if (w === 'phase2') phase2Reached();
  if (w === 'dump') dump();
  if (w === 'exit') exitAsked = true;
  if (w === 'hold') {
    holdReading();
    backlogAged();
  }
  if (w === 'rebind') {
    holdReading();
    (async () => {
      await backlogAged();
      await rsock.close();
      await sleep(300);
      rsock = await receiver();
      openGate();
    })();
  }
  check();
});

function size(i) {
  const r = (i * 2654435761) >>> 0;
  return r % 10 === 0 ? 16 + (r % 60000) : 16 + (r % 1500);
}
function msg(i, to) {
  const b = Buffer.alloc(size(i), (i + to) & 0xff);
  b.writeUInt8(id, 0);
  b.writeUInt32BE(ep, 1);
  b.writeUInt32BE(i, 5);
  b.writeUInt8(i === N ? 1 : 0, 9);
  return b;
}

const lastIdx = new Map();
const stats = { orderViolations: 0, violations: {} };
(async () => {
  for (;;) {
    if (gate) await gate;
    let m;
    try {
      m = await rsock.recv();
    } catch (e) {
      if (e.code === 'EBADF' && gate) continue; // closed by "rebind": the next socket is on its way
      if (e.code === 'EBADF') return; // closed at the end
      throw e;
    }
    const s = m.data.readUInt8(0),
      e = m.data.readUInt32BE(1),
      i = m.data.readUInt32BE(5),
      end = m.data.readUInt8(9);
    writeSync(delivFd, `${s} ${e} ${i}\n`);
    const k = `${s}.${e}`;
    const prev = lastIdx.get(k);
    // The end marker comes again after a rejection that said it may not have been read.
    const markerAgain = end === 1 && prev === i;
    if (prev !== undefined && i <= prev && !markerAgain) {
      stats.orderViolations++;
      stats.violations[k] = (stats.violations[k] ?? 0) + 1;
      if (stats.orderViolations <= 3) process.stderr.write(`node ${id}: from ${k} got ${i} after ${prev}\n`);
    }
    lastIdx.set(k, i);
    if (end) ended.add(k);
    check();
  }
})();

let sendingDone = false;
/** Logs the outcome; the end marker is sent again until it is read (its receiver waits for it). */
async function sendOne(i, p) {
  for (;;) {
    try {
      await sock.send(msg(i, p.i), { address: p.a, port: 4000 }, { confirm: true });
      writeSync(ackedFd, `${p.i} ${i}\n`);
      return;
    } catch (e) {
      if (!e.code || !['ECONNRESET', 'ECONNREFUSED'].includes(e.code)) throw e;
      writeSync(rejectedFd, `${p.i} ${i} ${e.code}\n`);
      if (i !== N) return;
      await sleep(50);
    }
  }
}

/** Per peer: messages still waiting for their confirmation (index -> attempts), for dump(). */
const pending = new Map(peers.map((p) => [p.i, new Map()]));
const progress = new Map(peers.map((p) => [p.i, { queued: 0, settled: 0 }]));
/** What this node still waits for, printed (stderr) when the soak's deadline passes. */
function dump() {
  const waiting = peers.map((p) => ({
    peer: p.i,
    queued: progress.get(p.i).queued,
    settled: progress.get(p.i).settled,
    unconfirmed: [...pending.get(p.i).keys()].slice(0, 10),
    unconfirmedCount: pending.get(p.i).size,
    endMarkerFrom: `${p.i}.${finalEpoch.get(p.i)}`,
    endMarkerSeen: ended.has(`${p.i}.${finalEpoch.get(p.i)}`),
  }));
  const conns = stack.connections().map((c) => ({
    peer: c.peerAddress,
    transport: c.transport,
    npaths: c.npaths,
    initiator: c.initiator,
    paths: c.paths.map((x) => ({
      i: x.index,
      state: x.state,
      tx: x.nextTxSeq,
      rx: x.nextRxSeq,
      sq: x.sendQueue,
      rq: x.retransQueue,
      up: x.upCount,
      failedOverTo: x.failedOverTo,
    })),
  }));
  process.stderr.write(
    `DUMP node ${id}.${ep} ${JSON.stringify({ sendingDone, finalKnown, sendPhase, gate: !!gate, unread: rsock.receiveQueue().length, waiting, conns, counters: stack.counters.snapshot() })}\n`,
  );
}

async function sendTo(p) {
  const inflight = new Set();
  for (let i = 0; i <= N; i++) {
    if (i === Math.floor(N / 3)) {
      sendPhase = 1;
      await phase1;
    }
    if (i === Math.floor((2 * N) / 3)) {
      sendPhase = 2;
      await phase2;
    }
    pending.get(p.i).set(i, true);
    progress.get(p.i).queued++;
    const pr = sendOne(i, p).finally(() => {
      inflight.delete(pr);
      pending.get(p.i).delete(i);
      progress.get(p.i).settled++;
    });
    inflight.add(pr);
    if (inflight.size >= WINDOW) await Promise.race(inflight);
  }
  await Promise.all(inflight);
}
await Promise.all(peers.map(sendTo));
sendingDone = true;
check();

/**
 * Done (every own message confirmed or rejected, every peer's end marker read): says so, but keeps
 * the stack running until the soak says "exit" (all nodes done). Leaving at once would take away
 * the read reports a peer still waits for: if this node's carrier was being reset at that moment,
 * the peer's confirmations of messages this node did read would never resolve (a receiver that
 * died for good), and the peer would wait for them forever.
 */
function check() {
  if (!finished) {
    if (!sendingDone || !finalKnown) return;
    for (const p of peers) if (!ended.has(`${p.i}.${finalEpoch.get(p.i)}`)) return;
    finished = true;
    console.log(JSON.stringify({ ev: 'done', node: id, epoch: ep }));
  }
  if (!exitAsked) return;
  console.log(JSON.stringify({ node: id, epoch: ep, ...stats, counters: stack.counters.snapshot() }));
  Promise.all([sock.close(), rsock.close()])
    .then(() => stack.close())
    .then(() => process.exit(0));
}
