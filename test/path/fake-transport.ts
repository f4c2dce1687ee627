import { RdsStack } from '../../lib/core/stack.js';
import type { RdsConnPath } from '../../lib/core/path.js';
import type { RdsOutgoing } from '../../lib/core/message.js';
import type { RdsTransport } from '../../lib/core/transport.js';
import type { RdsTransportHost } from '../../lib/core/stack.js';
import type { RdsConnection } from '../../lib/core/connection.js';

/**
 * A transport that carries nothing and records what the core asks of it: for unit tests of a
 * path's parts without sockets. `accept` says whether xmit takes more.
 */
export class FakeTransport implements RdsTransport {
  readonly name = 'fake';
  readonly transType = 77;
  readonly mpathCapable = true;
  readonly userSelectable = false;
  accept = true;
  readonly connects: number[] = [];
  readonly shutdowns: number[] = [];
  readonly sent: { path: number; seq: number; flags: number; ack: bigint }[] = [];
  readonly controls: { path: number; header: Buffer }[] = [];
  congs = 0;

  attach(_host: RdsTransportHost): void {}
  laddrCheck(_laddr: string): Promise<void> {
    return Promise.resolve();
  }
  initiates(_cp: RdsConnPath): boolean {
    return true;
  }
  connPathConnect(cp: RdsConnPath): void {
    this.connects.push(cp.index);
  }
  connPathShutdown(cp: RdsConnPath): void {
    this.shutdowns.push(cp.index);
  }
  xmit(cp: RdsConnPath, msg: RdsOutgoing): boolean {
    this.sent.push({ path: cp.index, seq: msg.seq, flags: msg.wire[24]!, ack: msg.wire.readBigUInt64BE(8) });
    return this.accept;
  }
  xmitCong(_cp: RdsConnPath, _map: Buffer): boolean {
    this.congs++;
    return true;
  }
  xmitControl(cp: RdsConnPath, header: Buffer, done: () => void): void {
    this.controls.push({ path: cp.index, header: Buffer.from(header) });
    done();
  }
  setRef(_ref: boolean): void {}
  close(): Promise<void> {
    return Promise.resolve();
  }
}

/** A stack with only the fake transport, and one connection to a peer over it. */
export function fakeConn(opts: ConstructorParameters<typeof RdsStack>[0] = {}): {
  stack: RdsStack;
  t: FakeTransport;
  conn: RdsConnection;
} {
  const t = new FakeTransport();
  const stack = new RdsStack({ ...opts, transports: [t] });
  const conn = stack.connFor('127.140.0.1', '127.140.0.2', t);
  return { stack, t, conn };
}

/** Waits for the microtasks and one macrotask turn (the pump runs as a microtask). */
export function turn(): Promise<void> {
  return new Promise((r) => setImmediate(r));
}

/** Polls `pred` every 5 ms for at most `ms`. */
export async function until(pred: () => boolean, what: string, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
