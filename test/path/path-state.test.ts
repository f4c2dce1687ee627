import { afterEach, describe, expect, it } from 'vitest';
import {
  RDS_CONN_CONNECTING,
  RDS_CONN_DISCONNECTING,
  RDS_CONN_DOWN,
  RDS_CONN_ERROR,
  RDS_CONN_RESETTING,
  RDS_CONN_UP,
} from '../../lib/constants.js';
import type { RdsStack } from '../../lib/core/stack.js';
import { fakeConn } from './fake-transport.js';

let stack: RdsStack | null = null;
afterEach(async () => {
  await stack?.close();
  stack = null;
});

describe('a path moves only through transition(from, to)', () => {
  it('a move from a state the path is not in is refused and counted, never applied', () => {
    const f = fakeConn();
    stack = f.stack;
    const cp = f.conn.paths[0]!;
    const moves: string[] = [];
    f.stack.on('state', (e) => moves.push(`${e.from}>${e.to}`));
    expect(cp.transition(RDS_CONN_CONNECTING, RDS_CONN_UP)).toBe(false);
    expect(cp.state).toBe(RDS_CONN_DOWN);
    expect(cp.refusedTransitions).toBe(1);
    expect(f.stack.counters.get('conn_transition_refused')).toBe(1);
    expect(moves).toEqual([]);
    expect(cp.transition(RDS_CONN_DOWN, RDS_CONN_CONNECTING)).toBe(true);
    expect(cp.state).toBe(RDS_CONN_CONNECTING);
    expect(moves).toEqual(['DOWN>CONNECTING']);
  });

  it('a move the state machine does not have is refused even from the right state', () => {
    const f = fakeConn();
    stack = f.stack;
    const cp = f.conn.paths[0]!;
    for (const to of [RDS_CONN_DISCONNECTING, RDS_CONN_RESETTING, RDS_CONN_ERROR, RDS_CONN_DOWN]) {
      expect(cp.transition(RDS_CONN_DOWN, to)).toBe(false);
    }
    expect(cp.state).toBe(RDS_CONN_DOWN);
    expect(f.stack.counters.get('conn_transition_refused')).toBe(4);
  });

  it('connect, complete, a replacing carrier (UP -> RESETTING -> UP), and a drop back to DOWN', () => {
    const f = fakeConn();
    stack = f.stack;
    const cp = f.conn.paths[0]!;
    const moves: string[] = [];
    f.stack.on('state', (e) => moves.push(`${e.from}>${e.to}`));
    cp.connectIfDown();
    expect(f.t.connects).toEqual([0]);
    cp.connectComplete();
    cp.connectComplete();
    expect(cp.upCount).toBe(2);
    cp.drop('test');
    expect(moves).toEqual([
      'DOWN>CONNECTING',
      'CONNECTING>UP',
      'UP>RESETTING',
      'RESETTING>UP',
      'UP>ERROR',
      'ERROR>DISCONNECTING',
      'DISCONNECTING>DOWN',
    ]);
    expect(f.stack.counters.get('conn_transition_refused')).toBe(0);
  });

  it('carrierLost: a failed connect while CONNECTING, a drop once UP; nothing when DOWN', () => {
    const f = fakeConn({ reconnectMinDelayMs: 60000, reconnectMaxDelayMs: 60000 });
    stack = f.stack;
    const cp = f.conn.paths[0]!;
    cp.carrierLost('nothing to lose');
    expect(cp.state).toBe(RDS_CONN_DOWN);
    expect(cp.connectFailures).toBe(0);
    cp.connectIfDown();
    cp.carrierLost('refused');
    expect(cp.state).toBe(RDS_CONN_DOWN);
    expect(cp.connectFailures).toBe(1);
    expect(f.t.shutdowns).toEqual([]);
    cp.transition(RDS_CONN_DOWN, RDS_CONN_CONNECTING);
    cp.connectComplete();
    cp.carrierLost('reset by peer');
    expect(cp.state).toBe(RDS_CONN_DOWN);
    expect(f.t.shutdowns).toEqual([0]);
    expect(f.stack.counters.get('conn_reset')).toBe(1);
  });

  it('an accepted carrier brings a DOWN path straight UP', () => {
    const f = fakeConn();
    stack = f.stack;
    const cp = f.conn.paths[0]!;
    cp.connectComplete();
    expect(cp.state).toBe(RDS_CONN_UP);
    expect(f.stack.counters.get('conn_transition_refused')).toBe(0);
  });
});
