import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants } from '../lib/index.js';
import { C_HELLO, C_REQ, encodeFrame, FrameParser, N_RESP, N_WELCOME, PROTOCOL_VERSION } from '../lib/host/protocol.js';
import { encodeSend, encodeSendWire } from '../lib/host/hot-frames.js';
import { OFF_DPORT, OFF_EXTHDR, OFF_FLAGS, OFF_LEN, OFF_SEQUENCE, OFF_SPORT, readU64 } from '../lib/wire/header.js';
import { TEST_TCP_PORT, until } from './helpers.js';
import { peerSocket as peerSocketOf, serveNode } from './host-kit.js';

// The host node's cut-through send (issue 36, protocol 4): an attached client writes the message
// in the RDS wire format into its SEND frame (F_WIRE); the node checks that header, stamps the
// sequence and queues those bytes. A client writing a header the node would not have written is
// dropped and counted, and nothing of it reaches a peer; a version 3 client (payload-only SEND) is
// served as before. Addresses 127.153.x.
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const serve = () => serveNode(cleanup, 'rds-cut-');
const peerSocket = (address: string, port = 9000) => peerSocketOf(cleanup, address, port);

/** A client speaking the control protocol by hand, with protocol version `v`. */
async function rawClient(path: string, v: number) {
  const c: Socket = connect(path);
  await new Promise<void>((res, rej) => {
    c.once('connect', () => res());
    c.once('error', rej);
  });
  c.on('error', () => {});
  cleanup.push(() => c.destroy());
  const parser = new FrameParser();
  const resps = new Map<number, Record<string, unknown>>();
  const raw = {
    closed: false,
    welcome: null as Record<string, unknown> | null,
    send: (parts: Buffer[]) => {
      if (!raw.closed) for (const p of parts) c.write(p);
    },
    response: async (id: number) => {
      await until(() => resps.has(id) || raw.closed, `response ${id}`);
      return resps.get(id) ?? {};
    },
  };
  c.on('close', () => (raw.closed = true));
  c.on('data', (d: Buffer) => {
    for (const f of parser.push(d)) {
      if (f.type === N_WELCOME) raw.welcome = f.meta;
      if (f.type === N_RESP) resps.set(f.id, f.meta);
    }
  });
  raw.send(encodeFrame(C_HELLO, 0, 0, { v, pid: 1 }));
  return raw;
}

/** A raw client of version `v` with socket 1 bound to address:port. */
async function boundRaw(path: string, v: number, address: string, port: number) {
  const raw = await rawClient(path, v);
  raw.send(encodeFrame(C_REQ, 1, 1, { op: 'open' }));
  raw.send(encodeFrame(C_REQ, 1, 2, { op: 'bind', address, port }));
  expect(await raw.response(2)).toMatchObject({ ok: true });
  return raw;
}

/** A SEND frame with F_WIRE from port 5001 to `to`, its RDS header changed by `spoil`. */
function spoiled(to: { address: string; port: number }, payload: Buffer, spoil: (h: Buffer) => void): Buffer[] {
  const parts = encodeSendWire(1, 0, to.address, to.port, 5001, 0, false, undefined, payload);
  const frame = Buffer.concat(parts);
  // The data (header, then payload) ends the frame.
  spoil(frame.subarray(frame.length - payload.length - constants.RDS_HEADER_SIZE));
  return [frame];
}

