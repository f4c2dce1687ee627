// Fuzz targets: each takes a Buffer and must never throw anything but the errors it declares.
import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RdsSocket, RdsStack, wire } from '../dist/index.js';

// A loopback address of its own per process, so fuzz runs never collide.
const net = `127.31.${(process.pid >> 7) & 0xff}`;
const host = (process.pid & 0x7f) * 2 + 1;
const stack = new RdsStack({ tcpPort: 26499, heartbeatIntervalMs: 0 });
const conn = stack.connFor(`${net}.${host}`, `${net}.${host + 1}`, stack.transports.get('tcp'));
const sock = new RdsSocket({ stack });
await sock.bind({ address: `${net}.${host}`, port: 4000 });

// A host node of this process, fed bytes as if from an attached process's control socket. Its
// log names what ended a client: a protocol error is the declared outcome of bad bytes, an
// "internal error" is a bug (an exception the protocol checks did not turn into a refusal).
const nodeDir = mkdtempSync(join(tmpdir(), 'rds-fuzz-node-'));
let internal = null;
const hostNode = await stack.serve({
  path: join(nodeDir, 'node.sock'),
  log: (line) => {
    if (line.includes('internal error')) internal = line;
  },
});
process.on('exit', () => rmSync(nodeDir, { recursive: true, force: true }));

/** Just enough of a net.Socket for the node's client: what it writes goes nowhere. */
class FakeControlSocket extends EventEmitter {
  writableLength = 0;
  write() {
    return true;
  }
  cork() {}
  uncork() {}
  end() {
    this.emit('close');
  }
  destroy() {
    this.emit('close');
  }
}

export const targets = {
  /** Bytes arriving on an RDS/TCP connection: framing, extensions, handshake, acks, delivery. */
  frames(data) {
    const cp = conn.paths[data.length % conn.paths.length];
    const reader = new wire.FrameReader((h, p) => stack.recvIncoming(cp, h, p));
    try {
      const cut = data.length > 0 ? data[0] % (data.length + 1) : 0;
      reader.push(data.subarray(0, cut));
      reader.push(data.subarray(cut));
    } catch (e) {
      if (!(e instanceof wire.RdsProtocolError)) throw e;
    }
    // Keep memory flat across inputs: drop what the input queued or delivered.
    for (const p of conn.paths) p.tx.sendQueue.drain();
    while (sock.recvmsg() !== null);
  },
  /**
   * Bytes on a host node's control socket (the attach protocol): framing, binary and JSON metas,
   * calls (open, bind, setsockopt, ...), sends, credits; then the client goes away.
   */
  hostControl(data) {
    const c = new FakeControlSocket();
    hostNode.accept(c);
    const cut = data.length > 0 ? data[data.length - 1] % (data.length + 1) : 0;
    c.emit('data', data.subarray(0, cut));
    c.emit('data', data.subarray(cut));
    c.emit('close');
    if (internal !== null) {
      const why = internal;
      internal = null;
      throw new Error(why);
    }
  },
  /** The 16-byte extension area. */
  extensions(data) {
    const area = Buffer.alloc(16);
    data.copy(area, 0, 0, 16);
    wire.decodeHandshake(wire.parseExtensions(area));
  },
};
