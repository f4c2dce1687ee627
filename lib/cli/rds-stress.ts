#!/usr/bin/env node
/**
 * rds-stress: as rds-tools' rds-stress. A passive side waits on a TCP control port; an active side
 * (-s) connects, both start -t tasks (each an RDS socket on port+1+i), and every active task keeps
 * -d requests of -q bytes outstanding to every passive task, which answers each with -a bytes.
 *   passive: rds-stress -r ADDR [-p PORT]
 *   active:  rds-stress -s DEST [-r ADDR] [-p PORT] [-q BYTES] [-a BYTES] [-d DEPTH] [-t TASKS] [-T SECONDS] [-z]
 * Every second: tsks tx/s rx/s tx+rx K/s mbi K/s mbo K/s tx us/c rtt us cpu %; then an average
 * line, round-trip p50/p99 and a histogram of round trips in power-of-two microsecond buckets.
 */
import { connect, createServer, type Socket } from 'node:net';
import { createSocket } from 'node:dgram';
import { RdsSocket, RdsStack, constants } from '../index.js';
import { parseFlags } from './format.js';

const USAGE = 'usage: rds-stress [-s dest] [-r local] [-p port] [-q req] [-a ack] [-d depth] [-t tasks] [-T seconds] [-z] [--tcp-port P]';
const MIN_MSG_BYTES = 63;
const OP_REQ = 1;
const OP_ACK = 2;

interface Params { req: number; ack: number; depth: number; tasks: number; seconds: number }

class Meter {
  tx = 0; rx = 0; bytes = 0; sendCalls = 0; sendNs = 0n; rttUs: number[] = []; rttSum = 0; rttN = 0;
  readonly hist = new Array<number>(32).fill(0);
  reset(): void {
    this.tx = this.rx = this.bytes = this.sendCalls = this.rttSum = this.rttN = 0;
    this.sendNs = 0n;
  }
  rtt(us: number): void {
    this.rttSum += us;
    this.rttN++;
    this.rttUs.push(us);
    let b = 0;
    while (b < 31 && us >= 2 ** b) b++;
    this.hist[b]!++;
  }
}

export const HEADER = 'tsks   tx/s   rx/s  tx+rx K/s    mbi K/s    mbo K/s tx us/c   rtt us cpu %';

function row(tasks: number, m: { tx: number; rx: number; bytes: number; sendCalls: number; sendNs: bigint; rttSum: number; rttN: number }, secs: number, suffix = ''): string {
  const f = (v: number, w: number): string => v.toFixed(2).padStart(w);
  const usPerCall = m.sendCalls ? Number(m.sendNs / BigInt(m.sendCalls)) / 1000 : 0;
  return `${String(tasks).padStart(4)} ${String(Math.round(m.tx / secs)).padStart(6)} ${String(Math.round(m.rx / secs)).padStart(6)} ${f(m.bytes / 1024 / secs, 10)} ${f(0, 10)} ${f(0, 10)} ${f(usPerCall, 7)} ${f(m.rttN ? m.rttSum / m.rttN : 0, 8)} ${f(-1, 5)}${suffix}`;
}

function message(size: number, op: number, seq: number, task: number, peerTask: number): Buffer {
  const b = Buffer.alloc(Math.max(MIN_MSG_BYTES, size));
  b.writeUInt8(op, 0);
  b.writeUInt32BE(seq >>> 0, 1);
  b.writeUInt16BE(task, 5);
  b.writeUInt16BE(peerTask, 7);
  return b;
}

async function openTasks(stack: RdsStack, addr: string, port: number, p: Params): Promise<RdsSocket[]> {
  const socks: RdsSocket[] = [];
  const buf = Math.max(1 << 20, p.tasks * p.depth * (p.req + p.ack) * 2);
  for (let i = 0; i < p.tasks; i++) {
    const s = new RdsSocket({ stack });
    await s.bind({ address: addr, port: port + 1 + i });
    s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, buf);
    s.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, buf);
    socks.push(s);
  }
  return socks;
}

function timedSend(m: Meter, s: RdsSocket, data: Buffer, dest: { address: string; port: number }): void {
  const t0 = process.hrtime.bigint();
  void s.send(data, dest).then(() => {
    m.sendNs += process.hrtime.bigint() - t0;
    m.sendCalls++;
  }, () => {});
}

