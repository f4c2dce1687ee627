import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runNode } from '../helpers.js';
import { KCTL_SET, KERNEL_ADDRS, LOCAL_ADDRS, kernel, kernelLogClean } from './kernel-ctl.js';

// rds-stress -D against Oracle's rds-stress (rds-tools 2.0.7) on the kernel's RDS/IB (rds_rdma) in
// the kernel guest of test/ib/run.sh, both roles, both address orders. rds-tools is not packaged
// for Debian: $RDS_STRESS_ORACLE names an rds-stress built from oracle/rds-tools (docs/rds-stress-rdma.md
// says how); without it these scenarios are skipped, saying so.
const ORACLE = process.env.RDS_STRESS_ORACLE ?? '';
const [K1, K2] = KERNEL_ADDRS;
const [L1, L2] = LOCAL_ADDRS;
const cli = fileURLToPath(new URL('../../dist/cli/rds-stress.js', import.meta.url));

if (ORACLE === '')
  console.warn('kernel-stress.test.ts: RDS_STRESS_ORACLE is not set, Oracle rds-stress -D scenarios skipped');

/** The (average) row: tsks tx/s rx/s tx+rx mbi mbo tx-us/c rtt cpu. */
function average(who: string, out: string): number[] {
  const line = out.split('\n').find((l) => l.trimEnd().endsWith('(average)'));
  expect(line, `${who} printed no (average) row:\n${out}`).toBeDefined();
  return line!.replace('(average)', '').trim().split(/\s+/).map(Number);
}

/** Both average rows show requests and RDMA both ways (neither side simplex). */
function movedBothWays(ours: string, theirs: string): void {
  for (const [who, out] of [
    ['ours', ours],
    ["Oracle's", theirs],
  ] as const) {
    const row = average(who, out);
    const why = `${who}:\n${out}`;
    expect(row[1], why).toBeGreaterThan(0);
    expect(row[2], why).toBeGreaterThan(0);
    expect(row[4], why).toBeGreaterThan(0);
    expect(row[5], why).toBeGreaterThan(0);
  }
}

describe.skipIf(ORACLE === '')("rds-stress -D against Oracle's rds-stress on rds_rdma", () => {
  it('Oracle passive on the kernel, rds-socket active (kernel on the smaller address): RDMA_MAP, READ/WRITE, verified', async () => {
    expect(KCTL_SET).toBe(true);
    const theirs = kernel(`timeout 120 ${ORACLE} -r ${K1} -p 4900`, 150);
    const ours = await runNode(
      [
        cli,
        '-s',
        K1,
        '-r',
        L1,
        '-p',
        '4900',
        '--connect-retries',
        '30',
        '-D',
        '8192',
        '-v',
        '-d',
        '2',
        '-t',
        '2',
        '-T',
        '5',
      ],
      150_000,
    );
    const k = await theirs;
    expect(ours.code, `ours:\n${ours.out}\nOracle's:\n${k.out}`).toBe(0);
    expect(k.code, `Oracle's:\n${k.out}`).toBe(0);
    movedBothWays(ours.out, k.out);
  });

  it('rds-socket passive, Oracle active (rds-socket on the smaller address): two tasks, two buffers per op, verified; the kernel refuses RDS_GET_MR', async () => {
    // rds_rdma registers with FRWR only, and FRWR needs a connection: RDS_GET_MR (no connection)
    // is EOPNOTSUPP on every mainline kernel since FMR went, so Oracle's --rdma-use-get-mr 1 dies.
    const refused = runNode([cli, '-r', L2, '-p', '4905'], 150_000);
    const g = await kernel(
      `timeout 120 ${ORACLE} -s ${L2} -r ${K2} -p 4905 --connect-retries 30 -D 4096 --rdma-use-get-mr 1 -T 10`,
      150,
    );
    await refused;
    expect(g.code, g.out).not.toBe(0);
    expect(g.out).toMatch(/setsockopt\(RDS_GET_MR\) failed .*errno: 95/);
    const ours = runNode([cli, '-r', L2, '-p', '4910'], 150_000);
    const k = await kernel(
      `timeout 120 ${ORACLE} -s ${L2} -r ${K2} -p 4910 --connect-retries 30 -D 4096 -I 2 -t 2 -v -d 2 -T 10`,
      150,
    );
    const o = await ours;
    expect(k.code, `Oracle's:\n${k.out}\nours:\n${o.out}`).toBe(0);
    expect(o.code, `ours:\n${o.out}`).toBe(0);
    movedBothWays(o.out, k.out);
  });

  it('Oracle active with USE_ONCE regions and WRITE only; the kernel log stays clean', async () => {
    const ours = runNode([cli, '-r', L2, '-p', '4920'], 150_000);
    const k = await kernel(
      `timeout 120 ${ORACLE} -s ${L2} -r ${K2} -p 4920 --connect-retries 30 -D 16384 -M 2 --rdma-use-once 1 -v -T 10`,
      90,
    );
    const o = await ours;
    expect(k.code, `Oracle's:\n${k.out}\nours:\n${o.out}`).toBe(0);
    expect(o.code, `ours:\n${o.out}`).toBe(0);
    const [ko, oo] = [average("Oracle's", k.out), average('ours', o.out)];
    // WRITE only: each side's requests bring data in (mbi), each side's answers send it out (mbo).
    for (const row of [ko, oo])
      expect([row[4] > 0, row[5] > 0], `Oracle's:\n${k.out}\nours:\n${o.out}`).toEqual([true, true]);
    expect(await kernelLogClean()).toBe('');
  });
});
