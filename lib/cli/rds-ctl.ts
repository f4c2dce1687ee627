#!/usr/bin/env node
/**
 * rds-ctl: the operator's controls of an rds-socket node, through its control endpoint (the same
 * socket rds-info reads), as RTRS offers them per path in sysfs:
 *   rds-ctl [-p PID | --socket PATH] reconnect PEER PATH [LOCAL]
 *   rds-ctl [-p PID | --socket PATH] disconnect PEER PATH [LOCAL]
 *   rds-ctl [-p PID | --socket PATH] reset-stats
 * PATH is the index rds-info -R shows (lanes 0-7, rails from 8). Exit 0 done, 1 refused or no
 * node, 2 bad usage.
 */
import { HOW_TO_OPEN, controlDir, controlRequest, nodeSockets } from './control-client.js';
import { parseFlags } from './format.js';

const USAGE = `usage: rds-ctl [-p PID | --socket PATH] reconnect|disconnect PEER PATH [LOCAL]
       rds-ctl [-p PID | --socket PATH] reset-stats
  reconnect    drop path PATH to PEER and let it connect again (also ends a disconnect, or the
               ERROR state a path reaches after maxReconnectAttempts)
  disconnect   drop path PATH to PEER and keep it down until reconnect; its messages move to a
               live path after failoverGraceMs
  reset-stats  every counter and every path's figures back to zero
  PATH         the path index rds-info -R shows (lanes 0-7, rails 8 and up)
  LOCAL        our address, when connections to PEER leave from several`;

async function main(): Promise<number> {
  let parsed: ReturnType<typeof parseFlags>;
  try {
    parsed = parseFlags(process.argv.slice(2), { '-p': 'value', '--socket': 'value', '-h': 'flag', '--help': 'flag' });
  } catch (e) {
    console.error(`rds-ctl: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  const { opts, rest } = parsed;
  if (opts['-h'] || opts['--help']) {
    console.log(USAGE);
    return 0;
  }
  const [cmd, ...args] = rest;
  const ok =
    ((cmd === 'reconnect' || cmd === 'disconnect') && args.length >= 2 && args.length <= 3 && /^\d+$/.test(args[1]!)) ||
    (cmd === 'reset-stats' && args.length === 0);
  if (!ok) {
    console.error(`rds-ctl: ${cmd === undefined ? 'no command' : `bad arguments to ${cmd}`}\n${USAGE}`);
    return 2;
  }
  const paths = nodeSockets(
    typeof opts['--socket'] === 'string' ? opts['--socket'] : undefined,
    typeof opts['-p'] === 'string' ? opts['-p'] : undefined,
  );
  if (paths.length === 0) {
    console.error(`rds-ctl: no rds-socket node found in ${controlDir()}. ${HOW_TO_OPEN}`);
    return 1;
  }
  if (paths.length > 1) {
    console.error(`rds-ctl: several nodes answer (${paths.join(', ')}): choose one with -p PID or --socket PATH`);
    return 2;
  }
  let answer: { ok?: boolean; error?: string; code?: string };
  try {
    answer = await controlRequest(paths[0]!, [cmd, ...args].join(' '));
  } catch (e) {
    console.error(`rds-ctl: the node at ${paths[0]} did not answer (${(e as Error).message}). ${HOW_TO_OPEN}`);
    return 1;
  }
  if (answer.ok !== true) {
    const why = answer.error ?? 'no reason given';
    // RdsError messages already start with their code.
    const code = answer.code && !why.startsWith(`${answer.code}:`) ? ` (${answer.code})` : '';
    console.error(`rds-ctl: ${cmd} refused: ${why}${code}`);
    return 1;
  }
  return 0;
}

process.exitCode = await main();
