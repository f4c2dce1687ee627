import { execFileSync, spawn } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { RdsSocket, type RdsStack, constants } from '../../lib/index.js';

// Helpers shared by the interop test files.
// Runs inside the test's network namespace (run.sh): this side is 10.77.0.1 and 10.77.0.3
// (fd77::1 and fd77::3), the guest kernel is 10.77.0.2 (fd77::2) with rds_tcp loaded.
export const VM = fileURLToPath(new URL('./kernel-vm.sh', import.meta.url));
export const PEER = fileURLToPath(new URL('./guest/rdspeer.py', import.meta.url));
export const KERNEL = '10.77.0.2';
export const SMALL = '10.77.0.1';
export const LARGE = '10.77.0.3';
export const KERNEL6 = 'fd77::2';
export const SMALL6 = 'fd77::1';
export const LARGE6 = 'fd77::3';

/** The kernel generation under test (run.sh --kernel): '6.1', '6.12' or '7'. */
export const KERNEL_GEN = process.env.RDS_KERNEL ?? '6.1';
/** Kernels 7.0 and later: SPORT_IDX, several extensions per header, half-close on shutdown. */
export const IS_7X = Number.parseInt(KERNEL_GEN, 10) >= 7;

export interface GuestRun {
  code: number;
  out: string;
  lines: Record<string, unknown>[];
}

/** Runs a command in the guest; resolves with its output once it exits. */
export function guest(cmd: string): Promise<GuestRun> {
  return new Promise((resolve) => {
    const p = spawn('bash', [VM, 'exec', cmd], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    p.on('exit', (code) => {
      const lines = out
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      resolve({ code: code ?? 1, out, lines });
    });
  });
}

/** rdspeer.py in the guest, killed after `limitS` seconds. */
export const peer = (args: string, limitS = 150): Promise<GuestRun> =>
  guest(`timeout ${limitS} python3 ${PEER} ${args}`);
export const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** Same pattern as rdspeer.py: byte k of message i is (i*131 + k*7 + seed) & 0xff. */
export function pattern(i: number, size: number, seed = 0): Buffer {
  const tile = Buffer.alloc(256);
  for (let k = 0; k < 256; k++) tile[k] = (i * 131 + k * 7 + seed) & 0xff;
  return size === 0 ? Buffer.alloc(0) : Buffer.alloc(size, tile);
}

/** Waits for the guest program's b'ready' (sent over RDS once it has bound). */
export async function ready(s: RdsSocket, from = KERNEL): Promise<void> {
  const m = await s.recv({ signal: AbortSignal.timeout(60_000) });
  expect(m.address).toBe(from);
  expect(m.data.toString()).toBe('ready');
}

/** The instance directory the guest shares with the host (its /rdsinst). */
export const INST = `${process.env.RDS_KVM_CACHE ?? '/var/tmp/rds-socket-kernel'}/instance`;

/**
 * Removes what an earlier mesh left in the instance directory (ready.mesh, mesh.done, kills.stop)
 * before a new mesh starts. The directory lives as long as the guest session, which the interop
 * files share: a ready.mesh left by another file made the host start sending before the new mesh
 * had bound its sockets (the kernel dropped every message as recv_drop_no_sock, and a pair
 * "received 0 of 200"), and a left mesh.done made the new mesh close its senders' sockets as soon
 * as they had sent (closing drops what they have not delivered).
 */
export function clearMeshMarkers(): void {
  for (const f of ['ready.mesh', 'mesh.done', 'kills.stop']) rmSync(`${INST}/${f}`, { force: true });
}

/** Waits (bounded) for a guest program's ready file in the shared instance directory. */
export async function readyFile(port: number): Promise<void> {
  const f = `${INST}/ready.${port}`;
  for (let i = 0; i < 3000 && !existsSync(f); i++) await new Promise((r) => setTimeout(r, 20));
  expect(existsSync(f), 'guest program never became ready').toBe(true);
}

export async function bound(stack: RdsStack, address: string, port: number): Promise<RdsSocket> {
  const s = new RdsSocket({ stack });
  await s.bind({ address, port });
  s.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 8 << 20);
  s.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 8 << 20);
  return s;
}

