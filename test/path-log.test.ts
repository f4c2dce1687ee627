import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { logPaths } from '../lib/cli/path-log.js';
import type { RdsStack } from '../lib/index.js';

// rds-socketd's log of paths (lib/cli/path-log.ts): what an operator reads to follow a peer's
// paths, including where a dead path's messages went.

const at = { localAddress: '10.0.0.1', peerAddress: '10.0.0.2', transport: 'tcp' };

describe('rds-socketd path log', () => {
  it('logs a path up, its failover with the messages moved, its drop, and a failing connect once', () => {
    const stack = new EventEmitter();
    const lines: string[] = [];
    logPaths(stack as unknown as RdsStack, (l) => lines.push(l));
    stack.emit('state', { ...at, path: 5, from: 'CONNECTING', to: 'UP' });
    stack.emit('drop', { ...at, path: 5, reason: 'heartbeat timed out' });
    stack.emit('failover', { ...at, path: 5, to: 0, moved: 3 });
    stack.emit('failover', { ...at, path: 5, to: 2, moved: 1 });
    stack.emit('state', { ...at, path: 5, from: 'CONNECTING', to: 'DOWN' });
    stack.emit('state', { ...at, path: 5, from: 'CONNECTING', to: 'DOWN' });
    expect(lines).toEqual([
      'path 10.0.0.1 -> 10.0.0.2 #5 (tcp): up',
      'path 10.0.0.1 -> 10.0.0.2 #5 (tcp): down (heartbeat timed out)',
      'path 10.0.0.1 -> 10.0.0.2 #5 (tcp): failed over to #0, 3 messages moved',
      'path 10.0.0.1 -> 10.0.0.2 #5 (tcp): failed over to #2, 1 message moved',
      'path 10.0.0.1 -> 10.0.0.2 #5 (tcp): connect failed; further attempts are logged once it is up',
    ]);
  });
});
