import { describe, expect, it } from 'vitest';
import { bindScope, connectScope, isLinkLocal, sendScope, splitZone, zoneIndex } from '../lib/core/scope.js';

// The kernel's rules for IPv6 link-local scopes (issue 38; af_rds.c rds_bind / rds_connect,
// send.c rds_sendmsg), on their own: the socket calls do not take zoned addresses yet.
const idx = (z: string): number => ({ eth0: 2, eth1: 3 })[z] ?? Number(z);
const ll = (a: string) => splitZone(a, 't');

describe('link-local scopes', () => {
  it('splits zones and knows fe80::/10', () => {
    expect(splitZone('fe80::1%eth0', 'x')).toEqual({ address: 'fe80::1', zone: 'eth0' });
    expect(splitZone('10.0.0.1', 'x')).toEqual({ address: '10.0.0.1', zone: null });
    for (const bad of ['10.0.0.1%eth0', 'fe80::1%', 'fe80::1%a/b'])
      expect(() => splitZone(bad, 'x')).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(['fe80::1', 'febf::1', 'FE80::2'].map(isLinkLocal)).toEqual([true, true, true]);
    expect(['fec0::1', 'fe8::1', 'fd00::1', '10.0.0.1'].map(isLinkLocal)).toEqual([false, false, false, false]);
  });

  it('zone names are interface indexes (lo is 1 in any namespace); unknown names are ENODEV', () => {
    expect(zoneIndex('7')).toBe(7);
    expect(zoneIndex('lo')).toBe(1);
    expect(() => zoneIndex('nosuchif0')).toThrow(expect.objectContaining({ code: 'ENODEV' }));
  });

  it('bind: link-local needs a zone; it must match a connect()ed link-local peer', () => {
    expect(() => bindScope(ll('fe80::1'), 0, false, idx)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(bindScope(ll('fe80::1%eth0'), 0, false, idx)).toBe(2);
    expect(bindScope(ll('fd00::1'), 0, false, idx)).toBe(0);
    expect(bindScope(ll('fe80::1%eth0'), 2, true, idx)).toBe(2);
    expect(() => bindScope(ll('fe80::1%eth1'), 2, true, idx)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    // A global address with a link-local peer keeps the peer's scope.
    expect(bindScope(ll('fd00::1'), 2, true, idx)).toBe(2);
  });

  it('connect: a link-local peer needs a zone, on the bound link if the socket has one', () => {
    expect(() => connectScope(ll('fe80::2'), 0, false, idx)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(connectScope(ll('fe80::2%eth1'), 0, false, idx)).toBe(3);
    expect(connectScope(ll('fe80::2%eth1'), 2, false, idx)).toBe(3); // unbound: the peer's scope is remembered
    expect(() => connectScope(ll('fe80::2%eth1'), 2, true, idx)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(connectScope(ll('fd00::2'), 2, true, idx)).toBe(2);
  });

  it("sendmsg: no zone takes the socket's; another link is EINVAL; a global socket may reach any link", () => {
    expect(() => sendScope(ll('fe80::2'), 2, idx)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(sendScope(ll('fe80::2%eth0'), 2, idx)).toBe(2);
    expect(() => sendScope(ll('fe80::2%eth1'), 2, idx)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(sendScope(ll('fd00::2'), 2, idx)).toBe(2);
    expect(sendScope(ll('fe80::2%eth1'), 0, idx)).toBe(3);
  });
});
