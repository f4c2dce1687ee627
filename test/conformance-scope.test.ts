import { afterEach, describe, expect, it } from 'vitest';
import { type RdsError, RdsSocket } from '../lib/index.js';
import { CONFORMANCE_KINDS, makePair, type Pair } from './helpers.js';

// IPv6 link-local addresses and zones at the socket calls (af_rds.c rds_bind/rds_connect, send.c
// rds_sendmsg), over every kind of socket: a link-local address without its interface is EINVAL as
// in the kernel; with one it is an address like another (bind needs it on this host); a zone on
// another address is dropped, as the kernel ignores sin6_scope_id there. Addresses 127.145.x.y.
// Traffic over a link-local address: linklocal-netns.test.ts.
const KINDS = CONFORMANCE_KINDS;
const NET = 145;

describe.each(KINDS)('link-local addresses at the socket calls over %s', (kind) => {
  let pair: Pair | null = null;
  let host = kind === 'tcp' ? 0 : kind === 'attached' ? 64 : kind === 'attached-process' ? 96 : 128;
  afterEach(async () => {
    await pair?.close();
    pair = null;
  });
  const failure = async (f: () => unknown): Promise<RdsError | undefined> => {
    try {
      await f();
    } catch (e) {
      return e as RdsError;
    }
    return undefined;
  };

  it('bind, connect, sendmsg: EINVAL without a zone, ENODEV for an unknown interface, with one an address like another', async () => {
    pair = await makePair(kind, NET, ++host);
    const { a, stackA } = pair;
    const s = new RdsSocket({ stack: stackA });
    try {
      expect(await failure(() => s.bind({ address: 'fe80::1', port: 0 }))).toMatchObject({
        code: 'EINVAL',
        message: /fe80::1 is link-local: give its interface, as in fe80::1%eth0/,
      });
      expect(await failure(() => s.bind({ address: 'FE80:0::1%no-such-if0', port: 0 }))).toMatchObject({
        code: 'ENODEV',
      });
      // Checked like any address now: lo in this namespace has no fe80::1.
      expect(await failure(() => s.bind({ address: 'fe80::1%lo', port: 0 }))).toMatchObject({
        code: 'EADDRNOTAVAIL',
      });
      expect(await failure(() => s.bind({ address: '127.0.0.1%lo', port: 0 }))).toMatchObject({ code: 'EINVAL' });
    } finally {
      await s.close();
    }
    expect(await failure(() => a.connect({ address: 'fe80::2', port: 4000 }))).toMatchObject({ code: 'EINVAL' });
    expect(await failure(() => a.sendmsg(Buffer.from('x'), { address: 'fe80::2', port: 4000 }))).toMatchObject({
      code: 'EINVAL',
    });
    // Taken (zone 1 is lo), then refused as the kernel does: `a` is bound to an IPv4 address.
    expect(await failure(() => a.sendmsg(Buffer.from('x'), { address: 'fe80::2%1', port: 4000 }))).toMatchObject({
      code: 'EOPNOTSUPP',
      message: /to fe80::2%lo: address families differ/,
    });
    expect(await failure(() => a.sendmsg(Buffer.from('x'), { address: '10.0.0.1%lo', port: 4000 }))).toMatchObject({
      code: 'EINVAL',
    });
  });

  it('a zone on an address that is not link-local is dropped (sin6_scope_id is ignored there)', async () => {
    pair = await makePair(kind, NET, ++host);
    const s = new RdsSocket({ stack: pair.stackA });
    try {
      s.connect({ address: '2001:db8::7%lo', port: 4000 });
      expect(s.remoteAddress()).toEqual({ address: '2001:db8::7', port: 4000 });
    } finally {
      await s.close();
    }
  });
});