/** Kernel counters (RDS_INFO_COUNTERS through getsockopt in the guest). */
export async function kernelCounters(): Promise<Record<string, number>> {
  const r = await peer('counters');
  expect(r.code, r.out).toBe(0);
  return r.lines[0] as Record<string, number>;
}

/**
 * Unloads and reloads the kernel's RDS modules: the kernel forgets every connection.
 *
 * A guest program that a failed test left running (rdspeer.py lives up to its `timeout`) holds an
 * RDS socket and with it the rds module: `rmmod rds` then failed after `rmmod rds_tcp` had
 * worked, and every later file of the guest session found no RDS/TCP (CI, 7.x: one failed test
 * became thirteen). So guest programs are killed first, the unload is retried while their sockets
 * go away, and rds_tcp is loaded again whatever happened before the assertion.
 */
export async function reloadRds(): Promise<void> {
  const r = await guest(
    'pkill -9 -f rdspeer.py; u=0; for i in $(seq 100); do rmmod rds_tcp 2>/dev/null; ' +
      'if rmmod rds 2>/dev/null; then u=1; break; fi; sleep 0.1; done; ' +
      'modprobe rds_tcp && lsmod | grep -q "^rds_tcp " && if [ $u = 1 ]; then echo reloaded; ' +
      'else echo "rds stayed loaded:"; lsmod | grep "^rds"; fi',
  );
  expect(r.out).toContain('reloaded');
}

/**
 * Unloads and reloads rds_tcp only, as the nemesis's kernel-reload does: the kernel forgets every
 * TCP connection, but the rds module and its GEN_NUM stay (retried while its sockets go away).
 */
export async function reloadRdsTcp(): Promise<void> {
  const r = await guest(
    'for i in $(seq 100); do rmmod rds_tcp 2>/dev/null && break; sleep 0.1; done; modprobe rds_tcp && echo reloaded',
  );
  expect(r.out).toContain('reloaded');
}

const NFT_TABLE = 'rdslossblk';
const nft = (script: string): void => {
  execFileSync('nft', ['-f', '-'], { input: script, stdio: ['pipe', 'ignore', 'pipe'] });
};
/**
 * Drops traffic between our address `local` and the kernel, both ways (on this host, nftables):
 * all of it (a partition), or only that of our TCP ports given (connections kept out of sight
 * for good, so that the kernel's paths stay UP on them).
 */
export function cut(local: string, ports?: number[]): void {
  const o = ports === undefined ? '' : `tcp sport { ${ports.join(', ')} } `;
  const i = ports === undefined ? '' : `tcp dport { ${ports.join(', ')} } `;
  heal();
  nft(
    `table ip ${NFT_TABLE} {\n chain o { type filter hook output priority 0; ip saddr ${local} ip daddr ${KERNEL} ${o}drop; }\n` +
      ` chain i { type filter hook input priority 0; ip saddr ${KERNEL} ip daddr ${local} ${i}drop; }\n}\n`,
  );
}
/**
 * Drops only what the kernel sends to `local` (this host's input): our side of every connection
 * still flows, the kernel's waits in its TCP retransmission backoff, as after a partition.
 */
export function cutFromKernel(local: string): void {
  heal();
  nft(
    `table ip ${NFT_TABLE} {\n chain i { type filter hook input priority 0; ip saddr ${KERNEL} ip daddr ${local} drop; }\n}\n`,
  );
}
/** Ends what cut() did. */
export function heal(): void {
  try {
    nft(`delete table ip ${NFT_TABLE}\n`);
  } catch {
    // not there
  }
}

/** Polls `cond` every 10 ms until it holds or `ms` pass; returns whether it held. */
export async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 10));
  }
  return true;
}

