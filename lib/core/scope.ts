import { readdirSync, readFileSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import { RdsError } from '../errors.js';

// IPv6 link-local addresses and their zone (`fe80::1%eth0`, the kernel's sin6_scope_id), with the
// rules af_rds.c (rds_bind, rds_connect) and send.c (rds_sendmsg) apply: a link-local address
// needs a scope; a socket keeps one scope (rs_bound_scope_id), set by bind or by connect() to a
// link-local peer, and every later link-local address must be on that link (EINVAL otherwise);
// a destination without a scope takes the socket's. Scopes compare as interface indexes, as
// sin6_scope_id does: a zone given by name is the index of that interface in this namespace.
//
// The socket calls keep a link-local address with its zone by name (`zoned`: fe80::1%eth0), which
// the TCP transport listens and connects with as Node's net does (and reports for a connection),
// so the connection table tells links apart; the sockets apply bindScope/connectScope/sendScope
// (checkBindLink, checkConnectLink, checkSendLink) to their bound address, peer and destinations.

/** An address split from its zone: `fe80::1%eth0` is { address: 'fe80::1', zone: 'eth0' }. */
export interface ScopedAddress {
  address: string;
  zone: string | null;
}

/** Splits `addr%zone`; EINVAL for an empty zone, a zone on an IPv4 address, or a bad address. */
export function splitZone(text: string, what: string): ScopedAddress {
  const at = text.indexOf('%');
  if (at < 0) return { address: text, zone: null };
  const address = text.slice(0, at);
  const zone = text.slice(at + 1);
  if (!isIPv6(address))
    throw new RdsError('EINVAL', `${what}: a zone (%${zone}) is only for IPv6 addresses, got "${text}"`);
  if (!/^[A-Za-z0-9_.:-]{1,15}$/.test(zone))
    throw new RdsError('EINVAL', `${what}: "${zone}" is not an interface name or index (as in fe80::1%eth0)`);
  return { address, zone };
}

/** Whether an IPv6 address is link-local (fe80::/10). */
export function isLinkLocal(address: string): boolean {
  return isIPv6(address) && /^fe[89ab][0-9a-f]:/i.test(address);
}

/**
 * The interface index a zone names (sin6_scope_id): a number as given, a name through
 * /sys/class/net/<name>/ifindex. ENODEV for a name this namespace has no interface of.
 */
export function zoneIndex(zone: string, readIndex = sysIfindex): number {
  if (/^\d+$/.test(zone)) return Number(zone);
  const i = readIndex(zone);
  if (i === null)
    throw new RdsError('ENODEV', `no network interface "${zone}" here (from the zone of a link-local address)`);
  return i;
}

function sysIfindex(name: string): number | null {
  if (name.includes('/') || name === '.' || name === '..') return null;
  try {
    const v = Number(readFileSync(`/sys/class/net/${name}/ifindex`, 'latin1').trim());
    return Number.isInteger(v) && v > 0 ? v : null;
  } catch {
    return null;
  }
}

/** The scope an address carries: its zone's index if link-local (EINVAL without one), else 0. */
function scopeOf(a: ScopedAddress, what: string, index: (zone: string) => number): number {
  if (!isLinkLocal(a.address)) return 0;
  if (a.zone === null)
    throw new RdsError('EINVAL', `${what} ${a.address} is link-local: give its interface, as in ${a.address}%eth0`);
  return index(a.zone);
}

/**
 * bind(): the socket's scope after binding `local` (rds_bind). `kept` is the scope the socket
 * holds (from connect() to a link-local peer, or 0), `connected` whether it has a peer.
 */
export function bindScope(
  local: ScopedAddress,
  kept: number,
  connected: boolean,
  index: (zone: string) => number = zoneIndex,
): number {
  const scope = scopeOf(local, 'bind address', index);
  if (connected && scope !== 0 && kept !== 0 && scope !== kept)
    throw new RdsError(
      'EINVAL',
      `bind address ${local.address}%${local.zone} is on another link than the connect()ed peer`,
    );
  return scope !== 0 ? scope : kept;
}

/** connect(): the socket's scope after connecting to `peer` (rds_connect); `bound` says whether it is bound. */
export function connectScope(
  peer: ScopedAddress,
  kept: number,
  bound: boolean,
  index: (zone: string) => number = zoneIndex,
): number {
  const scope = scopeOf(peer, 'connect() address', index);
  if (scope === 0) return kept;
  if (bound && kept !== 0 && scope !== kept)
    throw new RdsError(
      'EINVAL',
      `connect() address ${peer.address}%${peer.zone} is on another link than the bound address`,
    );
  return scope;
}

/**
 * sendmsg() to `dest`: the scope the message goes out with (rds_sendmsg). A destination without a
 * scope takes the socket's; a link-local socket sends only to its own link (EINVAL).
 */
export function sendScope(dest: ScopedAddress, kept: number, index: (zone: string) => number = zoneIndex): number {
  const scope = scopeOf(dest, 'destination', index);
  if (scope === kept || scope === 0) return kept;
  if (kept !== 0)
    throw new RdsError('EINVAL', `destination ${dest.address}%${dest.zone} is on another link than this socket's`);
  return scope;
}

/**
 * The interface name a zone stands for, so that one link has one spelling (`%2` and `%eth0` are
 * the same zone if eth0 is interface 2): the canonical zone of an address. ENODEV for none.
 */
export function zoneName(zone: string, readIndex = sysIfindex, names = sysIfnames): string {
  if (!/^\d+$/.test(zone)) {
    zoneIndex(zone, readIndex);
    return zone;
  }
  const want = Number(zone);
  for (const n of names()) if (readIndex(n) === want) return n;
  throw new RdsError('ENODEV', `no network interface with index ${zone} here (from the zone of a link-local address)`);
}

function sysIfnames(): string[] {
  try {
    return readdirSync('/sys/class/net');
  } catch {
    return [];
  }
}

/** The zone of an address in canonical form (`fe80::1%eth0` gives `eth0`), or null. */
export function zoneOf(address: string): string | null {
  const at = address.indexOf('%');
  return at < 0 ? null : address.slice(at + 1);
}

/**
 * An address the socket calls were given (bind, connect, sendmsg, RDS_CANCEL_SENT_TO) in canonical
 * form, with the kernel's rule for a link-local one applied: EINVAL without a zone (its
 * sin6_scope_id 0) unless `lend` is given (the zone the socket holds, socketZone, which rds_sendmsg
 * gives a destination without one), ENODEV for a zone naming no interface. A link-local
 * address keeps its zone, by interface name (`fe80::1%eth0`): the transports listen and connect
 * with it and the connection table tells links apart by it. A zone on any other IPv6 address is
 * dropped, as the kernel ignores sin6_scope_id there. `canon` gives an address's canonical text
 * (null: not an address).
 * @internal
 */
export function zoned(
  text: string,
  what: string,
  canon: (a: string) => string | null,
  lend: string | null = null,
  index: (zone: string) => number = zoneIndex,
): string | null {
  const a = text.includes('%') ? splitZone(text, what) : { address: text, zone: null };
  const c = canon(a.address);
  if (c === null || !isLinkLocal(c)) return c;
  const zone = a.zone ?? lend;
  scopeOf({ address: c, zone }, what, index);
  return `${c}%${/^\d+$/.test(zone!) ? zoneName(zone!) : zone}`;
}

/** The interface index of a canonical address's zone (`fe80::1%eth0`), 0 without one. */
function scopeIdOf(address: string | null | undefined): number {
  const z = address == null ? null : zoneOf(address);
  return z === null ? 0 : zoneIndex(z);
}

/** An address in canonical form as a ScopedAddress. */
function scoped(address: string): ScopedAddress {
  const zone = zoneOf(address);
  return { address: zone === null ? address : address.slice(0, -zone.length - 1), zone };
}

/**
 * The zone a socket holds, the kernel's rs_bound_scope_id: its bound address's, else that of the
 * peer it connect()ed to; null for none. A destination without a zone takes it.
 */
export function socketZone(bound: string | null | undefined, peer: string | null | undefined): string | null {
  return (bound == null ? null : zoneOf(bound)) ?? (peer == null ? null : zoneOf(peer));
}

/** bind(`local`) on a socket connect()ed to `peer` (or not): EINVAL when they are on two links. @internal */
export function checkBindLink(local: string, peer: string | null | undefined): void {
  if (zoneOf(local) !== null) bindScope(scoped(local), scopeIdOf(peer), peer != null);
}

/** connect(`peer`) on a socket holding `zone` (socketZone): EINVAL when it is on another link. @internal */
export function checkConnectLink(peer: string, zone: string | null, bound: boolean): void {
  if (zoneOf(peer) !== null) connectScope(scoped(peer), zone === null ? 0 : zoneIndex(zone), bound);
}

/** sendmsg() to `dest` from a socket holding `zone`: EINVAL when it is on another link. @internal */
export function checkSendLink(dest: string, zone: string | null): void {
  if (zoneOf(dest) !== null && zone !== null) sendScope(scoped(dest), zoneIndex(zone));
}