describe('host node cut-through send (protocol 4)', () => {
  it('an attached socket sends through the node (large messages in the wire format, small ones as payload): every size arrives intact, in order, from its port', async () => {
    const { path, node } = await serve();
    const stack = await RdsStack.attach(path);
    cleanup.push(() => stack.close());
    const a = new RdsSocket({ stack });
    await a.bind({ address: '127.153.1.1', port: 5000 });
    a.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 4 << 20);
    const peer = await peerSocket('127.153.1.2');
    peer.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 8 << 20);
    // Small sizes go as payload (the node copies them into its slab either way), large ones in the
    // wire format, kept by the node by reference; 16336 and 16337 bytes straddle the boundary.
    const sizes = [0, 1, 100, 1024, 3000, 16336, 16337, 20000, 65536, 1 << 20];
    const msgs = sizes.map((n, i) => Buffer.alloc(n, i + 1));
    for (const m of msgs) await a.send(m, peer.address(), { timeout: 10000 });
    for (const m of msgs) {
      const got = await peer.recv({ timeout: 10000 });
      expect(got.port).toBe(5000);
      expect(got.address).toBe('127.153.1.1');
      expect(Buffer.compare(got.data, m)).toBe(0);
    }
    expect(node.counters).toMatchObject({ malformed: 0, dropped: 0, sendFailed: 0 });
  });

  it("the node queues an attached process's large message as the bytes it read (by reference), a small one in its slab", async () => {
    const { path, stack: nodeStack } = await serve();
    const stack = await RdsStack.attach(path);
    cleanup.push(() => stack.close());
    const a = new RdsSocket({ stack });
    await a.bind({ address: '127.153.6.1', port: 5000 });
    // Nobody at 127.153.6.9: both stay queued in the node, where the test reads them.
    const to = { address: '127.153.6.9', port: 9000 };
    await a.send(Buffer.alloc(65536, 5), to);
    await a.send(Buffer.alloc(1024, 6), to);
    const conn = nodeStack.connFor('127.153.6.1', to.address, nodeStack.transports.get('tcp')!);
    const queued = () => conn.paths.flatMap((p) => (p === undefined ? [] : [...p.tx.sendQueue, ...p.tx.retrans]));
    await until(() => queued().filter((m) => m.sport === 5000).length === 2, 'both messages queued in the node');
    const [big, small] = queued().filter((m) => m.sport === 5000);
    // The node read the large SEND into its stack's wire memory and queued those bytes where they
    // lay (a view after the control frame's header, not a copy); that memory goes back to the
    // slab once the message is acknowledged (host-wire-memory.test.ts).
    expect([big!.len, big!.recycles]).toEqual([65536, true]);
    expect(big!.wire.byteOffset).toBeGreaterThan(0);
    expect(nodeStack.wireSlab.owns(big!.wire)).toBe(true);
    expect(big!.wire.readUInt32BE(OFF_LEN)).toBe(65536);
    expect(big!.wire[constants.RDS_HEADER_SIZE]).toBe(5);
    expect(small!.len).toBe(1024);
    expect(small!.wire.buffer.byteLength).toBe(128 * 1024); // a slab
  });

  const bad: [string, (h: Buffer) => void][] = [
    ['a length past its payload', (h) => h.writeUInt32BE(h.readUInt32BE(OFF_LEN) + 1, OFF_LEN)],
    ['a length short of its payload', (h) => h.writeUInt32BE(h.readUInt32BE(OFF_LEN) - 1, OFF_LEN)],
    ['a source port not its bound one', (h) => h.writeUInt16BE(5002, OFF_SPORT)],
    ['a destination port not the frame’s', (h) => h.writeUInt16BE(9001, OFF_DPORT)],
    ['a sequence of its own', (h) => h.writeUInt32BE(7, OFF_SEQUENCE + 4)],
    ['flags (RETRANSMITTED, CONG_BITMAP ...)', (h) => (h[OFF_FLAGS] = 0x01)],
    ['an extension header', (h) => (h[OFF_EXTHDR] = constants.RDSSOCK_EXTHDR_MOVED)],
  ];
  it.each(bad)(
    'a client whose header has %s is dropped and counted; nothing reaches the peer; others go on',
    async (_, spoil) => {
      const { path, node } = await serve();
      const goodStack = await RdsStack.attach(path);
      cleanup.push(() => goodStack.close());
      const good = new RdsSocket({ stack: goodStack });
      await good.bind({ address: '127.153.2.1', port: 5000 });
      const peer = await peerSocket('127.153.2.2');
      const raw = await boundRaw(path, PROTOCOL_VERSION, '127.153.2.1', 5001);
      const to = peer.address();
      // A well-formed one first: the node takes the client's bytes.
      raw.send(encodeSendWire(1, 0, to.address, to.port, 5001, 0, false, undefined, Buffer.from('fine')));
      const first = await peer.recv({ timeout: 5000 });
      expect([first.data.toString(), first.port]).toEqual(['fine', 5001]);
      raw.send(spoiled(to, Buffer.from('hostile payload'), spoil));
      await until(() => raw.closed, 'the node to drop the client', 10000);
      expect(node.counters.malformed).toBe(1);
      // The good client's traffic goes on, both ways, and the peer never got the hostile message.
      good.sendmsg(Buffer.from('still here'), to);
      const next = await peer.recv({ timeout: 5000 });
      expect([next.data.toString(), next.port]).toEqual(['still here', 5000]);
      peer.sendmsg(Buffer.from('back'), good.address());
      expect((await good.recv({ timeout: 5000 })).data.toString()).toBe('back');
      expect(peer.recvmsg()).toBeNull();
    },
  );

  it('a SEND whose data is shorter than an RDS header drops its client', async () => {
    const { path, node } = await serve();
    const raw = await boundRaw(path, PROTOCOL_VERSION, '127.153.3.1', 5001);
    const parts = encodeSendWire(1, 0, '127.153.3.2', 9000, 5001, 0, false, undefined, Buffer.alloc(0));
    const frame = Buffer.concat(parts);
    // Cut the header to 40 bytes, the frame's length prefix with it.
    const cut = frame.subarray(0, frame.length - 8);
    cut.writeUInt32BE(cut.length - 4, 0);
    raw.send([cut]);
    await until(() => raw.closed, 'the node to drop the client', 10000);
    expect(node.counters.malformed).toBe(1);
  });

  it('a version 3 client (SEND carrying the payload alone) is served as before; a version 2 one is refused, saying why', async () => {
    const { path, node } = await serve();
    const peer = await peerSocket('127.153.4.2');
    const old = await boundRaw(path, 3, '127.153.4.1', 5001);
    expect(old.welcome).toMatchObject({ v: PROTOCOL_VERSION });
    old.send(encodeSend(1, 0, '127.153.4.2', 9000, 0, false, undefined, Buffer.from('from an old client')));
    const m = await peer.recv({ timeout: 5000 });
    expect([m.data.toString(), m.port]).toEqual(['from an old client', 5001]);
    const older = await rawClient(path, 2);
    await until(() => older.closed, 'the node to refuse version 2', 10000);
    expect(older.welcome).toMatchObject({
      err: { code: 'EPROTO', message: expect.stringMatching(/version 2 is not one this node serves \(3 to 5\)/) },
    });
    expect(node.counters.malformed).toBe(1);
    expect(old.closed).toBe(false);
  });
});

