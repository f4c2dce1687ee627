import { afterEach, describe, expect, it } from 'vitest';
import { CarrierKind, CarrierSlot } from '../../lib/core/carrier.js';
import { RDS_CONN_CONNECTING, RDS_CONN_DOWN, RDS_CONN_UP } from '../../lib/constants.js';
import { fakeConn } from './fake-transport.js';
import type { RdsStack } from '../../lib/core/stack.js';

let stack: RdsStack | null = null;
afterEach(async () => {
  await stack?.close();
  stack = null;
});

describe('typed carriers and their life cycle', () => {
  it('a path makes one carrier object per kind, typed, and reports none of a kind it does not hold', () => {
    const f = fakeConn();
    stack = f.stack;
    const cp = f.conn.paths[0]!;
    let made = 0;
    const kind = new CarrierKind<{ n: number }>('test', () => ({ n: ++made }));
    const other = new CarrierKind<string>('other', () => 'x');
    expect(cp.carrierIf(kind)).toBeNull();
    const c = cp.carrier(kind);
    expect(c.n).toBe(1);
    expect(cp.carrier(kind)).toBe(c);
    expect(made).toBe(1);
    expect(cp.carrierIf(other)).toBeNull();
  });

  it('CarrierSlot: events of a replaced carrier are ignored; the loss of the current one reaches the path once', () => {
    const f = fakeConn();
    stack = f.stack;
    const cp = f.conn.paths[0]!;
    const slot = new CarrierSlot<object>(cp);
    const a = {};
    const b = {};
    const seen: string[] = [];
    slot.set(a);
    const onA = slot.guard(a, (x: string) => seen.push(`a:${x}`));
    onA('1');
    expect(slot.set(b)).toBe(a);
    onA('2'); // a was replaced
    expect(seen).toEqual(['a:1']);
    expect(slot.lost(a, 'old carrier closed')).toBe(false);
    // b is lost while the path connects: a failed connect, not a drop.
    cp.connectIfDown();
    expect(cp.state).toBe(RDS_CONN_CONNECTING);
    expect(slot.lost(b, 'refused')).toBe(true);
    expect(cp.state).toBe(RDS_CONN_DOWN);
    expect(cp.connectFailures).toBe(1);
    expect(slot.current).toBeNull();
    expect(slot.lost(b, 'again')).toBe(false);
  });

  it('the loss of a live carrier drops the path (the transport is told to shut it down)', () => {
    const f = fakeConn();
    stack = f.stack;
    const cp = f.conn.paths[0]!;
    const slot = new CarrierSlot<object>(cp);
    const s = {};
    slot.set(s);
    cp.connectIfDown();
    cp.connectComplete();
    expect(cp.state).toBe(RDS_CONN_UP);
    expect(slot.lost(s, 'connection closed')).toBe(true);
    expect(cp.state).toBe(RDS_CONN_DOWN);
    expect(f.t.shutdowns).toEqual([0]);
    expect(f.stack.counters.get('conn_reset')).toBe(1);
  });
});

describe('transport capabilities, not transport identity', () => {
  it('a transport that declares itself local gets a loopback connection: no probe, nothing tracked for acks', async () => {
    const { FakeTransport } = await import('./fake-transport.js');
    const { RdsStack } = await import('../../lib/core/stack.js');
    const t = Object.assign(new FakeTransport(), { local: true });
    stack = new RdsStack({ transports: [t] });
    const conn = stack.connFor('127.140.1.1', '127.140.1.2', t);
    expect(conn.isLoopback).toBe(true);
    const cp = conn.paths[0]!;
    cp.connectIfDown();
    cp.connectComplete();
    cp.tx.queue(Buffer.from('x'), 1, 4000, 4001, { messageDone() {} });
    await new Promise((r) => setImmediate(r));
    expect(t.sent.length).toBe(1); // the message alone: no probe ahead of it
    expect(cp.acks.recordReceived(1, false, true)).toBeNull();
  });
});
