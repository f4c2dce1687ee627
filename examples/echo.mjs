// Echo: one socket answers whoever writes to it; a client in another process sends three
// messages and checks the answers. Two processes, so two RDS nodes talking RDS/TCP on loopback.
//   node examples/echo.mjs            # forks the server, runs the client, prints the result
//   node examples/echo.mjs server     # only the server (127.60.1.1:4000), until Ctrl-C
//   node examples/echo.mjs client     # only the client (127.60.1.2:4000)
// Needs `npm run build` first in a checkout (it imports the package by name).
import { fork } from 'node:child_process';
import { RdsSocket } from 'rds-socket';

const SERVER = { address: '127.60.1.1', port: 4000 };
const CLIENT = { address: '127.60.1.2', port: 4000 };
const role = process.argv[2] ?? 'both';

async function server() {
  const sock = new RdsSocket();
  await sock.bind(SERVER);
  process.send?.('ready'); // tell the parent (when forked) that the port is bound
  // One socket serves every client: each message says where it came from.
  for await (const m of sock) sock.sendmsg(m.data, { address: m.address, port: m.port });
}

async function client() {
  const sock = new RdsSocket();
  await sock.bind(CLIENT);
  let matched = 0;
  for (let i = 1; i <= 3; i++) {
    const text = `hello ${i}`;
    sock.sendmsg(Buffer.from(text), SERVER);
    const reply = await sock.recv({ timeout: 10000 });
    console.log(`echo reply ${i}: ${reply.data} (from ${reply.address}:${reply.port})`);
    if (reply.data.toString() === text) matched++;
  }
  console.log(`echo: ${matched} of 3 replies matched`);
  await sock.close();
}

if (role === 'server') await server();
else if (role === 'client') await client();
else {
  const child = fork(new URL(import.meta.url).pathname, ['server']);
  await new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`the server exited (${code})`)));
  });
  try {
    await client();
  } finally {
    child.removeAllListeners('exit');
    child.kill();
  }
}