function lineReader(sock: Socket, onLine: (l: string) => void): void {
  let buf = '';
  sock.setEncoding('utf8');
  sock.on('data', (d: string) => {
    buf += d;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      onLine(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
    }
  });
}

function sourceFor(dest: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const u = createSocket('udp4');
    u.on('error', reject);
    u.connect(9, dest, () => {
      const a = u.address().address;
      u.close();
      resolve(a);
    });
  });
}

function report(m: Meter, tasks: number, started: number, summaryOnly: boolean): void {
  const secs = (Date.now() - started) / 1000;
  const total = { tx: m.tx, rx: m.rx, bytes: m.bytes, sendCalls: m.sendCalls, sendNs: m.sendNs, rttSum: m.rttSum, rttN: m.rttN };
  if (!summaryOnly) console.log('---------------------------------------------------------------------------------');
  console.log(row(tasks, total, Math.max(secs, 1e-3), '  (average)'));
  if (m.rttUs.length > 0) {
    const sorted = Float64Array.from(m.rttUs).sort();
    const pct = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
    console.log(`rtt p50 ${pct(0.5).toFixed(1)} us, p99 ${pct(0.99).toFixed(1)} us (${sorted.length} round trips)`);
    console.log('rtt histogram (us):');
    m.hist.forEach((n, b) => {
      if (n > 0) console.log(`  ${b === 0 ? '< 1' : `${2 ** (b - 1)}-${2 ** b}`}`.padEnd(22) + String(n));
    });
  }
}

