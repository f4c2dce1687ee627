#!/usr/bin/env node
/**
 * rds-socketd: the host node. Owns the RDS/TCP listeners, connections, paths and retransmit
 * queues of this machine; application processes and threads attach to it through a Unix socket
 * (RdsStack.attach(), or `new RdsSocket()` finding it at the default path). Logs path and peer
 * state changes to stdout, each once (path-log.ts). SIGTERM / SIGINT stop it (attached sockets then see ENETDOWN).
 */
import { parseArgs } from 'node:util';
import { RdsSocket, RdsStack } from '../index.js';
import { defaultNodePath } from '../host/paths.js';
import { logPaths } from './path-log.js';

const USAGE = `usage: rds-socketd [options]
  --path PATH        control socket (default: $RDS_SOCKET_NODE, else $XDG_RUNTIME_DIR/rds-socket/node.sock,
                     /run/rds-socket/node.sock for root (or $RDS_SOCKET_SYSTEM_NODE), else
                     <tmpdir>/rds-socket-<uid>/node.sock); now: ${defaultNodePath()}
  --group GROUP      group (name or gid) that may attach: the socket is given it, mode 0660
  --mode MODE        control socket mode, octal (default 660)
  --address ADDR     listen for peers on ADDR from the start (repeatable; otherwise the RDS
                     listener of an address starts when the first socket binds it)
  --tcp-port PORT    RDS/TCP port (default 16385)
  --npaths N         paths per peer, 1, 2, 4 or 8 (default 8)
  --allow-peers LIST comma-separated addresses or CIDR blocks peers must come from
  --client-send-budget BYTES
                     the most one attached process may have the node hold for it: sent by all
                     its sockets and not yet acknowledged (default 268435456, 256 MiB); its
                     sockets answer EAGAIN past it
  --quiet            log only errors
  -h, --help         this text`;

async function main(): Promise<number> {
  const options = {
    path: { type: 'string' },
    group: { type: 'string' },
    mode: { type: 'string' },
    address: { type: 'string', multiple: true },
    'tcp-port': { type: 'string' },
    npaths: { type: 'string' },
    'allow-peers': { type: 'string' },
    'client-send-budget': { type: 'string' },
    quiet: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  } as const;
  let values: ReturnType<typeof parseArgs<{ options: typeof options; strict: true }>>['values'];
  try {
    ({ values } = parseArgs({ options, strict: true }));
  } catch (e) {
    console.error(`rds-socketd: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const log = values.quiet ? () => {} : (line: string) => console.log(`${new Date().toISOString()} ${line}`);
  const num = (v: string | undefined, what: string): number | undefined => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n)) throw new Error(`${what} takes an integer, got ${v}`);
    return n;
  };
  let stack: RdsStack;
  try {
    const tcpPort = num(values['tcp-port'], '--tcp-port');
    const npaths = num(values.npaths, '--npaths');
    stack = new RdsStack({
      ...(tcpPort !== undefined ? { tcpPort } : {}),
      ...(npaths !== undefined ? { npaths } : {}),
      ...(values['allow-peers'] !== undefined ? { allowPeers: values['allow-peers'].split(',') } : {}),
    });
    logPaths(stack, log);
    stack.on('error', (e) => console.error(`rds-socketd: ${e.message}`));
    const mode = values.mode !== undefined ? parseInt(values.mode, 8) : undefined;
    if (mode !== undefined && !(mode >= 0 && mode <= 0o777))
      throw new Error(`--mode takes an octal mode, got ${values.mode}`);
    const budget = num(values['client-send-budget'], '--client-send-budget');
    const node = await stack.serve({
      ...(values.path !== undefined ? { path: values.path } : {}),
      ...(budget !== undefined ? { maxClientSendBytes: budget } : {}),
      ...(values.group !== undefined ? { group: values.group } : {}),
      ...(mode !== undefined ? { mode } : {}),
      log,
    });
    for (const address of values.address ?? []) {
      // A socket of the node itself on an ephemeral port keeps the address's listener up.
      const s = new RdsSocket({ stack });
      await s.bind({ address, port: 0 });
      log(`listening for peers on ${address}`);
    }
    const stop = (sig: string): void => {
      log(`${sig}: stopping`);
      void stack.close().then(() => process.exit(0));
    };
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
    log(`ready: ${node.path}`);
    // The node's server does not hold the event loop (embedded nodes must not); the daemon must.
    setInterval(() => {}, 1 << 30);
  } catch (e) {
    console.error(`rds-socketd: ${(e as Error).message}`);
    return 1;
  }
  return -1;
}

main().then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (e) => {
    console.error(`rds-socketd: ${(e as Error).stack ?? e}`);
    process.exit(1);
  },
);
