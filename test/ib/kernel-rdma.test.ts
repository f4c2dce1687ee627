import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RdsSocket, RdsStack, constants, type RdsMessage } from '../../lib/index.js';
import { processMrs, until } from '../helpers.js';
import { KCTL_SET, KERNEL_ADDRS, LOCAL_ADDRS, kernel, kernelFile, kernelLogClean } from './kernel-ctl.js';

// RDS's RDMA operations between rds-socket and a program using the kernel's RDMA API
// (test/ib/guest/krdma.py: RDS_CMSG_RDMA_MAP, RDS_CMSG_RDMA_ARGS, RDS_CMSG_RDMA_DEST,
// RDS_CMSG_RDMA_STATUS, RDS_FREE_MR through python's socket module) in the kernel guest of
// test/ib/run.sh. Both directions: the kernel READs and WRITEs memory rds-socket exposes, and
// rds-socket READs and WRITEs memory the kernel exposes; both address orders.
const {
  RDS_RDMA_READWRITE,
  RDS_RDMA_USE_ONCE,
  RDS_RDMA_SUCCESS,
  RDS_RDMA_REMOTE_ERROR,
  RDS_RDMA_DROPPED,
  RDS_RDMA_OTHER_ERROR,
} = constants;
const [K1, K2] = KERNEL_ADDRS;
const [L1, L2] = LOCAL_ADDRS;
const KPORT = 7500;

/** krdma.py's pattern: byte k of the region is (k * 7 + seed) & 0xff. */
function pattern(size: number, seed: number): Buffer {
  const b = Buffer.alloc(size);
  for (let k = 0; k < size; k++) b[k] = (k * 7 + seed) & 0xff;
  return b;
}

let stack: RdsStack;
let closed = false;
beforeAll(() => {
  expect(KCTL_SET, 'RDS_IB_KCTL (host:port of kctl.py) must be set; run through npm run test:ib').toBe(true);
  stack = new RdsStack();
  stack.on('error', () => {});
  // Every drop of a connection with its reason, to set next to the kernel's log when a scenario fails.
  stack.on('drop', (ev) => console.error(`drop ${JSON.stringify(ev)}`));
});
afterAll(async () => {
  if (!closed) await stack?.close();
});

/** One krdma.py in the kernel guest at `ka`, and our socket at `la` talking to it. */
class KernelRdma {
  sock!: RdsSocket;
  /** Messages from the kernel that were not answers (its RDMA ops' messages), in order. */
  readonly others: string[] = [];
  private run!: Promise<{ code: number; out: string }>;
  constructor(
    readonly ka: string,
    readonly la: string,
    readonly port: number,
  ) {}

