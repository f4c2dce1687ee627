#!/usr/bin/env node
/**
 * rds-info for rds-socket nodes: reads a node's control endpoint (a stack opened with
 * { control: true }) and prints what rds-tools' rds-info prints for the kernel, plus -R: every
 * path (lanes and rails) with its addresses and figures.
 *   rds-info [-c] [-k] [-n] [-r] [-s] [-t] [-T] [-I] [-R] [-v] [--json] [-p PID | --socket PATH]
 * -v (verbose) adds to each InfiniBand connection (-I) what rds-tools' rds-info -v adds: the
 * queue pair's ring sizes and the kernel's MR pool and cache figures (0 here: none exist).
 */
import { HOW_TO_OPEN, controlDir, controlRequest, nodeSockets } from './control-client.js';
import { l, parseFlags, r } from './format.js';

interface Msg {
  localAddress: string;
  localPort: number;
  peerAddress: string;
  peerPort: number;
  seq: number;
  bytes: number;
}
interface Info {
  pid: number;
  counters: Record<string, number>;
  sockets: {
    boundAddress: string;
    boundPort: number;
    connectedAddress: string;
    connectedPort: number;
    sndbuf: number;
    rcvbuf: number;
    inode: number;
  }[];
  connections: {
    localAddress: string;
    peerAddress: string;
    transport: string;
    tos?: number;
    npaths: number;
    paths: {
      index: number;
      state: string;
      nextTxSeq: number;
      nextRxSeq: number;
      sendQueue: number;
      retransQueue: number;
      transport: Record<string, number> | null;
      // Since rails (issue #25); absent from older nodes.
      rail?: boolean;
      source?: string;
      destination?: string;
      inFlightMessages?: number;
      upCount?: number;
      connectFailures?: number;
      sentMessages?: number;
      sentBytes?: number;
      recvMessages?: number;
      movedByFailover?: number;
      held?: boolean;
    }[];
  }[];
  sendQueue: Msg[];
  retransQueue: Msg[];
  recvQueue: Msg[];
}

const USAGE = 'usage: rds-info [-c] [-k] [-n] [-r] [-s] [-t] [-T] [-I] [-R] [-v] [--json] [-p PID | --socket PATH]';

const FLAGS: Record<string, string> = {
  UP: 'C',
  CONNECTING: 'c',
  DOWN: '-',
  ERROR: 'E',
  DISCONNECTING: 'd',
  RESETTING: 'r',
};

/** rds-info -v's tail of an IB connection line, as rds-tools prints it (fields this node lacks are 0). */
function ibVerbose(t: Record<string, number> | null | undefined): string {
  const n = (k: string): number => (typeof t?.[k] === 'number' ? t[k] : 0);
  return `  send_wr=${n('maxSendWr')}, recv_wr=${n('maxRecvWr')}, send_sge=${n('maxSendSge')}, rdma_mr_max=0, rdma_mr_size=0, cache_allocs=0`;
}

