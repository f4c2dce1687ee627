import { connect } from 'node:net';

// What the kernel-guest suites of test/ib/run.sh share (kernel-ib.test.ts, kernel-rdma.test.ts):
// the kernel guest's command server (test/ib/guest/kctl.py) and the addresses on each side.
const KCTL = (process.env.RDS_IB_KCTL ?? '').split(':');
const ROOT = process.cwd();
/** The kernel's addresses (rxe1 in the kernel guest) and ours (rxe0 here), pairwise: K1/L1 ... */
export const KERNEL_ADDRS = (process.env.RDS_IB_KERNEL_ADDRS ?? '').split(',') as [string, string, string];
export const LOCAL_ADDRS = (process.env.RDS_IB_LOCAL_ADDRS ?? '').split(',') as [string, string, string];
/** Whether RDS_IB_KCTL names kctl.py's host:port (set by test/ib/run.sh). */
export const KCTL_SET = KCTL.length === 2;

/** Runs a bash command in the kernel guest; resolves with its status, output and JSON lines. */
export function kernel(
  cmd: string,
  timeoutS = 150,
): Promise<{ code: number; out: string; lines: Record<string, unknown>[] }> {
  return new Promise((resolve, reject) => {
    const s = connect(Number(KCTL[1]), KCTL[0]!);
    let buf = '';
    s.on('data', (d: Buffer) => (buf += d));
    s.on('error', reject);
    s.on('end', () => {
      try {
        const r = JSON.parse(buf) as { rc: number; out: string };
        const lines = r.out
          .split('\n')
          .filter((l) => l.startsWith('{'))
          .map((l) => JSON.parse(l) as Record<string, unknown>);
        resolve({ code: r.rc, out: r.out, lines });
      } catch (e) {
        reject(new Error(`kctl answered ${JSON.stringify(buf)}: ${(e as Error).message}`));
      }
    });
    s.write(`${JSON.stringify({ cmd: `cd '${ROOT}' && ${cmd}`, timeout: timeoutS })}\n`);
  });
}

/** Waits until the kernel guest has file /rdsinst/NAME (rdspeer's ready marks). */
export async function kernelFile(name: string, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const r = await kernel(`test -e /rdsinst/${name}`, 10);
    if (r.code === 0) return;
    if (Date.now() > deadline) throw new Error(`kernel guest: /rdsinst/${name} never appeared`);
    await new Promise((r2) => setTimeout(r2, 200));
  }
}

/** The kernel's log has no WARNING, BUG, Oops or stall (what our probe once caused). */
export async function kernelLogClean(): Promise<string> {
  const r = await kernel('dmesg | grep -E "WARNING|BUG|Oops|rcu.*stall|soft lockup" || true');
  return r.out.trim();
}
