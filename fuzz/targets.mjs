// Fuzz targets: each takes a Buffer and must never throw anything but the errors it declares.
import { RdsSocket, RdsStack, wire } from '../dist/index.js';

// A loopback address of its own per process, so fuzz runs never collide.
const net = `127.31.${(process.pid >> 7) & 0xff}`;
const host = (process.pid & 0x7f) * 2 + 1;
const stack = new RdsStack({ tcpPort: 26499, heartbeatIntervalMs: 0 });
const conn = stack.connFor(`${net}.${host}`, `${net}.${host + 1}`, stack.transports.get('tcp'));
const sock = new RdsSocket({ stack });
await sock.bind({ address: `${net}.${host}`, port: 4000 });

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
    for (const p of conn.paths) p.sendQueue.drain();
    while (sock.recvmsg() !== null);
  },
  /** The 16-byte extension area. */
  extensions(data) {
    const area = Buffer.alloc(16);
    data.copy(area, 0, 0, 16);
    wire.decodeHandshake(wire.parseExtensions(area));
  },
};
