import { createSocket } from 'node:dgram';
import { isIP, isIPv4, isIPv6 } from 'node:net';
import { RdsError } from '../errors.js';
import { zoned } from './scope.js';

/** An RDS endpoint: an IPv4 or IPv6 address and a port. */
export interface RdsAddress {
  address: string;
  port: number;
}

/**
 * Canonical text of an IP address, or null if it is not one. A link-local IPv6 address keeps its
 * zone (`fe80::1%eth0`, as Node's net reports a connection's addresses); any other drops it.
 */
export function canonicalAddress(a: string): string | null {
  const at = a.indexOf('%');
  if (at >= 0) {
    const c = canonicalAddress(a.slice(0, at));
    if (c === null || !isIPv6(c)) return null;
    return /^fe[89ab][0-9a-f]:/.test(c) ? `${c}${a.slice(at)}` : c;
  }
  const fam = isIP(a);
  if (fam === 4)
    return a
      .split('.')
      .map((o) => String(Number(o)))
      .join('.');
  if (fam === 6) {
    let v6: string;
    try {
      v6 = new URL(`http://[${a}]/`).hostname.slice(1, -1);
    } catch {
      return null;
    }
    // An IPv4-mapped address (::ffff:a.b.c.d) is that IPv4 address, as the kernel treats it
    // (rds_bind, rds_sendmsg): otherwise a socket bound to one would never match traffic.
    const m = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(v6);
    if (m !== null) {
      const hi = parseInt(m[1]!, 16);
      const lo = parseInt(m[2]!, 16);
      return `${hi >>> 8}.${hi & 0xff}.${lo >>> 8}.${lo & 0xff}`;
    }
    return v6;
  }
  return null;
}

function v4ToU32(a: string): number {
  const p = a.split('.');
  return ((+p[0]! << 24) >>> 0) + (+p[1]! << 16) + (+p[2]! << 8) + +p[3]!;
}

function v6Groups(a: string): number[] {
  let s = a;
  const v4tail: number[] = [];
  const m = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (m) {
    const v = v4ToU32(m[1]!);
    v4tail.push(v >>> 16, v & 0xffff);
    s = s.slice(0, -m[1]!.length);
    if (s.endsWith(':') && !s.endsWith('::')) s = s.slice(0, -1);
  }
  const halves = s.split('::');
  const parse = (x: string): number[] => (x === '' ? [] : x.split(':').map((h) => parseInt(h, 16)));
  const head = parse(halves[0]!);
  if (halves.length === 1) return [...head, ...v4tail];
  const tail = parse(halves[1]!);
  const zeros = new Array<number>(8 - head.length - tail.length - v4tail.length).fill(0);
  return [...head, ...zeros, ...tail, ...v4tail];
}

/**
 * A 32-hex-digit key equal to the address as a 128-bit big-endian integer, IPv4 in its
 * v4-mapped form, so string comparison orders addresses exactly as the kernel's rds_addr_cmp
 * (which compares addresses only: a link-local address's zone is not part of the key).
 */
export function addressKey(text: string): string {
  const at = text.indexOf('%');
  const a = at < 0 ? text : text.slice(0, at);
  if (isIPv4(a)) return `00000000000000000000ffff${v4ToU32(a).toString(16).padStart(8, '0')}`;
  return v6Groups(a)
    .map((g) => g.toString(16).padStart(4, '0'))
    .join('');
}

