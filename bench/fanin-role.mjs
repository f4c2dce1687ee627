// One process of bench/fanin-ab.mjs: node bench/fanin-role.mjs <dist dir> sink|source <json>
// sink: prints {ready}, then {n, t, c} (count, time, its stack's counters) at each of o.marks.
// source: prints {ready}, sends as fast as allowed from the first stdin line on.
const [dist, role, optsText] = process.argv.slice(2);
const o = JSON.parse(optsText);
const out = (x) => process.stdout.write(`${JSON.stringify(x)}\n`);
const { RdsSocket, RdsStack, constants } = await import(`${dist}/index.js`);
const stack = new RdsStack({ tcpPort: o.tcpPort, npaths: 8, ...(o.stack ?? {}) });
const s = new RdsSocket({ stack });
await s.bind({ address: o.addr, port: 4000 });
s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 4 << 20);
s.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 16 << 20);
const payload = Buffer.alloc(o.size, 0x5a);
if (role === 'sink') {
  // Marks by message count, not time: under a loaded machine the warm-up must be work, not seconds.
  let n = 0;
  const marks = o.marks;
  let next = marks.shift();
  s.on('readable', () => {
    for (let m = s.recvmsg(); m !== null; m = s.recvmsg()) {
      if (++n === next) {
        out({ n, t: performance.now(), c: stack.counters.snapshot?.() ?? {} });
        next = marks.shift();
      }
    }
  });
  out({ ready: true });
} else {
  const dest = { address: o.peer, port: 4000 };
  const pump = () => {
    for (;;) {
      try {
        s.sendmsg(payload, dest);
      } catch (e) {
        if (e.code === 'EAGAIN') return s.once('writable', pump);
        if (e.code === 'ENOBUFS') return setTimeout(pump, 1);
        throw e;
      }
    }
  };
  out({ ready: true });
  process.stdin.once('data', pump);
}
process.on('SIGINT', () => process.exit(0));
