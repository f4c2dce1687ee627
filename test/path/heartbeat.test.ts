import { afterEach, describe, expect, it } from 'vitest';
import {
  RDS_CONN_UP,
  RDS_FLAG_ACK_REQUIRED,
  RDSSOCK_CAP_ACK,
  RDSSOCK_CAP_HEARTBEAT,
  RDSSOCK_CAP_NO_HELLO,
} from '../../lib/constants.js';
import type { RdsStack } from '../../lib/core/stack.js';
import { fakeConn, until } from './fake-transport.js';

let stack: RdsStack | null = null;
afterEach(async () => {
  await stack?.close();
  stack = null;
});

function hbPath() {
  const f = fakeConn({
    heartbeatIntervalMs: 20,
    heartbeatMissedLimit: 4,
    reconnectMinDelayMs: 60000,
    reconnectMaxDelayMs: 60000,
  });
  stack = f.stack;
  const cp = f.conn.paths[0]!;
  cp.connectIfDown();
  cp.connectComplete();
  f.conn.handshake.settle(RDSSOCK_CAP_ACK | RDSSOCK_CAP_HEARTBEAT | RDSSOCK_CAP_NO_HELLO);
  return { ...f, cp };
}

describe('Heartbeat: liveness between rds-socket peers', () => {
  it('a silent path asks for an answer (ACK_REQUIRED), then is dropped after heartbeatMissedLimit intervals', async () => {
    const { t, cp, stack: s } = hbPath();
    expect(cp.heartbeat.running).toBe(true);
    await until(() => cp.heartbeat.heartbeatsSent > 0, 'a heartbeat');
    expect(t.controls.some((c) => (c.header[24]! & RDS_FLAG_ACK_REQUIRED) !== 0)).toBe(true);
    await until(() => s.counters.get('heartbeat_timeout') === 1, 'the silent path dropped');
    expect(cp.state).not.toBe(RDS_CONN_UP); // DOWN, or already reconnecting
    expect(s.counters.get('conn_reset')).toBe(1);
    expect(cp.heartbeat.running).toBe(false);
  });

  it('traffic keeps the path up', async () => {
    const { cp } = hbPath();
    const end = Date.now() + 200;
    while (Date.now() < end) {
      cp.heartbeat.noteRx();
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(cp.state).toBe(RDS_CONN_UP);
  });

  it('while the node itself does not read, the silence is not held against the peer', async () => {
    const { cp, stack: s } = hbPath();
    cp.setReadPaused(true);
    await until(() => cp.heartbeat.heartbeatsSent >= 5, 'heartbeats while paused', 3000);
    expect(cp.state).toBe(RDS_CONN_UP);
    expect(s.counters.get('heartbeat_timeout')).toBe(0);
  });

  it("no heartbeat without the peer's capability", async () => {
    const f = fakeConn({ heartbeatIntervalMs: 20 });
    stack = f.stack;
    const cp = f.conn.paths[0]!;
    cp.connectIfDown();
    cp.connectComplete();
    f.conn.handshake.settle(RDSSOCK_CAP_ACK | RDSSOCK_CAP_NO_HELLO);
    expect(cp.heartbeat.running).toBe(false);
  });
});
