import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants } from '../lib/index.js';
import {
  C_CREDIT,
  C_HELLO,
  C_REQ,
  encodeFrame,
  type Frame,
  FrameParser,
  N_MSG,
  N_RESP,
  PROTOCOL_VERSION,
} from '../lib/host/protocol.js';
import { encodeCount, readMsg } from '../lib/host/hot-frames.js';
import { OFF_DPORT, OFF_LEN, OFF_SPORT } from '../lib/wire/header.js';
import { until } from './helpers.js';
import { peerSocket as peerSocketOf, serveNode } from './host-kit.js';

// The host node's cut-through receive (issue 36, protocol 5): a message the node's stack received
// for an attached socket goes to its process at once, as the peer sent it (MSG with M_WIRE: the
// RDS header as received and the payload), and the process parses it; one that finds the
// process's window full waits in the node and comes later as a plain MSG; a version 4 process
// gets plain MSG frames throughout. Addresses 127.154.x.
const { SOL_SOCKET, SO_RCVBUF, MSG_TRUNC, RDS_HEADER_SIZE } = constants;
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const serve = () => serveNode(cleanup, 'rds-cutrx-');

async function peerSocket(address: string, port = 9000): Promise<RdsSocket> {
  const s = await peerSocketOf(cleanup, address, port);
  s.setsockopt(SOL_SOCKET, constants.SO_SNDBUF, 8 << 20);
  return s;
}

/** A client of protocol version `v` speaking by hand, socket 1 bound to address:port with SO_RCVBUF `rcvbuf`; it records its MSG frames. */
async function rawReceiver(path: string, v: number, address: string, port: number, rcvbuf: number) {
  const c: Socket = connect(path);
  await new Promise<void>((res, rej) => {
    c.once('connect', () => res());
    c.once('error', rej);
  });
  c.on('error', () => {});
  cleanup.push(() => c.destroy());
  const parser = new FrameParser();
  const resps = new Map<number, Record<string, unknown>>();
  const msgs: Frame[] = [];
  let closed = false;
  c.on('close', () => (closed = true));
  c.on('data', (d: Buffer) => {
    for (const f of parser.push(d)) {
      if (f.type === N_RESP) resps.set(f.id, f.meta);
      // The frame's buffer may be a socket read shared with the next frames: keep a copy.
      if (f.type === N_MSG) msgs.push(copyFrame(f));
    }
  });
  const send = (parts: Buffer[]) => {
    for (const p of parts) c.write(p);
  };
  const ask = async (id: number, meta: object) => {
    send(encodeFrame(C_REQ, 1, id, meta));
    await until(() => resps.has(id) || closed, `response ${id}`);
    expect(resps.get(id)).toMatchObject({ ok: true });
  };
  send(encodeFrame(C_HELLO, 0, 0, { v, pid: 1 }));
  send(encodeFrame(C_REQ, 1, 1, { op: 'open' }));
  await ask(2, { op: 'setsockopt', level: SOL_SOCKET, name: SO_RCVBUF, value: rcvbuf });
  await ask(3, { op: 'bind', address, port });
  return { msgs, credit: (bytes: number, n: number) => send(encodeCount(C_CREDIT, 1, bytes, n)), closed: () => closed };
}

function copyFrame(f: Frame): Frame {
  const raw = Buffer.from(f.raw.subarray(f.metaStart, f.metaEnd + f.data.length));
  const metaLen = f.metaEnd - f.metaStart;
  return {
    type: f.type,
    sock: f.sock,
    raw,
    metaStart: 0,
    metaEnd: metaLen,
    data: raw.subarray(metaLen),
  } as unknown as Frame;
}

/** The M_WIRE bit of a MSG frame's meta (u8 alen, address, u16 port, u8 bits). */
function isWire(f: Frame): boolean {
  const bits = f.raw[f.metaStart + 1 + f.raw[f.metaStart]! + 2]!;
  return (bits & 16) !== 0;
}

const SIZES = [0, 1, 100, 1024, 16336, 16337, 20000, 65536, 1 << 20];

