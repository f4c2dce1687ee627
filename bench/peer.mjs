// One benchmark process: node bench/peer.mjs <contender> <role> <json options>
// Roles: sink (count what arrives, print {msgs, bytes, secs}), source (send as fast as allowed),
// echo (answer each message), ping (measure round trips, print {rtts}).
import { connect, createServer } from 'node:net';

const [contender, role, optsText] = process.argv.slice(2);
const o = JSON.parse(optsText);
const out = (x) => process.stdout.write(`${JSON.stringify(x)}\n`);
const payload = Buffer.alloc(o.size ?? 1024, 0x5a);
// RDS_BENCH_TCP_SNDBUF=N|auto: the stacks' tcpSndbuf (default: the library's, 'auto'), to compare.
const SNDBUF = process.env.RDS_BENCH_TCP_SNDBUF
  ? { tcpSndbuf: process.env.RDS_BENCH_TCP_SNDBUF === 'auto' ? 'auto' : Number(process.env.RDS_BENCH_TCP_SNDBUF) }
  : {};
// o.stay: report but keep running (a node that also echoes pings another process still sends).
function finishAfter(ms, fn) {
  setTimeout(() => {
    fn();
    if (!o.stay) process.exit(0);
  }, ms);
}

/**
 * Counts what a sink receives. The clock starts at the first message: `warmupMs` of traffic are
 * discarded (every contender's JIT gets the same time to settle), then `durationMs` are measured
 * and reported, and the process exits.
 */
function meter() {
  let msgs = 0,
    bytes = 0,
    t0 = 0,
    first = 0;
  const warm = o.warmupMs ?? 300;
  const report = () => out({ msgs, bytes, secs: t0 ? (Date.now() - t0) / 1000 : 0, heap: heapSamples });
  return {
    add(n) {
      const now = Date.now();
      if (first === 0) {
        first = now;
        finishAfter(warm + o.durationMs, report);
      }
      if (now - first < warm) return;
      if (t0 === 0) t0 = now;
      msgs++;
      bytes += n;
    },
  };
}
// With heapEveryMs (run under --expose-gc): the live heap after a full collection, sampled
// throughout the run, to show whether memory grows under sustained load.
const heapSamples = [];
if (o.heapEveryMs && global.gc) {
  setInterval(() => {
    global.gc();
    heapSamples.push(process.memoryUsage().heapUsed);
  }, o.heapEveryMs).unref();
}
/**
 * A source with `waitGo` says it is ready once set up, then waits for "go" on stdin: run.mjs
 * starts every source of a run together, so no process is still loading its modules (a one-off
 * cost, heavier for some contenders than others) while the sink measures.
 */
function ready() {
  if (!o.waitGo) return Promise.resolve();
  out({ ready: true });
  return new Promise((resolve) => process.stdin.once('data', resolve));
}
// A source given a duration reports its heap samples and leaves.
if (role === 'source' && o.durationMs) finishAfter(o.durationMs, () => out({ heap: heapSamples }));

/**
 * Round trips, after a warm-up during which they are discarded (every contender gets the same
 * time for its JIT to settle). Returns true once `o.count` have been recorded.
 */
function rttRecorder() {
  const rtts = [];
  const warmUntil = Date.now() + (o.warmupMs ?? 0);
  return (us) => {
    if (Date.now() >= warmUntil) rtts.push(us);
    if (rtts.length < o.count) return false;
    out({ rtts });
    return true;
  };
}

// ---- node:net with 4-byte length framing ----
function netFramer(onMsg) {
  let buf = Buffer.alloc(0);
  return (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    let off = 0;
    while (buf.length - off >= 4) {
      const len = buf.readUInt32BE(off);
      if (buf.length - off - 4 < len) break;
      onMsg(buf.subarray(off + 4, off + 4 + len));
      off += 4 + len;
    }
    buf = buf.subarray(off);
  };
}
function netFrame(p) {
  const h = Buffer.allocUnsafe(4);
  h.writeUInt32BE(p.length, 0);
  return [h, p];
}

