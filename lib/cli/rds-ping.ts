#!/usr/bin/env node
/**
 * rds-ping: as rds-tools' rds-ping. Sends a zero-length message to port 0 of a node every
 * interval from one of 8 sockets (round robin) and prints each pong's round trip. Works against
 * rds-socket nodes and kernel RDS nodes.
 *   rds-ping [-c count] [-i interval] [-I source] [-Q tos] [--tcp-port P] destination
 * -Q sets each socket's TOS (SIOCRDSSETTOS) after bind, as rds-tools does; over TCP the kernel
 * and rds-socket map every TOS to 0, so the pings travel as without it.
 * Exit status 0 if at least one reply arrived.
 */
import { createSocket } from 'node:dgram';
import { RdsSocket, RdsStack, RdsError, constants } from '../index.js';
import { parseFlags } from './format.js';

const USAGE = 'usage: rds-ping [-c count] [-i interval] [-I source] [-Q tos] [--tcp-port P] destination';

/** -i accepts seconds (fractional) or a number with an ms / usec suffix. */
export function parseInterval(s: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|usec|us|s)?$/.exec(s.trim());
  if (!m) throw new Error(`bad interval "${s}"`);
  const v = Number(m[1]);
  const unit = m[2] ?? 's';
  const ms = unit === 's' ? v * 1000 : unit === 'ms' ? v : v / 1000;
  if (!(ms > 0)) throw new Error('the interval must be positive');
  return ms;
}

/** The address a UDP socket connected to `dest` would send from, as rds-ping picks its source. */
function sourceFor(dest: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const u = createSocket(dest.includes(':') ? 'udp6' : 'udp4');
    u.on('error', reject);
    u.connect(9, dest, () => {
      const a = u.address().address;
      u.close();
      resolve(a);
    });
  });
}

