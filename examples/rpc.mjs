// Request/reply with rds-socket/rpc: a key-value server on one node (127.60.4.1:7000) and a client
// on another (127.60.4.2:7001). Shows
//   - per-request timeouts: a request the handler takes too long for rejects with ETIMEDOUT;
//   - idempotent handlers: "set k v" gives the same state however often it runs, so a client may
//     retry a request that timed out (RDS and the server run each request id once; a retry is a
//     new request, and a server that restarted knows nothing of the old one);
//   - a handler that throws: the request rejects with RpcRemoteError (code EREMOTE).
//   node examples/rpc.mjs
// Needs `npm run build` first in a checkout. Prints one line per request, then "rpc: ... OK".
import { RdsSocket, RdsStack } from 'rds-socket';
import { RpcClient, serve } from 'rds-socket/rpc';

const SERVER = { address: '127.60.4.1', port: 7000 };
const CLIENT = { address: '127.60.4.2', port: 7001 };

// The server's node (in a real cluster, its own process on its own host).
const serverNode = new RdsStack();
const ss = new RdsSocket({ stack: serverNode });
await ss.bind(SERVER);
const store = new Map();
const server = serve(ss, async (data) => {
  const [op, key, value] = data.toString().split(' ');
  if (op === 'set') {
    if (key === 'slow') await new Promise((r) => setTimeout(r, 1000)); // longer than the client waits
    store.set(key, value); // idempotent: running it twice leaves the same state
    return 'ok';
  }
  if (op === 'get') return store.get(key) ?? '';
  throw new Error(`unknown operation ${op}`);
});

const clientNode = new RdsStack();
const cs = new RdsSocket({ stack: clientNode });
await cs.bind(CLIENT);
const client = new RpcClient(cs, { timeout: 20000, maxInFlight: 16 });
const ask = (text, opts) => client.request(SERVER, Buffer.from(text), opts);

console.log(`set a 1 -> ${await ask('set a 1')}`);
console.log(`set a 1 -> ${await ask('set a 1')} (again: same state)`);
console.log(`get a -> ${await ask('get a')}`);
try {
  await ask('set slow x', { timeout: 200 });
} catch (e) {
  console.log(`set slow x with a 200 ms timeout -> ${e.code}`);
}
// The timed-out request may still have run: retrying an idempotent one is safe.
console.log(`set slow x retried -> ${await ask('set slow x')}`);
try {
  await ask('drop everything');
} catch (e) {
  console.log(`drop everything -> ${e.code} (${e.message.includes('unknown operation') ? 'the handler threw' : e.message})`);
}
console.log(`rpc: store ${[...store].map(([k, v]) => `${k}=${v}`).join(' ')} OK`);

client.close();
await server.close();
await Promise.all([clientNode.close(), serverNode.close()]);