/**
 * node:net written as a careful engineer would for bulk ("netb"): the source copies frames into a
 * 256 KiB batch and writes each batch once, waiting for 'drain' when the socket refuses; the sink
 * walks frames where they lie in each chunk, copying only a frame split across two reads. Frames
 * are counted, not handed to an application: the ceiling for framed messages in one Node process.
 */
const BATCH_BYTES = 256 << 10;
function batchedSource(c) {
  const frame = 4 + payload.length;
  const perBatch = Math.max(1, Math.floor(BATCH_BYTES / frame));
  const pump = () => {
    for (;;) {
      const batch = Buffer.allocUnsafe(perBatch * frame);
      for (let i = 0, off = 0; i < perBatch; i++, off += frame) {
        batch.writeUInt32BE(payload.length, off);
        payload.copy(batch, off + 4);
      }
      if (!c.write(batch)) return c.once('drain', pump);
    }
  };
  pump();
}
function batchedSink(c, m) {
  let carry = null; // the start of a frame split across reads
  c.on('data', (chunk) => {
    let buf = chunk;
    if (carry !== null) {
      buf = Buffer.concat([carry, chunk]);
      carry = null;
    }
    let off = 0;
    while (buf.length - off >= 4) {
      const len = buf.readUInt32BE(off);
      if (buf.length - off - 4 < len) break;
      m.add(len);
      off += 4 + len;
    }
    if (off < buf.length) carry = Buffer.from(buf.subarray(off));
  });
}

async function runNet() {
  const batched = contender === 'netb';
  if (role === 'sink' && batched) {
    const m = meter();
    const server = createServer((c) => {
      batchedSink(c, m);
      c.on('error', () => {});
    });
    server.listen(o.port, o.addr, () => out({ ready: true }));
    return;
  }
  if (role === 'sink' || role === 'echo') {
    const m = meter();
    const server = createServer((c) => {
      c.setNoDelay(true);
      c.on(
        'data',
        netFramer((msg) => {
          if (role === 'sink') m.add(msg.length);
          else {
            const [h, p] = netFrame(msg);
            c.cork();
            c.write(h);
            c.write(p);
            c.uncork();
          }
        }),
      );
      c.on('error', () => {});
    });
    server.listen(o.port, o.addr, () => out({ ready: true }));
    return;
  }
  const c = connect({ host: o.peer, port: o.port, localAddress: o.addr });
  c.on('error', () => process.exit(0)); // the sink going away ends a source
  c.setNoDelay(true);
  await new Promise((r) => c.once('connect', r));
  if (role === 'source' && batched) {
    await ready();
    batchedSource(c);
    return;
  }
  if (role === 'source') {
    await ready();
    const [h] = netFrame(payload);
    const pump = () => {
      for (;;) {
        c.cork();
        c.write(h);
        const ok = c.write(payload);
        c.uncork();
        if (!ok) return c.once('drain', pump);
      }
    };
    pump();
    return;
  }
  // ping
  const record = rttRecorder();
  let t0 = 0n;
  c.on(
    'data',
    netFramer(() => {
      if (record(Number(process.hrtime.bigint() - t0) / 1000)) process.exit(0);
      send();
    }),
  );
  const send = () => {
    t0 = process.hrtime.bigint();
    const [h] = netFrame(payload);
    c.cork();
    c.write(h);
    c.write(payload);
    c.uncork();
  };
  send();
}

// ---- zeromq.js ----
async function runZmq() {
  const zmq = await import('zeromq');
  const ep = `tcp://${o.peer ?? o.addr}:${o.port}`;
  if (role === 'sink') {
    const s = new zmq.Pull();
    await s.bind(`tcp://${o.addr}:${o.port}`);
    out({ ready: true });
    const m = meter();
    for await (const [msg] of s) m.add(msg.length);
  } else if (role === 'source') {
    const s = new zmq.Push({ sendHighWaterMark: 1000 });
    s.connect(ep);
    await ready();
    for (;;) await s.send(payload);
  } else if (role === 'echo') {
    const s = new zmq.Reply();
    await s.bind(`tcp://${o.addr}:${o.port}`);
    out({ ready: true });
    for await (const [msg] of s) await s.send(msg);
  } else {
    const s = new zmq.Request();
    s.connect(ep);
    const record = rttRecorder();
    for (;;) {
      const t0 = process.hrtime.bigint();
      await s.send(payload);
      await s.receive();
      if (record(Number(process.hrtime.bigint() - t0) / 1000)) process.exit(0);
    }
  }
}