  async start(): Promise<void> {
    await kernel('rm -f /rdsinst/ready.krdma', 10);
    this.run = kernel(`python3 test/ib/guest/krdma.py ${this.ka} ${KPORT}`, 400);
    await kernelFile('ready.krdma');
    this.sock = new RdsSocket({ stack, transport: 'ib' });
    await this.sock.bind({ address: this.la, port: this.port });
    this.sock.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 8 << 20);
    this.sock.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 8 << 20);
  }

  get to(): { address: string; port: number } {
    return { address: this.ka, port: KPORT };
  }

  /** The next message or status (60 s bound). */
  next(): Promise<RdsMessage> {
    return this.sock.recv({ timeout: 60_000 });
  }

  /** Sends a command and waits for krdma's answer: its JSON meta, its bytes, the message. */
  async ask(
    cmd: string,
    opts: Parameters<RdsSocket['sendmsg']>[2] = {},
  ): Promise<{ meta: Record<string, unknown>; data: Buffer; msg: RdsMessage }> {
    this.sock.sendmsg(Buffer.from(cmd), this.to, opts);
    for (;;) {
      const msg = await this.next();
      expect(msg.rdmaStatus, `a status nobody asked for while waiting for the answer to ${cmd}`).toBeUndefined();
      const nl = msg.data.indexOf(10);
      if (msg.data[0] === 0x7b && nl > 0) {
        return { meta: JSON.parse(msg.data.subarray(0, nl).toString()), data: msg.data.subarray(nl + 1), msg };
      }
      this.others.push(msg.data.toString());
    }
  }

  /** Our status for `token`, skipping nothing: it must be the next thing recvmsg returns. */
  async status(): Promise<{ token: bigint; status: number }> {
    const m = await this.next();
    expect(m.rdmaStatus, `expected an RDMA status, got a message of ${m.data.length} bytes`).toBeDefined();
    return m.rdmaStatus!;
  }

  /** What to read when a scenario failed: krdma's log so far, the kernel's log, both sides' state. */
  async diagnose(): Promise<string> {
    const r = await kernel(
      `tail -n 20 /rdsinst/krdma-${this.ka}.log; dmesg | tail -n 25; rdma resource show qp | grep -v " qpn 1 "`,
      20,
    );
    const ours = stack.connections().filter((c) => c.peerAddress === this.ka);
    return `kernel guest:\n${r.out}\nour connections to ${this.ka}: ${JSON.stringify(ours.map((c) => c.paths.map((p) => p.state)))}`;
  }

  /** Stops krdma.py; returns its log (one JSON line per command and answer). */
  async stop(): Promise<string> {
    const bye = await this.ask('bye');
    expect(bye.meta).toEqual({ bye: true });
    const r = await this.run;
    this.sock.close();
    return r.out;
  }
}

describe.each([
  { name: 'kernel on the smaller address', ka: K1, la: L1, port: 6500, viaMap: false },
  { name: 'rds-socket on the smaller address, our region sent with rdmaMap', ka: K2, la: L2, port: 6510, viaMap: true },
])('RDMA between rds-socket and the kernel RDMA API, $name', ({ ka, la, port, viaMap }) => {
  const k = new KernelRdma(ka, la, port);
  beforeAll(() => k.start());
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') console.error(await k.diagnose());
  });
  afterAll(async () => {
    console.error(await k.stop());
  });

  it('the kernel READs and WRITEs a region rds-socket exposes (getMr + rdmaDest here, RDMA_ARGS there)', async () => {
    // Not page-aligned, so the cookie's offset part is not 0 and both sides must agree on it.
    const mem = Buffer.alloc((256 << 10) + 100).subarray(100);
    pattern(mem.length, 3).copy(mem);
    // Registered with getMr() and named by rdmaDest, or registered and named in one call (rdmaMap,
    // RDS_CMSG_RDMA_MAP): either way the kernel finds the cookie as RDS_CMSG_RDMA_DEST.
    const map = { buffer: mem, flags: RDS_RDMA_READWRITE, cookie: undefined as bigint | undefined };
    const rd = viaMap
      ? await k.ask('read 1000 100000 11', { rdmaMap: map })
      : await k.ask('read 1000 100000 11', {
          rdmaDest: (map.cookie = k.sock.getMr(mem, { flags: RDS_RDMA_READWRITE })),
        });
    const cookie = map.cookie!;
    expect(cookie >> 32n).not.toBe(0n);
    expect(rd.meta).toEqual({ token: 11, status: RDS_RDMA_SUCCESS });
    expect(rd.data.equals(mem.subarray(1000, 101000))).toBe(true);
    const before = Buffer.from(mem);
    const wr = await k.ask('write 4096 65536 12 9', { rdmaDest: cookie });
    expect(wr.meta).toEqual({ token: 12, status: RDS_RDMA_SUCCESS });
    expect(mem.subarray(4096, 4096 + 65536).equals(pattern(65536, 9))).toBe(true);
    // Nothing outside the WRITE changed.
    expect(mem.subarray(0, 4096).equals(before.subarray(0, 4096))).toBe(true);
    expect(mem.subarray(4096 + 65536).equals(before.subarray(4096 + 65536))).toBe(true);
    // The kernel's op messages reached us (each carried the RDMA extension naming our rkey).
    expect(k.others).toEqual(['rdma-read 11', 'rdma-write 12']);
    k.others.length = 0;
    k.sock.freeMr(cookie);
  });

  it('rds-socket READs and WRITEs a region the kernel registers with RDS_CMSG_RDMA_MAP', async () => {
    const mapped = await k.ask(`map ${256 << 10} ${RDS_RDMA_READWRITE} 5`);
    expect(mapped.meta).toEqual({ mapping: 256 << 10 });
    const cookie = mapped.msg.rdmaDest;
    expect(cookie, 'the RDMA_MAP answer carries the RDMA_DEST extension').toBeTypeOf('bigint');
    const got = Buffer.alloc(100_000);
    k.sock.sendmsg(Buffer.from('our-read'), k.to, {
      rdma: { cookie: cookie!, remoteOffset: 777, local: [got], write: false, notify: true, token: 21n },
    });
    expect(await k.status()).toEqual({ token: 21n, status: RDS_RDMA_SUCCESS });
    expect(got.equals(pattern(256 << 10, 5).subarray(777, 777 + 100_000))).toBe(true);
    // Two local buffers in one WRITE.
    const src = pattern(50_000, 13);
    k.sock.sendmsg(Buffer.from('our-write'), k.to, {
      rdma: {
        cookie: cookie!,
        remoteOffset: 8192,
        local: [src.subarray(0, 20_000), src.subarray(20_000)],
        write: true,
        notify: true,
        token: 22n,
      },
    });
    expect(await k.status()).toEqual({ token: 22n, status: RDS_RDMA_SUCCESS });
    const dump = await k.ask(`dump ${cookie} 8192 50000`);
    expect(dump.meta).toEqual({ dump: true });
    expect(dump.data.equals(src)).toBe(true);
    const around = await k.ask(`dump ${cookie} 0 8192`);
    expect(around.data.equals(pattern(8192, 5))).toBe(true);
    // The kernel got both messages, after their ops.
    const gotten = await k.ask('gotten');
    expect(gotten.meta).toEqual({ got: ['our-read', 'our-write'] });
    const freed = await k.ask(`free ${cookie} 0`);
    expect(freed.meta).toEqual({ rc: 0 });
  });
});

