import { describe, expect, it } from 'vitest';
import { RDS_HEADER_SIZE } from '../lib/constants.js';
import { RDS_CTR } from '../lib/core/stats.js';
import { IbPath, IbShared, SLOT_SIZE } from '../lib/transports/ib-path.js';
import { IbReceiver } from '../lib/transports/ib-recv.js';
import { IbSender, isHandshakeFrame } from '../lib/transports/ib-send.js';
import { encodeHeader, headerChecksum, OFF_CSUM } from '../lib/wire/header.js';
import { parseExtensions } from '../lib/wire/extensions.js';

// The IB transport's send and receive halves against a fake endpoint and path: what reaches the
// ring and the core, without an RDMA device (the device tests are in test/ib/).
const SEND_SLOTS = 4;
const RECV_SLOTS = 8;

function harness(peerRdsSocket: boolean) {
  const delivered: { header: Buffer; payload: Buffer }[] = [];
  const counters = new Map<number, number>();
  const posted: number[][] = [];
  const drops: string[] = [];
  const host = {
    counters: { add: (c: number) => counters.set(c, (counters.get(c) ?? 0) + 1) },
    recvIncoming: (_cp: unknown, header: Buffer, payload: Buffer) => delivered.push({ header, payload }),
    reportProtocolError: () => {},
  };
  const ep = {
    postSend: (_id: number, wrs: Int32Array) => {
      posted.push([...wrs]);
      return 0;
    },
    postRecv: () => 0,
  };
  const shared = new IbShared(SEND_SLOTS);
  shared.attach(host as never);
  shared.setEndpoint(ep as never);
  const tp = new IbPath(1, false, { advertise: () => 0, posted: () => {}, grant: () => {} } as never);
  tp.markEstablished();
  tp.ringReady(Buffer.alloc((SEND_SLOTS + 1 + RECV_SLOTS) * SLOT_SIZE), SEND_SLOTS);
  tp.flowControlNegotiated(false);
  tp.versionNegotiated(0x0301);
  tp.peerMarked(peerRdsSocket);
  const slot = { current: tp, is: (t: IbPath) => t === tp };
  const cp = {
    carrier: () => slot,
    heartbeat: { noteRx: () => {} },
    tx: { ackThrough: () => {}, kick: () => {} },
    drop: (why: string) => drops.push(why),
  };
  const sender = new IbSender(shared);
  const receiver = new IbReceiver(shared, sender);
  return { tp, cp: cp as never, sender, receiver, delivered, counters, posted, drops };
}

/** Puts one fragment (checksummed header copy + bytes) in receive slot `i` and completes it. */
function arrive(h: ReturnType<typeof harness>, i: number, header: Buffer, frag: Buffer): void {
  const slot = SEND_SLOTS + 1 + i;
  const base = slot * SLOT_SIZE;
  header.copy(h.tp.ring!, base);
  h.tp.ring!.writeUInt16BE(0, base + OFF_CSUM);
  h.tp.ring!.writeUInt16BE(headerChecksum(h.tp.ring!, base), base + OFF_CSUM);
  frag.copy(h.tp.ring!, base + RDS_HEADER_SIZE);
  h.receiver.onCompletions(h.cp, 1, Int32Array.of(slot, 0, RDS_HEADER_SIZE + frag.length));
}