// ---- rds-socket ----
async function runRds() {
  const { RdsSocket, RdsStack, constants } = await import('../dist/index.js');
  if (role === 'holsink' || role === 'holsrc') return headOfLine(RdsSocket, RdsStack, constants);
  if (role === 'scalevictim' || role === 'scalepeers') return scale(RdsSocket, RdsStack, constants);
  const stack = new RdsStack({ tcpPort: o.tcpPort, npaths: o.npaths ?? 8, ...SNDBUF });
  const s = new RdsSocket({ stack });
  await s.bind({ address: o.addr, port: 4000 });
  s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, (o.sndbufMiB ?? 4) << 20);
  s.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 16 << 20);
  const dest = { address: o.peer, port: 4000 };
  if (role === 'sink' || role === 'echo') {
    out({ ready: true });
    const m = meter();
    s.on('readable', () => {
      for (let msg = s.recvmsg(); msg !== null; msg = s.recvmsg()) {
        if (role === 'sink') m.add(msg.data.length);
        else s.sendmsg(msg.data, { address: msg.address, port: msg.port });
      }
    });
    return;
  }
  if (role === 'source') {
    // With o.zerocopy (MSG_ZEROCOPY): the one payload buffer is never modified, so it can be sent
    // again and again without waiting for completions; they are read and discarded.
    let zc;
    if (o.zerocopy) {
      s.setsockopt(constants.SOL_SOCKET, constants.SO_ZEROCOPY, 1);
      s.setsockopt(constants.SOL_RDS, constants.RDS_CONG_MONITOR, 1);
      zc = { flags: constants.MSG_ZEROCOPY, zcopyCookie: 0 };
      s.on('readable', () => {
        while (s.recvmsg() !== null);
      });
    }
    const pump = () => {
      for (;;) {
        try {
          s.sendmsg(payload, dest, zc);
        } catch (e) {
          if (e.code === 'EAGAIN') return s.once('writable', pump);
          if (e.code === 'ENOBUFS') return setTimeout(pump, 1);
          throw e;
        }
      }
    };
    await ready();
    pump();
    return;
  }
  const record = rttRecorder();
  let t0 = 0n;
  s.on('readable', () => {
    for (let msg = s.recvmsg(); msg !== null; msg = s.recvmsg()) {
      if (record(Number(process.hrtime.bigint() - t0) / 1000)) process.exit(0);
      t0 = process.hrtime.bigint();
      s.sendmsg(payload, dest);
    }
  });
  t0 = process.hrtime.bigint();
  s.sendmsg(payload, dest);
}

/**
 * Head-of-line blocking: one node streams 1 MiB messages from one socket while another socket of
 * the same node pings a socket of the receiving node. holsink: port 4000 counts the stream, port
 * 4001 echoes. holsrc: with o.stream port 5000 streams, with o.pings port o.pingPort pings.
 */