describe('PathSend.queueWire', () => {
  it('keeps a large frame that is its buffer by reference, copies small ones and views into a larger buffer into the slab; stamps only the sequence', async () => {
    const stack = new RdsStack({ tcpPort: TEST_TCP_PORT });
    cleanup.push(() => stack.close());
    const s = new RdsSocket({ stack });
    await s.bind({ address: '127.153.5.1', port: 5000 });
    s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 4 << 20);
    // Nobody at 127.153.5.2: the messages stay queued, where the test reads them.
    const to = { address: '127.153.5.2', port: 9000 };
    const own = Buffer.concat(
      encodeSendWire(1, 0, to.address, to.port, 5000, 0, false, undefined, Buffer.alloc(70000, 7)),
    );
    const whole = Buffer.from(own.subarray(own.length - 70000 - constants.RDS_HEADER_SIZE)); // a buffer of its own
    const batch = Buffer.alloc(8192);
    const small = Buffer.concat(
      encodeSendWire(1, 0, to.address, to.port, 5000, 0, false, undefined, Buffer.alloc(100, 3)),
    );
    const view = batch.subarray(1000, 1000 + 148);
    small.copy(view, 0, small.length - 148);
    const before = Buffer.from(view);
    // A small frame of its own is copied too: small frames lie back to back in the wire slab.
    const ownSmall = Buffer.from(before);
    s.enqueue(whole.subarray(constants.RDS_HEADER_SIZE), to, undefined, false, whole);
    s.enqueue(view.subarray(constants.RDS_HEADER_SIZE), to, undefined, false, view);
    s.enqueue(ownSmall.subarray(constants.RDS_HEADER_SIZE), to, undefined, false, ownSmall);
    const conn = stack.connFor('127.153.5.1', to.address, stack.transports.get('tcp')!);
    const msgs = conn.paths.flatMap((p) => (p === undefined ? [] : [...p.tx.sendQueue, ...p.tx.retrans]));
    const [m1, m2, m3] = msgs.filter((m) => m.sport === 5000);
    expect(m1!.wire).toBe(whole);
    expect(m2!.wire.buffer).not.toBe(batch.buffer);
    expect(m3!.wire.buffer).not.toBe(ownSmall.buffer);
    // The two small ones lie back to back in the slab.
    expect(m3!.wire.buffer).toBe(m2!.wire.buffer);
    expect(m3!.wire.byteOffset).toBe(m2!.wire.byteOffset + m2!.wire.length);
    expect(view.equals(before)).toBe(true);
    for (const m of [m1!, m2!, m3!]) {
      expect(readU64(m.wire, OFF_SEQUENCE)).toBe(m.seq);
      expect(m.seq).toBeGreaterThan(0);
    }
    // Everything past the sequence is what the client wrote.
    expect(m2!.wire.subarray(8).equals(before.subarray(8))).toBe(true);
    expect(m1!.wire.readUInt32BE(OFF_LEN)).toBe(70000);
    expect(m1!.len).toBe(70000);
    expect(m2!.len).toBe(100);
  });
});
