// An rds-socket node in its own process for the IB tests: binds an IB socket and echoes every
// message back to its sender until it has echoed `count`, then exits (or never, with count 0).
//   node test/ib/peer.mjs <address> <port> <count> [exit]
// With `exit` it leaves by process.exit() without closing anything (the addon's exit hook cleans up).
import { RdsSocket, RdsStack, constants } from '../../dist/index.js';

const [address, port, count] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4] ?? 0)];
const stack = new RdsStack();
const sock = new RdsSocket({ stack, transport: 'ib' });
await sock.bind({ address, port });
sock.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 8 << 20); // room for echoes of large messages
process.stdout.write('ready\n');
let n = 0;
for await (const m of sock) {
  await sock.send(m.data, { address: m.address, port: m.port });
  if (++n === count) break;
}
await sock.flush({ timeout: 60000 });
if (process.argv[5] === 'exit') {
  process.stdout.write(`echoed ${n}\n`);
  process.exit(0);
}
await stack.close();
process.stdout.write(`echoed ${n}\n`);