/** <0 if a is numerically smaller than b: the smaller address initiates TCP connections. */
export function compareAddresses(a: string, b: string): number {
  const ka = addressKey(a);
  const kb = addressKey(b);
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

export function isLoopbackAddress(a: string): boolean {
  if (isIPv4(a)) return a.startsWith('127.');
  return a === '::1';
}

/**
 * Whether this host owns the address, asked of the kernel itself: binding a throwaway UDP socket
 * to it fails with EADDRNOTAVAIL otherwise. Unlike interface listings this includes addresses on
 * links that are down, which the kernel also lets RDS bind.
 */
export async function isHostLocalAddress(a: string): Promise<boolean> {
  if (isLoopbackAddress(a)) return true;
  return new Promise((resolve) => {
    const s = createSocket(isIPv4(a) ? 'udp4' : 'udp6');
    s.once('error', () => {
      s.close();
      resolve(false);
    });
    s.bind({ address: a, port: 0, exclusive: true }, () => {
      s.close();
      resolve(true);
    });
  });
}

/** Why an address cannot be an RDS endpoint (unspecified, broadcast, multicast), or null. */
export function nonUnicastReason(a: string): string | null {
  if (isIPv4(a)) {
    const v = v4ToU32(a);
    if (v === 0) return 'is INADDR_ANY; RDS sockets bind to one exact address';
    if (v === 0xffffffff) return 'is the broadcast address';
    if (v >>> 28 === 0xe) return 'is a multicast address';
    return null;
  }
  const k = addressKey(a);
  if (/^0+$/.test(k)) return 'is the unspecified address ::';
  if (k.startsWith('ff')) return 'is a multicast address';
  return null;
}

export function validatePort(port: unknown, what: string): number {
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new RdsError('EINVAL', `${what} port must be an integer 0..65535, got ${String(port)}`);
  }
  return port;
}

/** Canonical form and unicast check per address string, cached: senders repeat the same few. */
const addressCache = new Map<string, { canon: string | null; nonUnicast: string | null }>();

export function checkedAddress(address: string): { canon: string | null; nonUnicast: string | null } {
  let c = addressCache.get(address);
  if (c === undefined) {
    const canon = canonicalAddress(address);
    c = { canon, nonUnicast: canon === null ? null : nonUnicastReason(canon) };
    if (addressCache.size > 4096) addressCache.clear();
    addressCache.set(address, c);
  }
  return c;
}

/**
 * Parses a user-supplied { address, port }; throws RdsError EINVAL with the reason. `lend`: the
 * zone a link-local address without one takes (the socket's, for a destination; scope.ts).
 */
export function parseEndpoint(ep: unknown, what: string, lend: string | null = null): RdsAddress {
  if (ep === null || typeof ep !== 'object') {
    throw new RdsError('EINVAL', `${what} must be an object { address, port }`);
  }
  const { address, port } = ep as { address?: unknown; port?: unknown };
  if (typeof address !== 'string') throw new RdsError('EINVAL', `${what}.address must be an IP address string`);
  // A zone (fe80::1%eth0) and the link-local rules (scope.ts); an address without '%' as before.
  const canon =
    address.includes('%') || /^fe[89ab]/i.test(address)
      ? zoned(address, what, canonicalAddress, lend)
      : checkedAddress(address).canon;
  if (canon === null) throw new RdsError('EINVAL', `${what}.address "${address}" is not an IPv4 or IPv6 address`);
  return { address: canon, port: validatePort(port, what) };
}

/** An address or CIDR block ("10.0.0.0/8", "::1", "fd00::/8") as a 128-bit prefix test. */
export function parseCidr(spec: string): (address: string) => boolean {
  const [addr, lenText] = spec.split('/') as [string, string | undefined];
  const canon = canonicalAddress(addr);
  if (canon === null) throw new RdsError('EINVAL', `"${spec}" is not an address or CIDR block`);
  const v4 = isIPv4(canon);
  const max = v4 ? 32 : 128;
  let len = lenText === undefined ? max : Number(lenText);
  // A mapped block (::ffff:10.0.0.0/104) counts its prefix over 128 bits; its IPv4 form over 32.
  if (v4 && lenText !== undefined && !isIPv4(addr) && len >= 96) len -= 96;
  if (!Number.isInteger(len) || len < 0 || len > max) throw new RdsError('EINVAL', `bad prefix length in "${spec}"`);
  const bits = BigInt(len + (v4 ? 96 : 0));
  const mask = bits === 0n ? 0n : ((1n << bits) - 1n) << (128n - bits);
  const want = BigInt(`0x${addressKey(canon)}`) & mask;
  return (a: string) => (BigInt(`0x${addressKey(a)}`) & mask) === want && isIPv4(a) === v4;
}