describe('RDMA between rds-socket and the kernel: use-once, teardown, cleanup', () => {
  const k = new KernelRdma(K1, L1, 6520);
  beforeAll(() => k.start());
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') console.error(await k.diagnose());
  });

  it('a region rds-socket exposes with RDS_RDMA_USE_ONCE: the kernel writes once, its second write gets a remote error', async () => {
    const mem = Buffer.alloc(64 << 10);
    const cookie = k.sock.getMr(mem, { flags: RDS_RDMA_READWRITE | RDS_RDMA_USE_ONCE });
    const first = await k.ask('write 0 4096 41 17', { rdmaDest: cookie });
    expect(first.meta).toEqual({ token: 41, status: RDS_RDMA_SUCCESS });
    expect(mem.subarray(0, 4096).equals(pattern(4096, 17))).toBe(true);
    // The kernel's message after its op carried the RDMA extension: our region is gone, so its
    // next WRITE is refused by our device (the kernel's queue pair then goes to error and it
    // reconnects, as it does with a kernel peer).
    expect(k.others).toEqual(['rdma-write 41']);
    k.others.length = 0;
    // The cookie goes in the command's text: we no longer hold the region, so sendmsg would refuse
    // it as rdmaDest (EINVAL), as the kernel does.
    const second = await k.ask(`write 4096 4096 42 18 ${cookie}`);
    expect(second.meta).toEqual({ token: 42, status: RDS_RDMA_REMOTE_ERROR });
    expect(mem.subarray(4096, 8192).equals(Buffer.alloc(4096))).toBe(true);
  });

  it("the connection torn down in the middle of the kernel's 1 MiB READ from us: the kernel reports it dropped, its message is not retransmitted", async () => {
    // We cut the connection once our device has sent part of the READ's responses (rxe's
    // sent_pkts counter: 1 MiB is about 1,000 packets, tens of milliseconds between two emulated
    // guests). The kernel's queue pair is flushed with the READ outstanding; its message waits
    // behind the READ (RDS_RDMA_FENCE), so it must never reach us, before the answer or after.
    const mem = pattern(1 << 20, 8);
    const cookie = k.sock.getMr(mem, { flags: RDS_RDMA_READWRITE });
    const sent = () => Number(readFileSync('/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts', 'utf8'));
    // The cut is ours but its timing is not: on a loaded machine our device may send the rest of
    // the responses before the queue pair leaves RTS. Then the kernel rightly reports success
    // (with the bytes' digest) and delivers its fenced message; that attempt checks both and the
    // scenario runs again, at most 4 times.
    let cut: { meta: Record<string, unknown> } | undefined;
    for (let attempt = 0; attempt < 4 && !cut; attempt++) {
      const token = 61 + attempt;
      const before = sent();
      const answer = k.ask(`read 0 1048576 ${token} fence`, { rdmaDest: cookie });
      const deadline = Date.now() + 20_000;
      while (sent() - before < 16) {
        expect(Date.now() < deadline, 'our device never sent the READ responses').toBe(true);
        await new Promise((r) => setImmediate(r));
      }
      const cutAt = sent() - before;
      stack.disconnectPath(k.ka, 0, k.la);
      await until(
        () => stack.connections().find((c) => c.peerAddress === k.ka)?.paths[0]?.state === 'DOWN',
        'our path down',
        20_000,
      );
      stack.reconnectPath(k.ka, 0, k.la);
      const got = await answer;
      console.error(`attempt ${attempt}: cut after ${cutAt} packets; the kernel reported ${JSON.stringify(got.meta)}`);
      expect(got.meta.token, JSON.stringify(got.meta)).toBe(token);
      if (got.meta.status === RDS_RDMA_SUCCESS) {
        // Too late: the READ was whole, so its bytes and its fenced message must be right.
        expect(got.meta.sha256).toBe(createHash('sha256').update(mem).digest('hex'));
        // Its fenced message was queued before the answer on the same connection, so it came first.
        expect(k.others).toEqual([`rdma-read ${token}`]);
        k.others.length = 0;
        continue;
      }
      cut = got;
    }
    expect(cut, 'in 4 attempts the cut never landed before the READ finished').toBeDefined();
    expect([RDS_RDMA_DROPPED, RDS_RDMA_OTHER_ERROR], JSON.stringify(cut!.meta)).toContain(cut!.meta.status);
    // Not retransmitted: the fenced message never came, and a new READ works on the new connection.
    const again = await k.ask('read 4096 4096 52', { rdmaDest: cookie });
    expect(again.meta).toEqual({ token: 52, status: RDS_RDMA_SUCCESS });
    expect(again.data.equals(mem.subarray(4096, 8192))).toBe(true);
    expect(k.others).toEqual(['rdma-read 52']);
    k.others.length = 0;
    k.sock.freeMr(cookie);
  });

  it('after close: no memory region of this process left (rdma resource show mr), the kernel log clean', async () => {
    const mem = Buffer.alloc(8192);
    k.sock.getMr(mem, { flags: RDS_RDMA_READWRITE });
    expect(processMrs()).toBeGreaterThan(0);
    const log = await k.stop();
    expect(log).toContain('"bye": true');
    // The connections' rings are registered memory too: close the node, then nothing may be left.
    await stack.close();
    closed = true;
    expect(processMrs()).toBe(0);
    const kmr = await kernel('rdma resource show mr | wc -l', 10);
    console.error(
      `kernel guest: ${kmr.out.trim()} memory regions listed after krdma.py exited (the kernel's FRWR pool keeps its own)`,
    );
    expect(await kernelLogClean()).toBe('');
  });
});
