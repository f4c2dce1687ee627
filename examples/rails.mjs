// Rails: a second link to the same peer. Node A (RDS address 127.60.9.1) and node B (127.60.9.2)
// declare a rail over another address pair, 127.60.10.1 <-> 127.60.10.2 (on real hosts: a second
// NIC and network). The rail is path 8 of the connection, with its own TCP connection; sockets
// still send to the peer's RDS address. When the primary link's path goes down (here held down
// as an operator would with `rds-ctl disconnect`), its messages move to the rail after
// failoverGraceMs, without loss, duplicates or reordering. Between rds-socket nodes only.
//   node examples/rails.mjs
// Needs `npm run build` first in a checkout. Prints the paths and "rails: ... OK".
import { RdsSocket, RdsStack } from 'rds-socket';

const A = '127.60.9.1';
const B = '127.60.9.2';
const common = { npaths: 1, failoverGraceMs: 200 };
const a = new RdsStack({ ...common, rails: [{ peer: B, local: '127.60.10.1', remote: '127.60.10.2' }] });
const b = new RdsStack({ ...common, rails: [{ peer: A, local: '127.60.10.2', remote: '127.60.10.1' }] });
const sa = new RdsSocket({ stack: a });
const sb = new RdsSocket({ stack: b });
await sa.bind({ address: A, port: 4000 });
await sb.bind({ address: B, port: 4000 });

const path = (index) => a.connections().find((c) => c.peerAddress === B && c.transport === 'tcp')?.paths.find((p) => p.index === index);
const until = async (what, ok) => {
  for (const end = Date.now() + 15000; !ok(); await new Promise((r) => setTimeout(r, 20)))
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
};

// The first message brings up the primary link; the rail follows the handshake.
sa.sendmsg(Buffer.from('hello'), sb.address());
await sb.recv({ timeout: 10000 });
await until('the rail', () => path(8)?.state === 'UP');
const rail = path(8);
console.log(`path 0: ${path(0).source} -> ${path(0).destination} ${path(0).state}`);
console.log(`path 8 (rail): ${rail.source} -> ${rail.destination} ${rail.state}`);

// The primary link's path goes down and stays down; the messages keep coming.
a.disconnectPath(B, 0);
console.log(`path 0 held down: ${path(0).held ? 'yes' : 'no'}`);
const N = 100;
for (let i = 0; i < N; i++) sa.sendmsg(Buffer.from(String(i)), sb.address());
let inOrder = 0;
for (let i = 0; i < N; i++) if (Number((await sb.recv({ timeout: 15000 })).data.toString()) === i) inOrder++;
console.log(`${inOrder} of ${N} messages arrived in order over the rail`);
a.reconnectPath(B, 0);
await until('path 0 back', () => path(0).state === 'UP');
console.log(`path 0 back: ${path(0).state}`);
console.log(`rails: ${inOrder === N ? 'OK' : 'FAILED'}`);
await Promise.all([a.close(), b.close()]);