async function main(): Promise<number> {
  let parsed: ReturnType<typeof parseFlags>;
  try {
    parsed = parseFlags(process.argv.slice(2), {
      '-c': 'value',
      '-i': 'value',
      '-I': 'value',
      '-Q': 'value',
      '--tcp-port': 'value',
      '-h': 'flag',
      '--help': 'flag',
    });
  } catch (e) {
    console.error(`rds-ping: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  const { opts, rest } = parsed;
  if (opts['-h'] || opts['--help'] || rest.length !== 1) {
    console.error(USAGE);
    return opts['-h'] || opts['--help'] ? 0 : 2;
  }
  const dest = rest[0]!;
  let count = Infinity;
  let interval = 1000;
  let tos = 0;
  try {
    if (typeof opts['-Q'] === 'string') {
      tos = Number(opts['-Q']);
      if (!/^\d+$/.test(opts['-Q']) || tos > 255) throw new Error(`bad TOS "${opts['-Q']}" (0 to 255)`);
    }
    if (typeof opts['-c'] === 'string') {
      count = Number(opts['-c']);
      if (!Number.isInteger(count) || count < 1) throw new Error(`bad count "${opts['-c']}"`);
    }
    if (typeof opts['-i'] === 'string') interval = parseInterval(opts['-i']);
  } catch (e) {
    console.error(`rds-ping: ${(e as Error).message}`);
    return 2;
  }
  const given = typeof opts['-I'] === 'string' ? opts['-I'] : null;
  let source = given ?? (await sourceFor(dest));
  const tcpPort = typeof opts['--tcp-port'] === 'string' ? Number(opts['--tcp-port']) : constants.RDS_TCP_PORT;
  let bound = await bindSockets(source, tcpPort, tos);
  if (bound instanceof RdsError && bound.code === 'EADDRINUSE' && given === null && isLoopback(source)) {
    // The usual case: `rds-ping 127.0.0.1` on a host whose RDS node holds 127.0.0.1 (its TCP port
    // is taken there). Any other loopback address reaches it: ping from the first free one.
    for (const alt of loopbackCandidates(source, dest)) {
      const b = await bindSockets(alt, tcpPort, tos);
      if (!(b instanceof Error)) {
        console.error(
          `rds-ping: ${source} is held by an RDS node on this host; pinging from ${alt} (choose the source with -I)`,
        );
        source = alt;
        bound = b;
        break;
      }
    }
  }
  if (bound instanceof Error) {
    const held = bound instanceof RdsError && bound.code === 'EADDRINUSE';
    console.error(
      held
        ? `rds-ping: cannot use ${source} as the source: an RDS node on this host holds it (TCP port ${tcpPort} is taken there); give another local address with -I source`
        : bound instanceof RdsError && bound.message.includes('SIOCRDSSETTOS')
          ? `rds-ping: failed to set TOS ${tos}: ${bound.message}`
          : `rds-ping: cannot bind to ${source}: ${bound.message}`,
    );
    return 1;
  }
  const { stack, socks } = bound;

  // One outstanding ping per socket, as rds-ping: its sequence number and send time.
  const pending = new Map<RdsSocket, { seq: number; at: bigint; replied: boolean }>();
  let replies = 0;
  let sent = 0;
  let stop = false;
  const onSigint = (): void => {
    stop = true;
  };
  process.once('SIGINT', onSigint);
  for (const s of socks) {
    s.on('readable', () => {
      for (let m = s.recvmsg(); m !== null; m = s.recvmsg()) {
        const p = pending.get(s);
        if (p === undefined) continue;
        const usec = Number((process.hrtime.bigint() - p.at) / 1000n);
        const from = m.address !== dest ? ` (${m.address})` : '';
        console.log(` ${String(p.seq).padStart(3)}: ${usec} usec${from}${p.replied ? ' DUP!' : ''}`);
        if (!p.replied) replies++;
        p.replied = true;
      }
    });
  }
  let rr = 0;
  while (!stop && sent < count) {
    // The next idle socket (none waiting for a reply), round robin.
    let s: RdsSocket | undefined;
    for (let k = 0; k < socks.length; k++) {
      const c = socks[(rr + k) % socks.length]!;
      const p = pending.get(c);
      if (p === undefined || p.replied) {
        s = c;
        rr = (rr + k + 1) % socks.length;
        break;
      }
    }
    if (s !== undefined) {
      const seq = ++sent;
      try {
        pending.set(s, { seq, at: process.hrtime.bigint(), replied: false });
        s.sendmsg(Buffer.alloc(0), { address: dest, port: 0 });
      } catch (e) {
        const why = e instanceof RdsError ? e.message : String(e);
        console.log(` ${String(seq).padStart(3)}: ERROR: ${why}`);
      }
    }
    if (sent < count) await new Promise((r) => setTimeout(r, interval));
  }
  // Wait for the last replies (at most one interval, at least a second).
  const deadline = Date.now() + Math.max(1000, interval);
  while (!stop && [...pending.values()].some((p) => !p.replied) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 10));
  }
  process.removeListener('SIGINT', onSigint);
  await stack.close();
  // A summary, so an unreachable destination does not end in silence (stderr: stdout keeps
  // rds-tools' lines exactly).
  const lost = sent === 0 ? 0 : Math.round(((sent - Math.min(replies, sent)) / sent) * 100);
  console.error(
    `--- ${dest} rds-ping from ${source}: ${sent} sent, ${replies} answered, ${lost}% lost${replies === 0 && sent > 0 ? ' (no RDS node answered: unreachable, down, or pings disabled)' : ''} ---`,
  );
  return replies > 0 ? 0 : 1;
}

/** Eight sockets bound to `source` in a stack of their own, or why not. */
async function bindSockets(
  source: string,
  tcpPort: number,
  tos: number,
): Promise<{ stack: RdsStack; socks: RdsSocket[] } | Error> {
  const stack = new RdsStack({ tcpPort });
  const socks: RdsSocket[] = [];
  try {
    for (let i = 0; i < 8; i++) {
      const s = new RdsSocket({ stack });
      await s.bind({ address: source, port: 0 });
      socks.push(s);
      if (tos !== 0) s.ioctl(constants.SIOCRDSSETTOS, tos);
    }
    return { stack, socks };
  } catch (e) {
    await stack.close();
    return e as Error;
  }
}

function isLoopback(a: string): boolean {
  return a.startsWith('127.');
}

/** Other loopback sources to try: the next 32 addresses of the source's /24 (127.0.0.2, 127.0.0.3, ... for 127.0.0.1). */
function loopbackCandidates(source: string, dest: string): string[] {
  const parts = source.split('.').map(Number);
  const out: string[] = [];
  for (let k = 1; k <= 32; k++) {
    const last = ((parts[3]! + k - 1) % 254) + 1; // 1..254
    out.push(`${parts[0]}.${parts[1]}.${parts[2]}.${last}`);
  }
  return out.filter((a) => a !== source && a !== dest);
}

process.exitCode = await main();