/**
 * A mesh's verdict: every pair, the guest's (`theirs`) and ours, got all N messages once, in
 * order and intact, and none of ours timed out.
 */
/** Mesh message i from sender port `sport`: [i u32][pattern], as rdspeer.py mesh_body. */
export function meshBody(i: number, size: number, seed: number): Buffer {
  const b = Buffer.alloc(size);
  b.writeUInt32BE(i, 0);
  pattern(i, size - 4, seed).copy(b, 4);
  return b;
}

/** What one of our sockets received of a kernel mesh sender: expectEveryPairExact judges it. */
export interface MeshReceipt {
  port: number;
  got: number;
  dups: number;
  gaps: number;
  bad: number;
  strangers: number;
  next: number;
  timeout: boolean;
  /** The first skip seen: [index expected, index that came]. */
  firstGap?: [number, number];
}

/**
 * Receives the kernel mesh sender `kport`'s n messages on `s` (bodies seeded with seed + kport),
 * counting duplicates, gaps, corrupt bodies and messages from anyone else; `timeout` if the
 * socket went quiet for `quietMs` first (`firstMs` before the first message).
 */
export async function receiveMesh(
  s: RdsSocket,
  kport: number,
  n: number,
  seed: number,
  quietMs: number,
  firstMs = quietMs,
): Promise<MeshReceipt> {
  const r: MeshReceipt = {
    port: s.address().port,
    got: 0,
    dups: 0,
    gaps: 0,
    bad: 0,
    strangers: 0,
    next: 0,
    timeout: false,
  };
  try {
    while (r.next < n) {
      const m = await s.recv({ timeout: r.got === 0 && r.strangers === 0 ? firstMs : quietMs });
      if (m.address !== KERNEL || m.port !== kport) {
        r.strangers++;
        continue;
      }
      const i = m.data.length >= 4 ? m.data.readUInt32BE(0) : -1;
      if (i < r.next) {
        r.dups++;
        continue;
      }
      if (i > r.next) {
        r.gaps += i - r.next;
        r.firstGap ??= [r.next, i];
      }
      if (!m.data.equals(meshBody(i, m.data.length, seed + kport))) r.bad++;
      r.got++;
      r.next = i + 1;
    }
  } catch {
    r.timeout = true;
  }
  return r;
}

export function expectEveryPairExact(theirs: object[], ours: object[], n: number): void {
  const exact = { got: n, next: n, dups: 0, gaps: 0, bad: 0, strangers: 0 };
  for (const t of theirs) expect(t, JSON.stringify(t)).toMatchObject(exact);
  for (const o of ours) expect(o, JSON.stringify(o)).toMatchObject({ ...exact, timeout: false });
}

/**
 * tcpdump on the guest's link (the tap in this test's namespace), RDS/TCP only, whole packets,
 * into `file`; resolves once tcpdump listens. stop(keep) ends it and removes the file unless
 * `keep`. Without tcpdump on the machine it says so and captures nothing.
 */
export async function startCapture(file: string): Promise<{ file: string; stop(keep: boolean): Promise<void> }> {
  const p = spawn(
    'tcpdump',
    ['-i', process.env.RDS_TAP ?? 'rdstap0', '-s', '0', '-B', '32768', '-w', file, 'tcp port 16385'],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  const exited = new Promise<void>((r) => p.once('close', () => r()));
  let err = '';
  const listening = await new Promise<boolean>((resolve) => {
    p.stderr.on('data', (d) => {
      err += d;
      if (err.includes('listening on')) resolve(true);
    });
    p.once('error', () => resolve(false));
    p.once('close', () => resolve(false));
  });
  if (!listening) console.log(`packet capture not running: ${err.trim() || 'no tcpdump'}`);
  return {
    file,
    async stop(keep: boolean): Promise<void> {
      if (listening) {
        p.kill('SIGINT');
        await exited;
      }
      if (!keep) rmSync(file, { force: true });
      else console.log(`packet capture kept: ${file} (${err.trim().split('\n').slice(-3).join('; ')})`);
    },
  };
}