async function main(): Promise<number> {
  let parsed;
  try {
    parsed = parseFlags(process.argv.slice(2), {
      '-s': 'value', '-r': 'value', '-p': 'value', '-q': 'value', '-a': 'value', '-d': 'value', '-t': 'value', '-T': 'value',
      '-z': 'flag', '--tcp-port': 'value', '-h': 'flag', '--help': 'flag',
    });
  } catch (e) {
    console.error(`rds-stress: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  const o = parsed.opts;
  if (o['-h'] || o['--help']) {
    console.log(USAGE);
    return 0;
  }
  const num = (k: string, d: number, min = 0): number => {
    const v = typeof o[k] === 'string' ? Number(o[k]) : d;
    if (!Number.isFinite(v) || v < min) throw new Error(`bad value for ${k}: ${String(o[k])}`);
    return v;
  };
  let port: number;
  let p: Params;
  try {
    port = num('-p', 4000, 1);
    p = { req: num('-q', 1024, 0), ack: num('-a', MIN_MSG_BYTES, 0), depth: num('-d', 1, 1), tasks: num('-t', 1, 1), seconds: num('-T', 0, 0) };
  } catch (e) {
    console.error(`rds-stress: ${(e as Error).message}`);
    return 2;
  }
  const tcpPort = typeof o['--tcp-port'] === 'string' ? Number(o['--tcp-port']) : constants.RDS_TCP_PORT;
  const summaryOnly = o['-z'] === true;
  const stack = new RdsStack({ tcpPort });

  if (typeof o['-s'] !== 'string') {
    // ---- passive ----
    if (typeof o['-r'] !== 'string') {
      console.error('rds-stress: the passive side needs -r ADDRESS (RDS binds to one exact address)');
      return 2;
    }
    const local = o['-r'];
    const server = createServer();
    await new Promise<void>((res, rej) => server.once('error', rej).listen({ host: local, port }, () => res()));
    const ctl = await new Promise<Socket>((res) => server.once('connection', res));
    server.close();
    return await new Promise<number>((resolve) => {
      let socks: RdsSocket[] = [];
      const m = new Meter();
      let started = 0;
      let tick: NodeJS.Timeout | null = null;
      lineReader(ctl, (l) => {
        const msg = JSON.parse(l) as { params?: Params; done?: boolean };
        if (msg.params) {
          void openTasks(stack, local, port, msg.params).then((s) => {
            socks = s;
            for (const [i, sock] of socks.entries()) {
              sock.on('readable', () => {
                for (let r = sock.recvmsg(); r !== null; r = sock.recvmsg()) {
                  if (r.data.length < 9 || r.data.readUInt8(0) !== OP_REQ) continue;
                  m.rx++;
                  m.bytes += r.data.length + msg.params!.ack;
                  m.tx++;
                  timedSend(m, sock, message(msg.params!.ack, OP_ACK, r.data.readUInt32BE(1), i, r.data.readUInt16BE(5)), { address: r.address, port: r.port });
                }
              });
            }
            started = Date.now();
            if (!summaryOnly) {
              console.log(HEADER);
              tick = setInterval(() => {
                console.log(row(socks.length, m, 1));
                m.reset();
              }, 1000);
            }
            ctl.write(JSON.stringify({ ready: true }) + '\n');
          });
        }
        if (msg.done) {
          if (tick) clearInterval(tick);
          void stack.close().then(() => {
            ctl.end();
            resolve(started ? 0 : 1);
          });
        }
      });
      ctl.on('error', () => resolve(1));
    });
  }

  // ---- active ----
  const dest = o['-s'];
  const local = typeof o['-r'] === 'string' ? o['-r'] : await sourceFor(dest);
  const ctl = connect({ host: dest, port });
  await new Promise<void>((res, rej) => ctl.once('connect', res).once('error', rej)).catch((e: Error) => {
    console.error(`rds-stress: cannot reach the passive side at ${dest}:${port}: ${e.message}`);
    process.exit(1);
  });
  const ready = new Promise<void>((res) => lineReader(ctl, (l) => (JSON.parse(l) as { ready?: boolean }).ready && res()));
  ctl.write(JSON.stringify({ params: p }) + '\n');
  const socks = await openTasks(stack, local, port, p);
  await ready;
  const m = new Meter();
  const all = new Meter();
  let running = true;
  const inflight = new Map<string, bigint>();
  let seq = 0;
  const sendReq = (task: number, peerTask: number): void => {
    if (!running) return;
    const s = ++seq;
    inflight.set(`${task}.${s}`, process.hrtime.bigint());
    m.tx++;
    all.tx++;
    m.bytes += Math.max(MIN_MSG_BYTES, p.req);
    all.bytes += Math.max(MIN_MSG_BYTES, p.req);
    timedSend(m, socks[task]!, message(p.req, OP_REQ, s, task, peerTask), { address: dest, port: port + 1 + peerTask });
  };
  for (const [i, sock] of socks.entries()) {
    sock.on('readable', () => {
      for (let r = sock.recvmsg(); r !== null; r = sock.recvmsg()) {
        if (r.data.length < 9 || r.data.readUInt8(0) !== OP_ACK) continue;
        const key = `${i}.${r.data.readUInt32BE(1)}`;
        const t0 = inflight.get(key);
        if (t0 === undefined) continue;
        inflight.delete(key);
        const us = Number(process.hrtime.bigint() - t0) / 1000;
        for (const x of [m, all]) {
          x.rx++;
          x.bytes += r.data.length;
          x.rtt(us);
        }
        sendReq(i, r.data.readUInt16BE(5));
      }
    });
  }
  if (!summaryOnly) console.log(HEADER);
  const started = Date.now();
  for (let i = 0; i < p.tasks; i++) for (let j = 0; j < p.tasks; j++) for (let d = 0; d < p.depth; d++) sendReq(i, j);
  const tick = setInterval(() => {
    if (!summaryOnly) console.log(row(p.tasks, m, 1));
    all.sendCalls += m.sendCalls;
    all.sendNs += m.sendNs;
    m.reset();
  }, 1000);
  const stop = (): void => {
    running = false;
  };
  process.once('SIGINT', stop);
  while (running && (p.seconds === 0 || Date.now() - started < p.seconds * 1000)) await new Promise((r) => setTimeout(r, 50));
  running = false;
  clearInterval(tick);
  all.sendCalls += m.sendCalls;
  all.sendNs += m.sendNs;
  report(all, p.tasks, started, summaryOnly);
  ctl.write(JSON.stringify({ done: true }) + '\n');
  ctl.end();
  await stack.close();
  return all.rx > 0 ? 0 : 1;
}

process.exitCode = await main();
