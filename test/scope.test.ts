import { describe, expect, it } from 'vitest';
import { addressKey, canonicalAddress, compareAddresses, parseEndpoint } from '../lib/core/address.js';
import {
  bindScope,
  checkBindLink,
  checkConnectLink,
  checkSendLink,
  connectScope,
  isLinkLocal,
  sendScope,
  socketZone,
  splitZone,
  zoneIndex,
  zoneName,
} from '../lib/core/scope.js';
import type { RdsAddress } from '../lib/core/address.js';
import type { SocketBackend } from '../lib/core/socket-backend.js';
import { SendChecks } from '../lib/core/socket-send-checks.js';

// The kernel's rules for IPv6 link-local scopes (issue 38; af_rds.c rds_bind / rds_connect,
// send.c rds_sendmsg), on their own and as the socket calls apply them to zoned addresses
// (`fe80::1%lo`: lo is the one interface every namespace has, index 1).
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

  it('a zone given by index is spelled by its interface name; a link-local address keeps it', () => {
    expect(zoneName('1')).toBe('lo');
    expect(zoneName('lo')).toBe('lo');
    expect(() => zoneName('4000000')).toThrow(expect.objectContaining({ code: 'ENODEV' }));
    expect(parseEndpoint({ address: 'FE80:0::1%1', port: 5 }, 'x')).toEqual({ address: 'fe80::1%lo', port: 5 });
    expect(parseEndpoint({ address: 'fd00::0:1%1', port: 5 }, 'x')).toEqual({ address: 'fd00::1', port: 5 });
    // A destination without a zone takes the one the socket lends (its link's).
    expect(parseEndpoint({ address: 'fe80::2', port: 5 }, 'x', 'lo').address).toBe('fe80::2%lo');
    expect(() => parseEndpoint({ address: 'fe80::2', port: 5 }, 'x')).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    // What Node's net reports for a connection (fe80::2%eth0) keeps its zone; others drop one.
    expect(canonicalAddress('fe80:0::2%eth0')).toBe('fe80::2%eth0');
    expect(canonicalAddress('2001:db8::0:1%eth0')).toBe('2001:db8::1');
    expect(canonicalAddress('10.0.0.1%eth0')).toBeNull();
  });

  it('a zone is not part of an address key: order and CIDR tests see the address alone', () => {
    expect(addressKey('fe80::1%lo')).toBe(addressKey('fe80::1'));
    expect(compareAddresses('fe80::1%lo', 'fe80::2%eth0')).toBe(-1);
  });

  it('the socket checks: one link per socket, from its bound address or else its connect()ed peer', () => {
    expect(socketZone('fe80::1%lo', 'fe80::2%eth0')).toBe('lo');
    expect(socketZone('fd00::1', 'fe80::2%eth0')).toBe('eth0');
    expect(socketZone(null, 'fd00::2')).toBeNull();
    const einval = expect.objectContaining({ code: 'EINVAL' });
    expect(() => checkSendLink('fe80::2%nosuchif0', 'lo')).toThrow(expect.objectContaining({ code: 'ENODEV' }));
    expect(() => checkSendLink('fe80::2%1', 'lo')).not.toThrow();
    expect(() => checkSendLink('fd00::2', 'lo')).not.toThrow(); // link-local to global is allowed
    expect(() => checkConnectLink('fe80::2%lo', 'lo', true)).not.toThrow();
    expect(() => checkBindLink('fe80::1%lo', 'fe80::2%lo')).not.toThrow();
    expect(() => checkBindLink('fe80::1%lo', 'fd00::2')).not.toThrow();
    // Two links need two interfaces: 1 (lo) and an index no interface has compare as numbers.
    expect(() => checkSendLink('fe80::2%9999', 'lo')).toThrow(einval);
    expect(() => checkConnectLink('fe80::2%9999', 'lo', true)).toThrow(einval);
    expect(() => checkBindLink('fe80::1%lo', 'fe80::2%9999')).toThrow(einval);
  });

  it("sendmsg keeps the socket's zone: derived when bind() or connect() changes the addresses, not per send", () => {
    const backend = { bound: { address: 'fd00::1', port: 5 } as RdsAddress | null, options: { sndbuf: 1 << 20 } };
    const checks = new SendChecks(backend as unknown as SocketBackend);
    let peerReads = 0;
    const peer = {
      port: 7,
      get address() {
        peerReads++;
        return 'fe80::2%lo';
      },
    };
    const data = Buffer.alloc(8);
    const send = (p: RdsAddress | null) =>
      checks.check(data, { address: 'fe80::9', port: 7 }, undefined, p, false, false);
    // A global bound address holds no zone: the connect()ed link-local peer's is the socket's.
    for (let i = 0; i < 100; i++) expect(send(peer).address).toBe('fe80::9%lo');
    expect(peerReads).toBe(1);
    // connect() to a global peer (a new object): the socket holds no zone, so a bare link-local is EINVAL.
    expect(() => send({ address: 'fd00::2', port: 7 })).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    // A bound address with a zone (bind() finished): that zone, whatever the peer.
    backend.bound = { address: 'fe80::1%lo', port: 5 };
    expect(send({ address: 'fd00::2', port: 7 }).address).toBe('fe80::9%lo');
  });
});