function print(info: Info, want: Set<string>, verbose: boolean): void {
  const all = want.size === 0;
  const out: string[] = [];
  if (all || want.has('-c')) {
    out.push('\nCounters:', `${r('CounterName', 25)} ${r('Value', 16)}`);
    for (const [k, v] of Object.entries(info.counters)) out.push(`${r(k, 25)} ${r(v, 16)}`);
  }
  if (all || want.has('-k')) {
    // A host node's sockets belong to the processes attached to it: it names each one's pid and
    // uid, and whether the kernel vouches for them (SO_PEERCRED: 'peer') or only the client does.
    const pids = info.sockets.some((s) => (s as { pid?: number }).pid !== undefined);
    out.push(
      '\nRDS Sockets:',
      `${r('BoundAddr', 15)} ${r('BPort', 5)} ${r('ConnAddr', 15)} ${r('CPort', 5)} ${r('SndBuf', 10)} ${r('RcvBuf', 10)} ${r('Inode', 8)}${pids ? ` ${r('Pid', 8)} ${r('Uid', 6)} ${r('Cred', 7)}` : ''}`,
    );
    for (const s of info.sockets) {
      const o = s as { pid?: number; uid?: number; cred?: string };
      const pid = pids
        ? ` ${r(o.pid ?? '', 8)} ${r(o.uid === undefined || o.uid < 0 ? '-' : o.uid, 6)} ${r(o.cred ?? '', 7)}`
        : '';
      out.push(
        `${r(s.boundAddress, 15)} ${r(s.boundPort, 5)} ${r(s.connectedAddress, 15)} ${r(s.connectedPort, 5)} ${r(s.sndbuf, 10)} ${r(s.rcvbuf, 10)} ${r(s.inode, 8)}${pid}`,
      );
    }
  }
  if (all || want.has('-n')) {
    out.push(
      '\nRDS Connections:',
      `${r('LocalAddr', 15)} ${r('RemoteAddr', 15)} ${r('Tos', 4)} ${r('NextTX', 16)} ${r('NextRX', 16)} ${r('Flgs', 4)} ${l('Path', 4)} ${l('State', 13)} ${r('SendQ', 6)} ${r('RetrQ', 6)}`,
    );
    for (const c of info.connections) {
      for (const p of c.paths) {
        const flags = `${p.sendQueue > 0 ? 's' : '-'}${FLAGS[p.state] ?? '?'}`;
        out.push(
          `${r(c.localAddress, 15)} ${r(c.peerAddress, 15)} ${r(c.tos ?? 0, 4)} ${r(p.nextTxSeq, 16)} ${r(p.nextRxSeq, 16)} ${r(flags, 4)} ${l(p.index, 4)} ${l(p.state, 13)} ${r(p.sendQueue, 6)} ${r(p.retransQueue, 6)}`,
        );
      }
    }
  }
  const msgs = (title: string, list: Msg[]): void => {
    out.push(
      `\n${title}:`,
      `${r('LocalAddr', 15)} ${r('LPort', 5)} ${r('RemoteAddr', 15)} ${r('RPort', 5)} ${r('Tos', 4)} ${r('Seq', 16)} ${r('Bytes', 10)}`,
    );
    for (const m of list)
      out.push(
        `${r(m.localAddress, 15)} ${r(m.localPort, 5)} ${r(m.peerAddress, 15)} ${r(m.peerPort, 5)} ${r(0, 4)} ${r(m.seq, 16)} ${r(m.bytes, 10)}`,
      );
  };
  if (all || want.has('-r')) msgs('Receive Message Queue', info.recvQueue);
  if (all || want.has('-s')) msgs('Send Message Queue', info.sendQueue);
  if (all || want.has('-t')) msgs('Retransmit Message Queue', info.retransQueue);
  if (all || want.has('-T')) {
    out.push(
      '\nTCP Connections:',
      `${r('LocalAddr', 15)} ${r('LPort', 5)} ${r('RemoteAddr', 15)} ${r('RPort', 5)} ${r('HdrRemain', 10)} ${r('DataRemain', 10)} ${r('SentNxt', 10)} ${r('ExpectUna', 10)} ${r('SeenUna', 10)}`,
    );
    for (const c of info.connections) {
      if (c.transport !== 'tcp') continue;
      for (const p of c.paths) {
        const t = p.transport;
        if (!t) continue;
        out.push(
          `${r(c.localAddress, 15)} ${r(t.localPort, 5)} ${r(c.peerAddress, 15)} ${r(t.peerPort, 5)} ${r(t.hdrRemaining, 10)} ${r(t.dataRemaining, 10)} ${r(t.bytesWritten, 10)} ${r(t.bytesWritten, 10)} ${r(t.bytesWritten - (t.writeQueued ?? 0), 10)}`,
        );
      }
    }
  }
  if (all || want.has('-R')) {
    // rds-socket's own: every path of every connection, lanes (0..7, the connection's addresses)
    // and rails (8 and up, their own address pairs), with RTRS-style figures.
    out.push(
      '\nRDS Paths and Rails:',
      `${r('LocalAddr', 15)} ${r('RemoteAddr', 15)} ${l('Path', 4)} ${l('Kind', 4)} ${r('Source', 15)} ${r('Destination', 15)} ${l('State', 13)} ${r('Ups', 5)} ${r('Fails', 5)} ${r('SentMsgs', 10)} ${r('SentBytes', 12)} ${r('RecvMsgs', 10)} ${r('InFlight', 8)} ${r('Moved', 8)}`,
    );
    for (const c of info.connections) {
      if (c.transport === 'loopback') continue;
      for (const p of c.paths) {
        const state = p.held ? `${p.state}(held)` : p.state;
        out.push(
          `${r(c.localAddress, 15)} ${r(c.peerAddress, 15)} ${l(p.index, 4)} ${l(p.rail ? 'rail' : 'lane', 4)} ${r(p.source ?? c.localAddress, 15)} ${r(p.destination ?? c.peerAddress, 15)} ${l(state, 13)} ${r(p.upCount ?? 0, 5)} ${r(p.connectFailures ?? 0, 5)} ${r(p.sentMessages ?? 0, 10)} ${r(p.sentBytes ?? 0, 12)} ${r(p.recvMessages ?? 0, 10)} ${r(p.inFlightMessages ?? p.sendQueue + p.retransQueue, 8)} ${r(p.movedByFailover ?? 0, 8)}`,
        );
      }
    }
  }
  if (all || want.has('-I')) {
    // InfiniBand connections (transport 'infiniband'), one line per connection: as rds-info -I, without
    // the device GIDs and the QP details the kernel shows.
    out.push(
      '\nRDMA Connections:',
      `${r('LocalAddr', 15)} ${r('RemoteAddr', 15)} ${r('Tos', 4)} ${l('State', 13)} ${r('NextTX', 16)} ${r('NextRX', 16)} ${r('Wc/Wake', 8)}`,
    );
    for (const c of info.connections) {
      if (c.transport !== 'infiniband' && c.transport !== 'ib') continue;
      const p = c.paths[0];
      if (p === undefined) continue;
      out.push(
        `${r(c.localAddress, 15)} ${r(c.peerAddress, 15)} ${r(c.tos ?? 0, 4)} ${l(p.state, 13)} ${r(p.nextTxSeq, 16)} ${r(p.nextRxSeq, 16)} ${r(p.transport?.completionsPerWakeup ?? '-', 8)}${verbose ? ibVerbose(p.transport) : ''}`,
      );
    }
  }
  process.stdout.write(`${out.join('\n').replace(/^\n/, '')}\n`);
}