describe('IB receive: what 7.x kernels add (RDMA_BYTES extension, h_flags 0x20)', () => {
  it('a message of 3 fragments with flag 0x20 and an RDMA_BYTES extension is reassembled and handed up as is', () => {
    const h = harness(false);
    const len = 4096 * 2 + 100;
    const payload = Buffer.alloc(len);
    for (let i = 0; i < len; i++) payload[i] = (i * 7) & 0xff;
    // RDMA_BYTES: type 4, be32 byte count, u8 flags (0x01 write), 3 pad bytes; then NONE.
    const exthdr = Buffer.from([4, 0, 0, 0x10, 0, 0x01, 0, 0, 0]);
    const header = Buffer.alloc(RDS_HEADER_SIZE);
    encodeHeader(header, 0, { sequence: 9, len, sport: 5000, dport: 6000, flags: 0x20, exthdr });
    for (let f = 0; f < 3; f++) arrive(h, f, header, payload.subarray(f * 4096, Math.min(len, (f + 1) * 4096)));
    expect(h.drops).toEqual([]);
    expect(h.delivered).toHaveLength(1);
    const got = h.delivered[0]!;
    expect(got.payload.equals(payload)).toBe(true);
    // The extension walks as the kernel's table says (8 bytes), so what follows it is still read.
    const exts = parseExtensions(got.header.subarray(32));
    expect(exts.map((e) => [e.type, [...e.data]])).toEqual([[4, [...exthdr.subarray(1)]]]);
    expect(got.header[24]).toBe(0x20); // h_flags as sent
    expect(got.header.readUInt32BE(16)).toBe(len);
  });

  it('RDMA_BYTES followed by another extension: both parsed with the 8-byte length', () => {
    const area = Buffer.from([4, 0, 0, 1, 0, 2, 0, 0, 0, 5, 0, 1, 0, 0, 0, 0]);
    expect(parseExtensions(area).map((e) => [e.type, e.data.length])).toEqual([
      [4, 8],
      [5, 2],
    ]);
  });
});

describe('IB completion figures (RTRS wc_completion: completions per wake-up)', () => {
  it('counts each wake-up of the completion channel and the completions it brought; reset starts over', () => {
    const h = harness(true);
    const header = Buffer.alloc(RDS_HEADER_SIZE);
    encodeHeader(header, 0, { sequence: 1, len: 10, sport: 5000, dport: 6000 });
    arrive(h, 0, header, Buffer.alloc(10));
    // One wake-up bringing three send completions (slots 0..2).
    h.receiver.onCompletions(h.cp, 1, Int32Array.of(0, 0, 0, 1, 0, 0, 2, 0, 0));
    expect(h.tp.completionFigures).toEqual({ wakeups: 2, completions: 4 });
    h.tp.resetCompletionFigures();
    expect(h.tp.completionFigures).toEqual({ wakeups: 0, completions: 0 });
  });
});

describe('IB send: the multipath probe never goes to a kernel', () => {
  const probe = { sport: 1, dport: 0, wire: Buffer.alloc(RDS_HEADER_SIZE), len: 0, xmitHold() {}, xmitDone() {} };

  it('recognises the kernel handshake ports (RDS_HS_PROBE)', () => {
    expect([isHandshakeFrame(1, 0), isHandshakeFrame(0, 1), isHandshakeFrame(1, 1), isHandshakeFrame(2, 0)]).toEqual([
      true,
      true,
      false,
      false,
    ]);
  });

  it('to a kernel (no rds-socket mark): accepted as sent, nothing posted, counted', () => {
    const h = harness(false);
    expect(h.sender.xmit(h.cp, probe as never)).toBe(true);
    expect(h.posted).toEqual([]);
    expect(h.counters.get(RDS_CTR.ib_probe_withheld)).toBe(1);
  });

  it('to an rds-socket peer: posted like any frame', () => {
    const h = harness(true);
    expect(h.sender.xmit(h.cp, probe as never)).toBe(true);
    expect(h.posted).toHaveLength(1);
    expect(h.posted[0]![1]).toBe(RDS_HEADER_SIZE);
    expect(h.counters.get(RDS_CTR.ib_probe_withheld)).toBeUndefined();
  });

  it('a kernel still gets ordinary messages', () => {
    const h = harness(false);
    const msg = { ...probe, sport: 4000, dport: 5000 };
    expect(h.sender.xmit(h.cp, msg as never)).toBe(true);
    expect(h.posted).toHaveLength(1);
  });
});
