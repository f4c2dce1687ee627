import { afterEach, describe, expect, it } from 'vitest';
import { constants, RdsSocket, RdsStack } from '../lib/index.js';
import { TEST_TCP_PORT } from './helpers.js';
import { type Frame, type RawConn, RawListener, kernelMap } from './raw-peer.js';

// Loopback addresses 127.221.x.y belong to this file.
const P = TEST_TCP_PORT;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/**
 * A Linux kernel up to 6.19, played by hand on the larger address (we connect to it): one path
 * per peer address, whose receive sequence (next_rx_seq) survives reconnects, with the kernel's
 * receive rule (spec §2.5): a RETRANSMITTED frame below next_rx_seq is dropped as old, anything
 * else is taken and sets next_rx_seq past it.
 */
class Kernel61 {
  nextRxSeq = 0;
  dropOldSeq = 0;
  private txSeq = 1;
  readonly read: Buffer[] = [];

  /** Takes `c` as the path: its congestion map first, then every frame through the receive rule. */
  async take(c: RawConn, until: (k: Kernel61) => boolean, ms = 10_000): Promise<void> {
    kernelMap(c);
    const deadline = Date.now() + ms;
    while (!until(this)) this.receive(c, await c.next(Math.max(1, deadline - Date.now())));
  }

  private receive(c: RawConn, f: Frame): void {
    const h = f.header;
    if (h.flags === constants.RDS_FLAG_CONG_BITMAP) return;
    if (h.sequence < this.nextRxSeq && (h.flags & constants.RDS_FLAG_RETRANSMITTED) !== 0) {
      this.dropOldSeq++;
      return;
    }
    this.nextRxSeq = h.sequence + 1;
    if (h.sport === 1 && h.dport === 0) {
      // A multipath probe: the pong with NPATHS=8 and nothing of rds-socket's (a kernel).
      c.send({ sequence: this.txSeq++, sport: 0, dport: 1, exthdr: Uint8Array.of(5, 0, 8) });
      return;
    }
    if (h.dport !== 0) this.read.push(f.payload);
  }
}

/** The kernel's TCP has acknowledged `n` frames on `c` (they are in its socket), none read by RDS. */
async function framesArrived(c: RawConn, n: number): Promise<void> {
  for (let i = 0; i < n; i++) await c.next(10_000);
}

describe("a restarted node towards a kernel that still runs its old life's connection (#35, nemesis seed 5)", () => {
  it("the kernel reads the new life's first messages, resent after it refused their carrier", async () => {
    const listener = await RawListener.listen('127.221.0.2', P, false);
    cleanups.push(() => listener.close());
    const kernel = new Kernel61();
    const dst = { address: '127.221.0.2', port: 4000 };

    // The old life: 40 messages, read by the kernel; then the node dies (stack closed) and its
    // FIN never reaches the kernel, whose path stays UP with the old life's next_rx_seq.
    const old = new RdsStack({ tcpPort: P, reconnectMaxDelayMs: 50 });
    const a = new RdsSocket({ stack: old });
    await a.bind({ address: '127.221.0.1', port: 4000 });
    for (let i = 0; i < 40; i++) a.sendmsg(Buffer.from(`old ${i}`), dst);
    const c0 = await listener.accept(0, 10_000);
    await kernel.take(c0, (k) => k.read.length === 40);
    await old.close();

    // The new life on the same address sends three messages. Their first carrier reaches a
    // kernel whose path is not DOWN: up to 6.19 it resets that connection in accept, after its
    // TCP acknowledged what came, without RDS reading it.
    const life = new RdsStack({ tcpPort: P, reconnectMinDelayMs: 1, reconnectMaxDelayMs: 50 });
    cleanups.push(() => life.close());
    const b = new RdsSocket({ stack: life });
    await b.bind({ address: '127.221.0.1', port: 4000 });
    for (let i = 0; i < 3; i++) b.sendmsg(Buffer.from(`new ${i}`), dst);
    const c1 = await listener.accept(1, 10_000);
    await framesArrived(c1, 5); // the map, the probe, the three messages
    c1.sock.resetAndDestroy();

    // The old connection dies at last; the kernel takes the next carrier as its path, with
    // next_rx_seq where the old life left it.
    c0.sock.resetAndDestroy();
    const c2 = await listener.accept(2, 10_000);
    await kernel.take(c2, (k) => k.read.length === 43);
    expect(kernel.read.slice(40).map(String)).toEqual(['new 0', 'new 1', 'new 2']);
    expect(kernel.dropOldSeq, 'frames of the new life dropped as old').toBe(0);
    expect(life.counters.get('send_retransmitted')).toBeGreaterThan(0);
  });

  it("with initialSequence: 1 (the kernel's own numbering) the option is honoured on the wire", async () => {
    const listener = await RawListener.listen('127.221.1.2', P);
    cleanups.push(() => listener.close());
    const stack = new RdsStack({ tcpPort: P, initialSequence: 1 });
    cleanups.push(() => stack.close());
    const s = new RdsSocket({ stack });
    await s.bind({ address: '127.221.1.1', port: 4000 });
    s.sendmsg(Buffer.from('x'), { address: '127.221.1.2', port: 4000 });
    const c = await listener.accept(0, 10_000);
    const probe = await c.nextProbe(10_000);
    expect(probe.header.sequence).toBe(1);
    expect((await c.nextUser(10_000)).header.sequence).toBe(2);
  });

  it("by default a path numbers from the clock, above any earlier life's numbers", async () => {
    const listener = await RawListener.listen('127.221.2.2', P);
    cleanups.push(() => listener.close());
    const before = Date.now() * 1000;
    const stack = new RdsStack({ tcpPort: P });
    cleanups.push(() => stack.close());
    const s = new RdsSocket({ stack });
    await s.bind({ address: '127.221.2.1', port: 4000 });
    s.sendmsg(Buffer.from('x'), { address: '127.221.2.2', port: 4000 });
    const c = await listener.accept(0, 10_000);
    const seq = (await c.nextUser(10_000)).header.sequence;
    expect(seq).toBeGreaterThan(before);
    expect(seq).toBeLessThanOrEqual(Date.now() * 1000 + 1);
    expect(() => new RdsStack({ initialSequence: 0 })).toThrow(/initialSequence must be an integer/);
  });
});
