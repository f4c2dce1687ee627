import { afterEach, describe, expect, it } from 'vitest';
import { constants } from '../lib/index.js';
import { makePair, type Pair, timeout } from './helpers.js';

// Rows of docs/socket-api.md not covered elsewhere (issue 38): options af_rds.c takes at a level
// a C program may use that rds-socket did not take before.
const { SOL_RDS, SOL_SOCKET } = constants;
const NET = 140;

describe.each(['tcp', 'attached'] as const)('the kernel socket API over %s', (kind) => {
  let pair: Pair | null = null;
  let host = kind === 'tcp' ? 0 : 64;
  afterEach(async () => {
    await pair?.close();
    pair = null;
  });

  it('SO_TIMESTAMP_OLD / SO_TIMESTAMP_NEW at SOL_RDS stamp messages as at SOL_SOCKET (rds_setsockopt takes both levels)', async () => {
    pair = await makePair(kind, NET, ++host);
    const { a, b } = pair;
    b.setsockopt(SOL_RDS, constants.SO_TIMESTAMP_OLD, 1);
    expect(b.getsockopt(SOL_SOCKET, constants.SO_TIMESTAMP)).toBe(1);
    const before = Date.now();
    a.sendmsg(Buffer.from('t'), b.address());
    expect((await b.recv({ signal: timeout() })).timestamp).toBeGreaterThanOrEqual(before - 1);
    b.setsockopt(SOL_RDS, constants.SO_TIMESTAMP_NEW, 0);
    a.sendmsg(Buffer.from('u'), b.address());
    expect((await b.recv({ signal: timeout() })).timestamp).toBeUndefined();
  });
});