async function headOfLine(RdsSocket, RdsStack, constants) {
  const stack = new RdsStack({ tcpPort: o.tcpPort, npaths: o.npaths ?? 8, ...SNDBUF });
  const bind = async (port) => {
    const s = new RdsSocket({ stack });
    await s.bind({ address: o.addr, port });
    s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 8 << 20);
    s.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 16 << 20);
    return s;
  };
  if (role === 'holsink') {
    const sink = await bind(4000);
    const echo = await bind(4001);
    const m = meter();
    sink.on('readable', () => {
      for (let msg = sink.recvmsg(); msg !== null; msg = sink.recvmsg()) m.add(msg.data.length);
    });
    echo.on('readable', () => {
      for (let msg = echo.recvmsg(); msg !== null; msg = echo.recvmsg())
        echo.sendmsg(msg.data, { address: msg.address, port: msg.port });
    });
    out({ ready: true });
    return;
  }
  await ready();
  if (o.stream) {
    const s = await bind(5000);
    const big = Buffer.alloc(1 << 20, 0x33);
    const pump = () => {
      for (;;) {
        try {
          s.sendmsg(big, { address: o.peer, port: 4000 });
        } catch (e) {
          if (e.code === 'EAGAIN') return s.once('writable', pump);
          if (e.code === 'ENOBUFS') return setTimeout(pump, 1);
          throw e;
        }
      }
    };
    pump();
  }
  if (o.pings) {
    const p = await bind(o.pingPort);
    const record = rttRecorder();
    const small = Buffer.alloc(64, 1);
    let t0 = 0n;
    p.on('readable', () => {
      for (let msg = p.recvmsg(); msg !== null; msg = p.recvmsg()) {
        if (record(Number(process.hrtime.bigint() - t0) / 1000)) return;
        t0 = process.hrtime.bigint();
        p.sendmsg(small, { address: o.peer, port: 4001 });
      }
    });
    t0 = process.hrtime.bigint();
    p.sendmsg(small, { address: o.peer, port: 4001 });
  }
}

/**
 * Memory at cluster scale. scalevictim: one node on o.addr that echoes; on "measure" (stdin) it
 * reports its RSS and heap after a full GC. scalepeers: one stack per address in o.addrs, each
 * sends one message to the victim and waits for the echo, then the peers stay idle.
 */
async function scale(RdsSocket, RdsStack, constants) {
  const sample = () => {
    global.gc?.();
    const u = process.memoryUsage();
    return { rss: u.rss, heapUsed: u.heapUsed, arrayBuffers: u.arrayBuffers };
  };
  if (role === 'scalevictim') {
    const stack = new RdsStack({ tcpPort: o.tcpPort, npaths: o.npaths ?? 8, heartbeatIntervalMs: 0, ...SNDBUF });
    const s = new RdsSocket({ stack });
    await s.bind({ address: o.addr, port: 4000 });
    s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 8 << 20);
    s.on('readable', () => {
      for (let msg = s.recvmsg(); msg !== null; msg = s.recvmsg())
        s.sendmsg(msg.data, { address: msg.address, port: msg.port });
    });
    // Touch the whole young generation (run.mjs fixes its size) with garbage that dies young, so
    // its pages are in the baseline and the old generation stays as it was.
    let recent = [];
    for (let i = 0; i < 2000000; i++) {
      recent.push({ i, a: [i] });
      if (recent.length === 1000) recent = [];
    }
    await new Promise((r) => setTimeout(r, 200));
    out({ ready: true, ...sample() });
    process.stdin.on('data', () => {
      // Measured before the listing below is made: it is the benchmark's, not the peers' memory.
      const mem = sample();
      const conns = stack.connections();
      const pathsUp = conns.reduce((n, c) => n + c.paths.filter((p) => p.state === 'UP').length, 0);
      out({ measured: true, peers: conns.length, pathsUp, ...mem });
    });
    return;
  }
  let done = 0;
  await Promise.all(
    o.addrs.map(async (addr) => {
      const stack = new RdsStack({ tcpPort: o.tcpPort, npaths: o.npaths ?? 8, heartbeatIntervalMs: 0, ...SNDBUF });
      const s = new RdsSocket({ stack });
      await s.bind({ address: addr, port: 4000 });
      s.sendmsg(Buffer.from('hello'), { address: o.peer, port: 4000 });
      await s.recv({ timeout: 60000 });
      done++;
    }),
  );
  // Let the echo's lane (lanes open on demand) and the last acks settle before the victim measures.
  await new Promise((r) => setTimeout(r, o.settleMs ?? 1000));
  out({ ready: true, peers: done });
}

await { net: runNet, netb: runNet, zmq: runZmq, rds: runRds }[contender]();
