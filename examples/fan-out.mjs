// Fan-out to many nodes: one publisher socket sends every update to each subscriber node; no
// connection per subscriber to manage, RDS keeps one per pair of nodes. Here the four subscriber
// nodes are stacks of this one process (127.60.5.1 to .4), as four hosts would be.
// `send()` waits whenever a subscriber's port is congested, so a slow subscriber slows only the
// sends to itself; each subscriber checks that it got every update once and in order.
//   node examples/fan-out.mjs
// Needs `npm run build` first in a checkout. Prints one line per subscriber and "fan-out: ... OK".
import { RdsSocket, RdsStack } from 'rds-socket';

const UPDATES = 200;
const stacks = [];
const subscribers = [];
for (let i = 1; i <= 4; i++) {
  const stack = new RdsStack(); // a node of its own
  const sock = new RdsSocket({ stack });
  await sock.bind({ address: `127.60.5.${i}`, port: 5000 });
  stacks.push(stack);
  subscribers.push(sock);
}
const pubNode = new RdsStack();
const pub = new RdsSocket({ stack: pubNode });
await pub.bind({ address: '127.60.5.10', port: 5000 });

// Each subscriber reads UPDATES messages and checks their order.
const received = subscribers.map(async (sock) => {
  let expect = 0;
  for await (const m of sock) {
    if (m.data.readUInt32BE(0) !== expect) throw new Error(`${sock.address().address}: got ${m.data.readUInt32BE(0)}, expected ${expect}`);
    if (++expect === UPDATES) break;
  }
  return `${sock.address().address} got ${expect} updates in order`;
});

for (let n = 0; n < UPDATES; n++) {
  const update = Buffer.alloc(256);
  update.writeUInt32BE(n, 0);
  // The same update to every subscriber; send() waits for room, sendmsg() would throw instead.
  await Promise.all(subscribers.map((s) => pub.send(update, s.address())));
}
for (const line of await Promise.all(received)) console.log(line);
console.log(`fan-out: ${subscribers.length} nodes x ${UPDATES} updates, each once and in order OK`);
await Promise.all([pubNode, ...stacks].map((s) => s.close()));
