#!/usr/bin/env node
// The receive path alone, between builds (issue 36's fan-in regression, the sink's part):
//   node bench/recv-path.mjs [--rounds R --senders N --size B --warm W --msgs M] label=DIST ...
// A sink (an RdsStack of DIST with one bound socket, reading with recvmsg on 'readable') in a
// process of its own, fed by N raw senders in one other process that play rds-socket nodes (one
// path each: a probe that asks for acks and read reports, then no ACK_REQUIRED; addresses smaller
// than the sink's, so theirs are the connections) and write ready-made frames as fast as TCP takes
// them: what the senders cost is not counted, so the sink's CPU per message (process.cpuUsage over a
// window counted in messages) is the receive path's, from the socket's read to recvmsg. Builds run
// in turn (A B B A ...). SINK_PROF=DIR writes the sink's CPU profile of the window there.
// Run it in a network namespace of its own: unshare -n bash -c 'ip link set lo up; node ...'.
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { jsonLines } from './json-lines.mjs';

const role = process.argv[2];
if (role === 'sink') await sink(process.argv[3], JSON.parse(process.argv[4]));
else if (role === 'feed') await feed(process.argv[3], JSON.parse(process.argv[4]));
else await main();

async function sink(dist, o) {
  const { constants: k, RdsSocket, RdsStack } = await import(`${dist}/index.js`);
  const stack = new RdsStack({ tcpPort: o.tcpPort, heartbeatIntervalMs: 0 });
  const s = new RdsSocket({ stack });
  await s.bind({ address: o.addr, port: 4000 });
  s.setsockopt(k.SOL_SOCKET, k.SO_RCVBUF, 64 << 20);
  const out = (x) => process.stdout.write(`${JSON.stringify(x)}\n`);
  let n = 0;
  const marks = [o.warm, o.warm + o.msgs];
  let at = null;
  let session = null;
  s.on('readable', () => {
    for (let m = s.recvmsg(); m !== null; m = s.recvmsg()) {
      if (++n !== marks[0]) continue;
      marks.shift();
      if (at === null) {
        at = { cpu: process.cpuUsage(), t: performance.now() };
        if (process.env.SINK_PROF) void profStart();
      } else {
        const c = process.cpuUsage(at.cpu);
        const t = performance.now() - at.t;
        void profStop().then(() => out({ us: (c.user + c.system) / o.msgs, mps: o.msgs / (t / 1000) }));
      }
    }
  });
  async function profStart() {
    const { Session } = await import('node:inspector/promises');
    session = new Session();
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.start');
  }
  async function profStop() {
    if (session === null) return;
    const { profile } = await session.post('Profiler.stop');
    const { writeFileSync } = await import('node:fs');
    writeFileSync(`${process.env.SINK_PROF}/sink-${process.pid}.cpuprofile`, JSON.stringify(profile));
  }
  out({ ready: true });
}

async function feed(dist, o) {
  const { constants: k, wire } = await import(`${dist}/index.js`);
  // An rds-socket node's multipath probe (one path, acks and read reports), then frames of o.size
  // bytes from sport 4001 to dport 4000, 64 per write: the sink tracks and acknowledges them as it
  // does for the senders of a fan-in.
  const caps = k.RDSSOCK_CAP_ACK | k.RDSSOCK_CAP_CONFIRM | k.RDSSOCK_CAP_NO_HELLO | (1 << k.RDSSOCK_CAP_PATHS_SHIFT);
  const probe = Buffer.alloc(48);
  wire.encodeHeader(probe, 0, {
    sequence: 1,
    sport: 1,
    dport: 0,
    exthdr: wire.packExtensions([wire.npathsExtension(1), wire.genNumExtension(7), wire.rdsCapsExtension(caps)]),
  });
  const per = 64;
  const flen = 48 + o.size;
  for (let i = 0; i < o.senders; i++) {
    const sock = connect({ host: o.peer, port: o.tcpPort, localAddress: `${o.net}.${10 + i}` });
    sock.setNoDelay(true);
    let seq = 2;
    sock.write(probe);
    sock.resume(); // its acks are read and dropped
    const make = () => {
      const b = Buffer.alloc(per * flen, 0x5a);
      for (let k = 0; k < per; k++) {
        const off = k * flen;
        b.fill(0, off, off + 48);
        b.writeBigUInt64BE(BigInt(seq++), off);
        b.writeUInt32BE(o.size, off + 16);
        b.writeUInt16BE(4001, off + 20);
        b.writeUInt16BE(4000, off + 22);
      }
      return b;
    };
    const pump = () => {
      while (sock.write(make()));
    };
    sock.on('drain', pump);
    sock.on('error', () => {});
    sock.once('connect', pump);
  }
}

function proc(args) {
  const p = spawn(process.execPath, [new URL(import.meta.url).pathname, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return { p, next: jsonLines(p.stdout, `recv-path ${args[0]}`, 600000) };
}

async function main() {
  const args = process.argv.slice(2);
  const opt = (n, d) => {
    const i = args.indexOf(n);
    if (i < 0) return d;
    const v = Number(args[i + 1]);
    args.splice(i, 2);
    return v;
  };
  const rounds = opt('--rounds', 3);
  const senders = opt('--senders', 8);
  const size = opt('--size', 1024);
  const warm = opt('--warm', 200000);
  const msgs = opt('--msgs', 500000);
  const builds = args.map((a) => a.split('='));
  const res = Object.fromEntries(builds.map(([l]) => [l, []]));
  let blk = 0;
  for (let r = 0; r < rounds; r++) {
    for (const [label, dist] of r % 2 ? [...builds].reverse() : builds) {
      blk++;
      const o = { tcpPort: 28000 + blk, addr: `127.51.${blk}.200`, warm, msgs };
      const s = proc(['sink', dist, JSON.stringify(o)]);
      await s.next((l) => l.ready);
      const f = proc(['feed', dist, JSON.stringify({ ...o, senders, size, peer: o.addr, net: `127.51.${blk}` })]);
      const x = await s.next((l) => l.us !== undefined);
      f.p.kill('SIGKILL');
      s.p.kill('SIGKILL');
      res[label].push(x);
      console.log(
        `${label} round ${r}: sink ${x.us.toFixed(3)} us CPU per message, ${(x.mps / 1000).toFixed(0)}k msgs/s`,
      );
    }
  }
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  for (const [l] of builds)
    console.log(
      `MEDIAN ${l}: sink ${med(res[l].map((x) => x.us)).toFixed(3)} us CPU per message, ${(med(res[l].map((x) => x.mps)) / 1000).toFixed(0)}k msgs/s`,
    );
  process.exit(0);
}
