import { execFileSync } from 'node:child_process';

// Network namespaces for the tests that run nodes as separate hosts: made afresh, joined by a
// veth pair, deleted after. Each test names its own namespaces and links (they are global).

/** ip(8) with `args`, quietly; throws if it fails. */
export function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: 'ignore' });
}

/** One end of a veth pair: its namespace, link name and address with prefix (10.78.0.1/24, fe80::1/64). */
export interface VethEnd {
  ns: string;
  dev: string;
  addr: string;
}

/**
 * Namespaces `a.ns` and `b.ns` made afresh (a leftover of either name, from a run that was
 * killed, is deleted first), each with lo up, joined by a veth pair with the ends' addresses, up.
 * `nodad`: IPv6 addresses usable at once (no duplicate address detection).
 */
export function twoHosts(a: VethEnd, b: VethEnd, opts: { nodad?: boolean } = {}): void {
  deleteNamespaces(a.ns, b.ns);
  for (const ns of [a.ns, b.ns]) {
    ip('netns', 'add', ns);
    ip('-n', ns, 'link', 'set', 'lo', 'up');
  }
  ip('link', 'add', a.dev, 'netns', a.ns, 'type', 'veth', 'peer', 'name', b.dev, 'netns', b.ns);
  for (const end of [a, b]) {
    ip('-n', end.ns, 'addr', 'add', end.addr, 'dev', end.dev, ...(opts.nodad ? ['nodad'] : []));
    ip('-n', end.ns, 'link', 'set', end.dev, 'up');
  }
}

/** Deletes the namespaces (their links go with them); one already gone is no error. */
export function deleteNamespaces(...names: string[]): void {
  for (const ns of names) {
    try {
      ip('netns', 'del', ns);
    } catch {
      /* not there */
    }
  }
}