describe('host node cut-through receive (protocol 5)', () => {
  it('an attached socket receives every size (0 B to 1 MiB) intact, in order, from its port; MSG_TRUNC on a short buffer', async () => {
    const { path, node } = await serve();
    const stack = await RdsStack.attach(path);
    cleanup.push(() => stack.close());
    const rx = new RdsSocket({ stack });
    await rx.bind({ address: '127.154.1.1', port: 5000 });
    rx.setsockopt(SOL_SOCKET, SO_RCVBUF, 8 << 20);
    const peer = await peerSocket('127.154.1.2');
    const msgs = SIZES.map((n, i) => Buffer.alloc(n, i + 1));
    for (const m of msgs) await peer.send(m, rx.address(), { timeout: 10000 });
    const paths = new Map<number, number>();
    for (const m of msgs) {
      const got = await rx.recv({ timeout: 10000 });
      expect([got.address, got.port, got.data.length]).toEqual(['127.154.1.2', 9000, m.length]);
      expect(Buffer.compare(got.data, m)).toBe(0);
      paths.set(got.path!, (paths.get(got.path!) ?? 0) + 1);
    }
    // Each message says which path carried it (RdsMessage.path): one the sender's stack sent on
    // (its counts include the handshake's frames, so they are an upper bound).
    const sent = peer.stack.connections().find((c) => c.transport === 'tcp')!.paths;
    for (const [index, n] of paths) expect(n).toBeLessThanOrEqual(sent[index]!.sentMessages);
    expect([...paths.values()].reduce((a, b) => a + b, 0)).toBe(msgs.length);
    // A buffer shorter than the message: cut, MSG_TRUNC in its flags; asked, the full length.
    await peer.send(Buffer.alloc(3000, 7), rx.address(), { timeout: 10000 });
    const cut = await rx.recv({ buffer: new Uint8Array(100), flags: MSG_TRUNC, timeout: 10000 });
    expect(cut).toMatchObject({ flags: MSG_TRUNC, length: 3000 });
    expect(cut.data.equals(Buffer.alloc(100, 7))).toBe(true);
    expect(node.counters).toMatchObject({ malformed: 0, dropped: 0 });
  });

  it('a protocol 5 client gets each message as the peer sent it (RDS header + payload, M_WIRE), parsed to the same message', async () => {
    const { path } = await serve();
    const raw = await rawReceiver(path, PROTOCOL_VERSION, '127.154.2.1', 5000, 8 << 20);
    const peer = await peerSocket('127.154.2.2');
    const msgs = SIZES.map((n, i) => Buffer.alloc(n, i + 1));
    for (const m of msgs) await peer.send(m, { address: '127.154.2.1', port: 5000 }, { timeout: 10000 });
    await until(() => raw.msgs.length === msgs.length, 'every message at the raw client', 10000);
    msgs.forEach((m, i) => {
      const f = raw.msgs[i]!;
      expect(isWire(f)).toBe(true);
      // The data is the header as received, then the payload.
      expect(f.data.length).toBe(RDS_HEADER_SIZE + m.length);
      expect([f.data.readUInt32BE(OFF_LEN), f.data.readUInt16BE(OFF_SPORT), f.data.readUInt16BE(OFF_DPORT)]).toEqual([
        m.length,
        9000,
        5000,
      ]);
      const got = readMsg(f.raw, f.metaStart, f.metaEnd, f.data);
      expect([got.address, got.port]).toEqual(['127.154.2.2', 9000]);
      expect(Buffer.compare(got.data, m)).toBe(0);
    });
  });

  it('a message that finds the window full waits in the node and comes, in order, as a plain MSG once the client credits', async () => {
    const { path, stack } = await serve();
    // SO_RCVBUF's smallest value: the first message fills the window.
    const raw = await rawReceiver(path, PROTOCOL_VERSION, '127.154.3.1', 5000, 1);
    const peer = await peerSocket('127.154.3.2');
    const msgs = [0, 1, 2, 3].map((i) => Buffer.alloc(3000, i + 1));
    for (const m of msgs) await peer.send(m, { address: '127.154.3.1', port: 5000 }, { timeout: 10000 });
    // All four are in the node before the client credits anything: three of them wait there.
    await until(() => stack.counters.get('recv_delivered') === msgs.length, 'the node to have all four', 10000);
    await until(() => raw.msgs.length >= 1, 'the first message', 10000);
    expect(raw.msgs.length).toBe(1);
    let seen = 0;
    for (let round = 0; round < msgs.length && raw.msgs.length < msgs.length; round++) {
      const batch = raw.msgs.slice(seen);
      seen = raw.msgs.length;
      raw.credit(
        batch.reduce((n, f) => n + readMsg(f.raw, f.metaStart, f.metaEnd, f.data).data.length, 0),
        batch.length,
      );
      await until(() => raw.msgs.length > seen, `message ${seen + 1} after the credit`, 10000);
    }
    expect(raw.msgs.length).toBe(msgs.length);
    expect(isWire(raw.msgs[0]!)).toBe(true);
    expect(raw.msgs.slice(1).every((f) => !isWire(f))).toBe(true);
    raw.msgs.forEach((f, i) => {
      const got = readMsg(f.raw, f.metaStart, f.metaEnd, f.data);
      expect(got.port).toBe(9000);
      expect(Buffer.compare(got.data, msgs[i]!)).toBe(0);
      // Queued in the node or not, the path that carried it comes along.
      expect(got.path).toBeTypeOf('number');
    });
  });

  it('a version 4 client is still served: plain MSG frames (payload only, port in the meta)', async () => {
    const { path } = await serve();
    const raw = await rawReceiver(path, 4, '127.154.4.1', 5000, 8 << 20);
    const peer = await peerSocket('127.154.4.2');
    const msgs = [0, 1024, 65536].map((n, i) => Buffer.alloc(n, i + 1));
    for (const m of msgs) await peer.send(m, { address: '127.154.4.1', port: 5000 }, { timeout: 10000 });
    await until(() => raw.msgs.length === msgs.length, 'every message at the version 4 client', 10000);
    msgs.forEach((m, i) => {
      const f = raw.msgs[i]!;
      expect(isWire(f)).toBe(false);
      expect(Buffer.compare(f.data, m)).toBe(0);
      expect(readMsg(f.raw, f.metaStart, f.metaEnd, f.data)).toMatchObject({ address: '127.154.4.2', port: 9000 });
    });
    expect(raw.closed()).toBe(false);
  });
});
