// One benchmark process: node bench/peer.mjs <contender> <role> <json options>
// Roles: sink (count what arrives, print {msgs, bytes, secs}), source (send as fast as allowed),
// echo (answer each message), ping (measure round trips, print {rtts}).
import { connect, createServer } from 'node:net';

const [contender, role, optsText] = process.argv.slice(2);
const o = JSON.parse(optsText);
const out = (x) => process.stdout.write(JSON.stringify(x) + '\n');
const payload = Buffer.alloc(o.size ?? 1024, 0x5a);

function meter() {
  let msgs = 0, bytes = 0, t0 = 0;
  const warm = o.warmupMs ?? 300;
  const start = Date.now();
  return {
    add(n) {
      const now = Date.now();
      if (now - start < warm) return;
      if (t0 === 0) t0 = now;
      msgs++;
      bytes += n;
    },
    report() { out({ msgs, bytes, secs: t0 ? (Date.now() - t0) / 1000 : 0 }); },
  };
}
const finishAfter = (ms, fn) => setTimeout(() => { fn(); process.exit(0); }, ms);

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

async function runNet() {
  if (role === 'sink' || role === 'echo') {
    const m = meter();
    const server = createServer((c) => {
      c.setNoDelay(true);
      c.on('data', netFramer((msg) => {
        if (role === 'sink') m.add(msg.length);
        else { const [h, p] = netFrame(msg); c.cork(); c.write(h); c.write(p); c.uncork(); }
      }));
      c.on('error', () => {});
    });
    server.listen(o.port, o.addr, () => out({ ready: true }));
    if (role === 'sink') finishAfter(o.durationMs, () => m.report());
    return;
  }
  const c = connect({ host: o.peer, port: o.port, localAddress: o.addr });
  c.setNoDelay(true);
  await new Promise((r) => c.once('connect', r));
  if (role === 'source') {
    const [h] = netFrame(payload);
    const pump = () => {
      for (;;) {
        c.cork(); c.write(h); const ok = c.write(payload); c.uncork();
        if (!ok) return c.once('drain', pump);
      }
    };
    pump();
    return;
  }
  // ping
  const rtts = [];
  let t0 = 0n;
  c.on('data', netFramer(() => {
    rtts.push(Number(process.hrtime.bigint() - t0) / 1000);
    if (rtts.length >= o.count) { out({ rtts }); process.exit(0); }
    send();
  }));
  const send = () => { t0 = process.hrtime.bigint(); const [h] = netFrame(payload); c.cork(); c.write(h); c.write(payload); c.uncork(); };
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
    finishAfter(o.durationMs, () => m.report());
    for await (const [msg] of s) m.add(msg.length);
  } else if (role === 'source') {
    const s = new zmq.Push({ sendHighWaterMark: 1000 });
    s.connect(ep);
    for (;;) await s.send(payload);
  } else if (role === 'echo') {
    const s = new zmq.Reply();
    await s.bind(`tcp://${o.addr}:${o.port}`);
    out({ ready: true });
    for await (const [msg] of s) await s.send(msg);
  } else {
    const s = new zmq.Request();
    s.connect(ep);
    const rtts = [];
    while (rtts.length < o.count) {
      const t0 = process.hrtime.bigint();
      await s.send(payload);
      await s.receive();
      rtts.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    out({ rtts });
    process.exit(0);
  }
}

// ---- rds-socket ----
async function runRds() {
  const { RdsSocket, RdsStack, constants } = await import('../dist/index.js');
  const stack = new RdsStack({ tcpPort: o.tcpPort, npaths: o.npaths ?? 8 });
  const s = new RdsSocket({ stack });
  await s.bind({ address: o.addr, port: 4000 });
  s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 4 << 20);
  s.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 16 << 20);
  const dest = { address: o.peer, port: 4000 };
  if (role === 'sink' || role === 'echo') {
    out({ ready: true });
    const m = meter();
    if (role === 'sink') finishAfter(o.durationMs, () => m.report());
    s.on('readable', () => {
      for (let msg = s.recvmsg(); msg !== null; msg = s.recvmsg()) {
        if (role === 'sink') m.add(msg.data.length);
        else s.sendmsg(msg.data, { address: msg.address, port: msg.port });
      }
    });
    return;
  }
  if (role === 'source') {
    const pump = () => {
      for (;;) {
        try { s.sendmsg(payload, dest); } catch (e) {
          if (e.code === 'EAGAIN') return s.once('writable', pump);
          if (e.code === 'ENOBUFS') return setTimeout(pump, 1);
          throw e;
        }
      }
    };
    pump();
    return;
  }
  const rtts = [];
  let t0 = 0n;
  s.on('readable', () => {
    for (let msg = s.recvmsg(); msg !== null; msg = s.recvmsg()) {
      rtts.push(Number(process.hrtime.bigint() - t0) / 1000);
      if (rtts.length >= o.count) { out({ rtts }); process.exit(0); }
      t0 = process.hrtime.bigint();
      s.sendmsg(payload, dest);
    }
  });
  t0 = process.hrtime.bigint();
  s.sendmsg(payload, dest);
}

await { net: runNet, zmq: runZmq, rds: runRds }[contender]();
