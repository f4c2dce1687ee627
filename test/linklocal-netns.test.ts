import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { netnsUnavailable } from './helpers.js';
import { deleteNamespaces, twoHosts } from './netns-kit.js';

// IPv6 link-local addresses with their zone, end to end: two network namespaces this test
// creates, joined by a veth pair carrying fe80::1 and fe80::2 only (nodad: usable at once), one
// RDS node in each (test/fixtures/linklocal-peer.mjs). The kernel's rules for a socket's link
// (af_rds.c rds_bind/rds_connect, send.c rds_sendmsg) are checked on the same sockets.
const PEER = fileURLToPath(new URL('./fixtures/linklocal-peer.mjs', import.meta.url));
const NS_A = 'rdsll-api2-a';
const NS_B = 'rdsll-api2-b';
const IF_A = 'llapi2-a';
const IF_B = 'llapi2-b';

const why = netnsUnavailable();
if (why) console.log(`link-local netns test skipped: ${why}`);

/** Runs the fixture in `ns`; resolves with its JSON lines once it exits (killed after `ms`). */
function run(ns: string, args: string[], ms: number): { done: Promise<Record<string, unknown>[]>; p: ChildProcess } {
  const p = spawn('ip', ['netns', 'exec', ns, process.execPath, PEER, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const events: Record<string, unknown>[] = [];
  createInterface({ input: p.stdout! }).on('line', (l) => events.push(JSON.parse(l) as Record<string, unknown>));
  const done = new Promise<Record<string, unknown>[]>((resolve) => {
    const t = setTimeout(() => p.kill('SIGKILL'), ms);
    p.on('close', () => {
      clearTimeout(t);
      resolve(events);
    });
  });
  return { done, p };
}

/** Resolves once the fixture has printed an event `ev` (it is bound), or rejects when it exits first. */
function ready(p: ChildProcess, events: () => Promise<Record<string, unknown>[]>): Promise<void> {
  return new Promise((resolve, reject) => {
    createInterface({ input: p.stdout! }).on('line', (l) => {
      if ((JSON.parse(l) as { ev: string }).ev === 'ready') resolve();
    });
    void events().then((e) => reject(new Error(`peer exited before it was bound: ${JSON.stringify(e)}`)));
  });
}

describe.skipIf(why !== null)('IPv6 link-local addresses with a zone, between two namespaces', () => {
  beforeAll(() => {
    twoHosts({ ns: NS_A, dev: IF_A, addr: 'fe80::1/64' }, { ns: NS_B, dev: IF_B, addr: 'fe80::2/64' }, { nodad: true });
  });
  afterAll(() => deleteNamespaces(NS_A, NS_B));

  it.each([
    ['embedded', []],
    ['attached', ['--attached', '1']],
  ])(
    '%s: bind fe80::1 with its zone, send to fe80::2 (the zone lent by the socket), the reply goes to m.address with its zone',
    async (_, extra) => {
      const echo = run(NS_B, ['--role', 'echo', '--bind', `fe80::2%${IF_B}`, ...extra], 30_000);
      await ready(echo.p, () => echo.done);
      // The zone by interface index (sin6_scope_id), as a C program gives it; lo is another link.
      const index = execFileSync('ip', ['netns', 'exec', NS_A, 'cat', `/sys/class/net/${IF_A}/ifindex`], {
        encoding: 'latin1',
      }).trim();
      const ping = run(
        NS_A,
        ['--role', 'ping', '--bind', `fe80::1%${index}`, '--peer', 'fe80::2', '--other-link', 'lo', ...extra],
        30_000,
      );
      const [a, b] = await Promise.all([ping.done, echo.done]);
      expect(a.find((e) => e.ev === 'ready')).toEqual({
        ev: 'ready',
        bound: { address: `fe80::1%${IF_A}`, port: 4000 },
      });
      expect(a.find((e) => e.ev === 'rules')).toEqual({
        ev: 'rules',
        sendOtherLink: 'EINVAL',
        connectOtherLink: 'EINVAL',
        bindOtherLink: 'EINVAL',
        bindAddressElsewhere: 'EADDRNOTAVAIL',
        connectNoZone: 'EINVAL',
        cancelNoZone: 'ok',
      });
      expect(b.find((e) => e.ev === 'recv')).toEqual({
        ev: 'recv',
        address: `fe80::1%${IF_B}`,
        port: 4000,
        data: 'hello',
      });
      expect(a.find((e) => e.ev === 'reply')).toEqual({
        ev: 'reply',
        address: `fe80::2%${IF_A}`,
        port: 4000,
        data: 'pong:hello',
      });
      expect(a.concat(b).filter((e) => e.ev === 'error')).toEqual([]);
    },
    60_000,
  );
});