async function main(): Promise<number> {
  let parsed: ReturnType<typeof parseFlags>;
  try {
    parsed = parseFlags(process.argv.slice(2), {
      '-c': 'flag',
      '-k': 'flag',
      '-n': 'flag',
      '-r': 'flag',
      '-s': 'flag',
      '-t': 'flag',
      '-T': 'flag',
      '-I': 'flag',
      '-R': 'flag',
      '-v': 'flag',
      '--json': 'flag',
      '-p': 'value',
      '--socket': 'value',
      '-h': 'flag',
      '--help': 'flag',
    });
  } catch (e) {
    console.error(`rds-info: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  const { opts } = parsed;
  if (opts['-h'] || opts['--help']) {
    console.log(USAGE);
    return 0;
  }
  const paths = nodeSockets(
    typeof opts['--socket'] === 'string' ? opts['--socket'] : undefined,
    typeof opts['-p'] === 'string' ? opts['-p'] : undefined,
  );
  if (paths.length === 0) {
    console.error(`rds-info: no rds-socket node found in ${controlDir()}. ${HOW_TO_OPEN}`);
    return 1;
  }
  const want = new Set(Object.keys(opts).filter((k) => /^-[cknrstTIR]$/.test(k)));
  const infos: Info[] = [];
  for (const p of paths) {
    try {
      infos.push(await controlRequest<Info>(p, 'info'));
    } catch {
      // A node that went away without removing its socket.
    }
  }
  if (infos.length === 0) {
    console.error(`rds-info: no rds-socket node answered (tried ${paths.join(', ')}). ${HOW_TO_OPEN}`);
    return 1;
  }
  if (opts['--json']) {
    console.log(JSON.stringify(infos.length === 1 ? infos[0] : infos, null, 2));
    return 0;
  }
  for (const info of infos) {
    if (infos.length > 1) console.log(`\n=== node pid ${info.pid} ===`);
    print(info, want, opts['-v'] === true);
  }
  return 0;
}

process.exitCode = await main();
