// One soak node (see soak.mjs). Sends `count` messages to each peer with send({ confirm: true })
// through a window from one socket (port 4001), receives on another (port 4000) with for await,
// and logs synchronously, so a SIGKILL loses no record:
//   <dir>/acked.<me>.<epoch>      one line "peer index" per message the peer confirmed (read)
//   <dir>/rejected.<me>.<epoch>   one line "peer index code" per confirmation that rejected
//   <dir>/delivered.<me>.<epoch>  one line "sender epoch index" per message the application took
// Messages carry (sender id, sender epoch, index). On stdin: "final <peer> <epoch>" tells which
// epoch of a peer is the last one; the node exits once it has that epoch's end marker from every
// peer and all its own messages are confirmed or rejected. "hold" stops reading until killed,
// "rebind" stops reading, then closes the receiving socket with its backlog unread and binds a
// new one 300 ms later; both print {"ev":"held","unread":n} once the backlog has waited longer
// than ackDelayMaxMs (acknowledged as queued, not read).
import { openSync, writeSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { LoopTransport, RdsSocket, RdsStack, TcpTransport, constants } from '../dist/index.js';

const [me, epoch, count, dir, nodesArg, dialArg, tcpPort] = process.argv.slice(2);
const id = Number(me), ep = Number(epoch), N = Number(count);
const nodes = nodesArg.split(',');
const dial = new Map(dialArg ? dialArg.split(',').map((x) => { const [pair, hp] = x.split('='); const [h, p] = hp.split(':'); return [pair, { host: h, port: Number(p) }]; }) : []);
const self = nodes[id];
const peers = nodes.map((a, i) => ({ i, a })).filter((p) => p.i !== id);
const WINDOW = 256;
const ACK_DELAY_MS = 100;

const stack = new RdsStack({
  tcpPort: Number(tcpPort), reconnectMaxDelayMs: 100, heartbeatIntervalMs: 500, failoverGraceMs: 100, ackDelayMaxMs: ACK_DELAY_MS,
  transports: [new TcpTransport({ dial: (l, f, port) => dial.get(`${l}>${f}`) ?? { host: f, port } }), new LoopTransport()],
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
  gate = new Promise((r) => (openGate = () => { gate = null; r(); }));
}
/** Waits until unread messages sat longer than ackDelayMaxMs (so they were acknowledged as queued). */
async function backlogAged() {
  for (let i = 0; i < 100 && rsock.receiveQueue().length === 0; i++) await sleep(20);
  await sleep(ACK_DELAY_MS * 3);
  console.log(JSON.stringify({ ev: 'held', unread: rsock.receiveQueue().length }));
}

const finalEpoch = new Map(peers.map((p) => [p.i, 0]));
const ended = new Set();
let finalKnown = false;
createInterface({ input: process.stdin }).on('line', (l) => {
  const [w, p, e] = l.split(' ');
  if (w === 'final') finalEpoch.set(Number(p), Number(e));
  if (w === 'go') finalKnown = true;
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
  b.writeUInt8(id, 0); b.writeUInt32BE(ep, 1); b.writeUInt32BE(i, 5); b.writeUInt8(i === N ? 1 : 0, 9);
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
    const s = m.data.readUInt8(0), e = m.data.readUInt32BE(1), i = m.data.readUInt32BE(5), end = m.data.readUInt8(9);
    writeSync(delivFd, `${s} ${e} ${i}\n`);
    const k = `${s}.${e}`;
    const prev = lastIdx.get(k);
    if (prev !== undefined && i <= prev) {
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

async function sendTo(p) {
  const inflight = new Set();
  for (let i = 0; i <= N; i++) {
    const pr = sendOne(i, p)
      .finally(() => inflight.delete(pr));
    inflight.add(pr);
    if (inflight.size >= WINDOW) await Promise.race(inflight);
  }
  await Promise.all(inflight);
}
await Promise.all(peers.map(sendTo));
sendingDone = true;
check();

function check() {
  if (!sendingDone || !finalKnown) return;
  for (const p of peers) if (!ended.has(`${p.i}.${finalEpoch.get(p.i)}`)) return;
  console.log(JSON.stringify({ node: id, epoch: ep, ...stats, counters: stack.counters.snapshot() }));
  Promise.all([sock.close(), rsock.close()]).then(() => stack.close()).then(() => process.exit(0));
}
