// TLS between nodes: mutual certificate authentication on every RDS/TCP connection. Each node has
// a key and a certificate signed by the cluster's CA and trusts only that CA; a node without such a
// certificate can neither deliver nor read a message (refused, counted in conn_refused_tls).
// Certificates are checked by chain, not host name (peers are IP addresses). Kernel peers cannot
// speak TLS. Here nodes a (127.60.8.2) and b (127.60.8.3) exchange a message, and a rogue node
// (127.60.8.1, plain TCP) is refused by b.
//   node examples/tls.mjs
// The example makes a throwaway CA and certificates with `openssl` in a temporary directory; in
// production give each node its own files. Needs `npm run build` first in a checkout.
// Prints what happened and "tls: ... OK".
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LoopTransport, RdsSocket, RdsStack, TcpTransport } from 'rds-socket';

const dir = mkdtempSync(join(tmpdir(), 'rds-example-tls-'));
const ssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
ssl('req', '-x509', ...ec, '-days', '1', '-subj', '/CN=example-ca', '-keyout', 'ca.key', '-out', 'ca.pem');
for (const name of ['a', 'b']) {
  ssl('req', ...ec, '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.csr`);
  ssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1', '-out', `${name}.pem`);
}
const tlsFor = (name) => ({
  key: readFileSync(join(dir, `${name}.key`)),
  cert: readFileSync(join(dir, `${name}.pem`)),
  ca: readFileSync(join(dir, 'ca.pem')),
});

// A node whose TCP transport speaks TLS; the loopback transport serves its own sockets.
const tlsNode = (name) => new RdsStack({ transports: [new TcpTransport({ tls: tlsFor(name) }), new LoopTransport()] });
const a = tlsNode('a');
const b = tlsNode('b');
const sa = new RdsSocket({ stack: a });
const sb = new RdsSocket({ stack: b });
await sa.bind({ address: '127.60.8.2', port: 4000 });
await sb.bind({ address: '127.60.8.3', port: 4000 });

sa.sendmsg(Buffer.from('hello over TLS'), sb.address());
const m = await sb.recv({ timeout: 10000 });
console.log(`b got "${m.data}" from ${m.address}:${m.port}`);
sb.sendmsg(Buffer.from('and back'), sa.address());
console.log(`a got "${(await sa.recv({ timeout: 10000 })).data}"`);

// A node without a certificate (plain RDS/TCP; its smaller address makes it the side that
// connects) is refused by b: nothing it sends arrives.
const rogue = new RdsStack();
const sr = new RdsSocket({ stack: rogue });
await sr.bind({ address: '127.60.8.1', port: 4000 });
sr.sendmsg(Buffer.from('let me in'), sb.address());
const deadline = Date.now() + 10000;
while (b.counters.get('conn_refused_tls') === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
const refused = b.counters.get('conn_refused_tls') > 0;
console.log(`rogue node: ${refused ? 'refused by b (conn_refused_tls)' : 'NOT refused'}; b's socket has ${sb.recvmsg() === null ? 'nothing' : 'A MESSAGE'} from it`);
console.log(`tls: ${refused ? 'OK' : 'FAILED'}`);

await Promise.all([a.close(), b.close(), rogue.close()]);
rmSync(dir, { recursive: true, force: true });
