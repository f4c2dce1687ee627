#!/usr/bin/env node
/**
 * A 3-node RDS cluster on 127.0.0.1-3, one process per node. Each node binds one socket, sends to
 * both others through it, receives with `for await`, checks that every message arrived exactly
 * once, intact and in order, and exits. Run without arguments it starts the three nodes.
 *
 *   node dist/demo/cluster.js [--messages N] [--max-size BYTES] [--quiet] [--tcp-port P]
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { RdsSocket, RdsStack, constants } from '../index.js';

interface Args {
  node: number | null;
  messages: number;
  maxSize: number;
  quiet: boolean;
  tcpPort: number;
  nodes: string[];
  port: number;
}

function parseArgs(argv: string[]): Args {
  const a: Args = {
    node: null,
    messages: 5,
    maxSize: 64 * 1024,
    quiet: false,
    tcpPort: constants.RDS_TCP_PORT,
    nodes: ['127.0.0.1', '127.0.0.2', '127.0.0.3'],
    port: 4000,
  };
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i + 1];
    switch (argv[i]) {
      case '--node':
        a.node = Number(v);
        i++;
        break;
      case '--messages':
        a.messages = Number(v);
        i++;
        break;
      case '--max-size':
        a.maxSize = Number(v);
        i++;
        break;
      case '--tcp-port':
        a.tcpPort = Number(v);
        i++;
        break;
      case '--nodes':
        a.nodes = String(v).split(',');
        i++;
        break;
      case '--port':
        a.port = Number(v);
        i++;
        break;
      case '--quiet':
        a.quiet = true;
        break;
      default:
        throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  return a;
}

/** A small seeded PRNG so every node can predict what every other node sends it. */
function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Sizes of the stream from node `from` to node `to`: log-uniform 0..maxSize, with both ends included. */
export function streamSizes(from: number, to: number, n: number, maxSize: number): number[] {
  const rnd = prng(from * 1000 + to + 1);
  const bits = Math.log2(maxSize + 1);
  return Array.from({ length: n }, (_, i) => {
    if (i === 0) return 0;
    if (i === n - 1 || i % 997 === 0) return maxSize;
    return Math.min(maxSize, Math.floor(2 ** (rnd() * bits)) - 1);
  });
}

/** Content of message i of a stream: a 64-byte pattern that depends on sender, receiver and i. */
export function streamPayload(from: number, to: number, i: number, size: number): Buffer {
  const pat = Buffer.allocUnsafe(64);
  for (let k = 0; k < 64; k++) pat[k] = (from * 73 + to * 37 + i * 131 + k * 7) & 0xff;
  pat.writeUInt32BE(i >>> 0, 0);
  return size === 0 ? Buffer.alloc(0) : Buffer.alloc(size, pat);
}

async function runNode(args: Args): Promise<void> {
  const me = args.node!;
  const self = args.nodes[me]!;
  const peers = args.nodes.map((address, id) => ({ id, address })).filter((p) => p.id !== me);
  const stack = new RdsStack({ tcpPort: args.tcpPort });
  const sock = new RdsSocket({ stack });
  await sock.bind({ address: self, port: args.port });
  // Large messages need a large send budget, as on Linux; a roomy receive budget avoids
  // congestion round trips while the receiver catches up.
  sock.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, Math.max(4 << 20, args.maxSize * 4));
  sock.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 16 << 20);
  const say = (s: string): void => console.log(`[${self}] ${s}`);
  say(
    `bound ${self}:${args.port}, sending ${args.messages} messages to each of ${peers.map((p) => p.address).join(', ')}`,
  );

  const expected = new Map(
    peers.map((p) => [
      p.address,
      { id: p.id, next: 0, bytes: 0, sizes: streamSizes(p.id, me, args.messages, args.maxSize) },
    ]),
  );
  const receiving = (async () => {
    let remaining = peers.length * args.messages;
    if (remaining === 0) return;
    for await (const msg of sock) {
      const e = expected.get(msg.address);
      if (e === undefined || msg.port !== args.port)
        throw new Error(`unexpected message from ${msg.address}:${msg.port}`);
      if (e.next >= args.messages) throw new Error(`extra message from ${msg.address}`);
      const want = streamPayload(e.id, me, e.next, e.sizes[e.next]!);
      if (!msg.data.equals(want)) {
        throw new Error(
          `message ${e.next} from ${msg.address} is wrong: ${msg.data.length} bytes, expected ${want.length}`,
        );
      }
      if (!args.quiet) say(`got #${e.next} from ${msg.address}:${msg.port} (${msg.data.length} bytes)`);
      e.next++;
      e.bytes += msg.data.length;
      if (--remaining === 0) return;
    }
    throw new Error('socket closed before every message arrived');
  })();

  const sizes = new Map(peers.map((p) => [p.address, streamSizes(me, p.id, args.messages, args.maxSize)]));
  for (let i = 0; i < args.messages; i++) {
    for (const p of peers) {
      await sock.send(streamPayload(me, p.id, i, sizes.get(p.address)![i]!), { address: p.address, port: args.port });
    }
  }
  await receiving;
  await sock.flush();
  for (const [addr, e] of expected)
    say(`received ${e.next}/${args.messages} messages (${e.bytes} bytes) from ${addr}, all in order and intact`);
  await sock.close();
  await stack.close();
}

async function runCluster(args: Args): Promise<void> {
  const script = fileURLToPath(import.meta.url);
  const extra = process.argv.slice(2);
  const kids = args.nodes.map((_, i) =>
    spawn(process.execPath, [script, ...extra, '--node', String(i)], { stdio: 'inherit' }),
  );
  const codes = await Promise.all(
    kids.map((k) => new Promise<number>((res) => k.on('exit', (c, sig) => res(c ?? (sig ? 1 : 0))))),
  );
  if (codes.some((c) => c !== 0)) {
    console.error(`cluster demo failed: exit codes ${codes.join(', ')}`);
    process.exitCode = 1;
  } else {
    console.log('cluster demo: every node received every message exactly once, in order');
  }
}

const args = parseArgs(process.argv.slice(2));
if (args.node === null) {
  await runCluster(args);
} else {
  const watchdog = setTimeout(() => {
    console.error(`[node ${args.node}] timed out`);
    process.exit(2);
  }, 600_000);
  watchdog.unref();
  try {
    await runNode(args);
  } catch (e) {
    console.error(`[node ${args.node}] ${(e as Error).stack ?? e}`);
    process.exit(1);
  }
}
