// RDS RDMA between two rds-socket nodes over InfiniBand / RoCE (Soft-RoCE works): one node exposes
// a buffer, the other writes into it and reads it back with RDMA, no copy through messages.
//   node examples/rdma.mjs expose <address> <port>               # the node with the buffer
//   node examples/rdma.mjs use <address> <port> <peer> <peerPort> # the node that reads and writes
// Needs `npm run build` first (it imports the package by name), rdma-core and an RDMA device owning
// both addresses (rdma link add rxe0 type rxe netdev eth0). Both print what happened and exit 0.
import { RdsSocket, RdsStack, constants } from 'rds-socket';

const [role, address, port, peer, peerPort] = process.argv.slice(2);
const stack = new RdsStack();
const sock = new RdsSocket({ stack, transport: 'ib' });
await sock.bind({ address, port: Number(port) });

if (role === 'expose') {
  console.log(`exposing on ${address}:${port}`);
  const mem = Buffer.alloc(4096);
  mem.write('hello from the exposing node', 2048);
  // Wait for the peer, then send it the region's cookie on a message (RDS_CMSG_RDMA_DEST).
  const hello = await sock.recv();
  const cookie = sock.getMr(mem, { flags: constants.RDS_RDMA_READWRITE });
  sock.sendmsg(Buffer.from('here is my buffer'), { address: hello.address, port: hello.port }, { rdmaDest: cookie });
  // The peer's messages follow its ops; after the one that came with its WRITE, the bytes are in `mem`.
  let done;
  do done = await sock.recv();
  while (!done.data.toString().startsWith('wrote'));
  console.log(`peer says "${done.data}"; my buffer now starts with "${mem.toString('utf8', 0, 26)}"`);
  sock.freeMr(cookie);
} else if (role === 'use') {
  const to = { address: peer, port: Number(peerPort) };
  sock.sendmsg(Buffer.from('hello'), to);
  const offer = await sock.recv();
  const cookie = offer.rdmaDest; // the peer's region: (offset << 32) + rkey
  // RDMA READ of the peer's bytes at offset 2048, then an RDMA WRITE at offset 0. Each op goes on
  // the wire before its message; `notify` asks for its status through recv().
  const got = Buffer.alloc(28);
  sock.sendmsg(Buffer.from('read'), to, { rdma: { cookie, remoteOffset: 2048, local: [got], write: false, notify: true, token: 1n } });
  const r = await sock.recv();
  console.log(`READ status ${r.rdmaStatus.status} (0 = RDS_RDMA_SUCCESS): "${got}"`);
  const msg = Buffer.from('written by the remote node');
  sock.sendmsg(Buffer.from('wrote 26 bytes at 0'), to, { rdma: { cookie, local: [msg], write: true, notify: true, token: 2n } });
  const w = await sock.recv();
  console.log(`WRITE status ${w.rdmaStatus.status}`);
  await sock.flush();
} else {
  console.error('usage: rdma.mjs expose <address> <port> | use <address> <port> <peer> <peerPort>');
  process.exitCode = 2;
}
await sock.close();
await stack.close();
