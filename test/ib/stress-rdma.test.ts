import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { IB_ADDRS, runNode } from '../helpers.js';

// rds-stress -D between two rds-socket processes over Soft-RoCE (npm run test:ib): the passive
// side takes IB because the active asks for RDMA, every request carries an RDMA READ or WRITE, -v
// checks the data both ways (a WRITE into the requester's region, a fenced READ of it), and the
// mbi/mbo columns count it. Against Oracle's rds-stress on rds_rdma: kernel-stress.test.ts.
const [A, B] = IB_ADDRS as [string, string];
const cli = fileURLToPath(new URL('../../dist/cli/rds-stress.js', import.meta.url));

function average(out: string): number[] {
  const line = out.split('\n').find((l) => l.endsWith('(average)'));
  expect(line, out).toBeDefined();
  return line!.replace('(average)', '').trim().split(/\s+/).map(Number);
}

async function run(port: number, extra: string[]): Promise<{ passive: number[]; active: number[]; outs: string }> {
  const passive = runNode([cli, '-r', B, '-p', String(port), '--startup', '2'], 150_000);
  const active = await runNode(
    [cli, '-s', B, '-r', A, '-p', String(port), '--startup', '2', '--connect-retries', '30', '-T', '10', ...extra],
    150_000,
  );
  const p = await passive;
  expect(active.code, `active:\n${active.out}\npassive:\n${p.out}`).toBe(0);
  expect(p.code, `passive:\n${p.out}`).toBe(0);
  // A failed op is counted, not fatal: only the last ones, on the wire when the other side's run
  // ended and its regions went with its stack, may fail. Each local task keeps `depth` ops in
  // flight to each remote task, so at most tasks x tasks x depth per side (CI saw 10 with 2 tasks
  // and depth 4, above the tasks x depth = 8 first assumed).
  const flag = (f: string, d: number) => (extra.includes(f) ? Number(extra[extra.indexOf(f) + 1]) : d);
  const bound = flag('-t', 1) * flag('-t', 1) * flag('-d', 1);
  for (const out of [active.out, p.out]) {
    const failed = /(\d+) RDMA operation\(s\) failed/.exec(out);
    if (failed === null) continue;
    expect(Number(failed[1]), out).toBeLessThanOrEqual(bound);
    // The count names the last failure, so an operator can tell an end-of-run remote error from
    // anything else.
    expect(out).toMatch(/failed \(.*\); last: RDMA (write|read) for remote task \d+ failed: \S+/);
  }
  return { passive: average(p.out), active: average(active.out), outs: `active:\n${active.out}\npassive:\n${p.out}` };
}

describe('rds-stress -D between rds-socket nodes (Soft-RoCE)', () => {
  it('RDMA_MAP regions, READ and WRITE alternating, two tasks, depth 4, verified: both sides move data both ways', async () => {
    const r = await run(5100, ['-D', '8192', '-v', '-t', '2', '-d', '4']);
    for (const row of [r.active, r.passive]) {
      // tsks tx/s rx/s tx+rx mbi mbo ...: requests both ways, RDMA in and out on each side.
      expect(row[0], r.outs).toBe(2);
      expect(row[1], r.outs).toBeGreaterThan(0);
      expect(row[4], r.outs).toBeGreaterThan(0);
      expect(row[5], r.outs).toBeGreaterThan(0);
    }
  });

  it('WRITE only with RDS_GET_MR regions cached per slot, three buffers per op; READ only with USE_ONCE regions, simplex', async () => {
    const w = await run(5110, [
      '-D',
      '4096',
      '-I',
      '3',
      '-M',
      '2',
      '--rdma-use-get-mr',
      '1',
      '--rdma-cache-mrs',
      '1',
      '-v',
    ]);
    // A WRITE moves data into the requester (mbi) and out of the side that posts it (mbo).
    expect(w.active[4], w.outs).toBeGreaterThan(0);
    expect(w.passive[5], w.outs).toBeGreaterThan(0);
    const rd = await run(5120, ['-D', '4096', '-M', '1', '--rdma-use-once', '1', '-o', '-v']);
    // Simplex: only the active requests; READs move its data out (mbo) and into the passive (mbi).
    expect(rd.active[1], rd.outs).toBeGreaterThan(0);
    expect(rd.passive[1], rd.outs).toBe(0);
    expect([rd.active[4], rd.active[5] > 0], rd.outs).toEqual([0, true]);
    expect([rd.passive[4] > 0, rd.passive[5]], rd.outs).toEqual([true, 0]);
  });
});
