import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { RDS_COUNTER_NAMES } from '../lib/index.js';
import { runNode } from './helpers.js';

// rds-stress --show-perfdata and -Q (issue 38): two rds-stress processes, the active asking for
// the "::" lines scripts parse (rds-tools' columns: the run's, every RDS counter per second read
// with RDS_INFO_COUNTERS, the CPU split) and a TOS on every socket. Addresses 127.141.x.y.
const cli = fileURLToPath(new URL('../dist/cli/rds-stress.js', import.meta.url));
const TCP = 27141;
const stress = (args: string[]) => runNode([cli, '--tcp-port', String(TCP), '--startup', '0', ...args], 40_000);

describe('rds-stress --show-perfdata', () => {
  it('prints the "::" header and one row a second with as many values as rds-tools prints', async () => {
    const passive = stress(['-r', '127.141.0.2', '-p', '4920']);
    const active = await stress([
      '-s',
      '127.141.0.2',
      '-r',
      '127.141.0.1',
      '-p',
      '4920',
      '--connect-retries',
      '20',
      '-Q',
      '5',
      '-T',
      '2',
      '--show-perfdata',
    ]);
    const p = await passive;
    expect(active.code, active.out).toBe(0);
    expect(p.code, p.out).toBe(0);
    const lines = active.out.split('\n').filter((l) => l.startsWith('::'));
    expect(lines.length, active.out).toBeGreaterThanOrEqual(2);
    const header = lines[0]!.slice(2).split(',');
    expect(header.slice(0, 10)).toEqual([
      'nr_tasks:count',
      'req_size:bytes',
      'ack_size:bytes',
      'rdma_size:bytes',
      'req_sent:count',
      'thruput:kB/s',
      'thruput_rdma:kB/s',
      'tx_delay:microseconds',
      'rtt:microseconds',
      'cpu:percent',
    ]);
    const counters = header.slice(10, 10 + RDS_COUNTER_NAMES.length);
    expect(counters).toEqual(RDS_COUNTER_NAMES.map((n) => `${n}:${n.includes('_bytes') ? 'bytes' : 'count'}`));
    expect(header.slice(10 + RDS_COUNTER_NAMES.length)).toEqual([
      'user:percent',
      'system:percent',
      'idle:percent',
      'irq:percent',
      'intr:count',
    ]);
    for (const row of lines.slice(1)) {
      const v = row.slice(2).split(',');
      // rds-tools' rows carry RDMA in and out where its header names one column: one value more.
      expect(v).toHaveLength(header.length + 1);
      expect(v.slice(0, 4).map(Number)).toEqual([1, 1024, 63, 0]);
      for (const x of v) expect(Number.isFinite(Number(x)), row).toBe(true);
    }
    // Requests went out, and the node counted them (its counters, per second).
    const rows = lines.slice(1).map((l) => l.slice(2).split(',').map(Number));
    expect(rows.some((r) => r[4]! > 0)).toBe(true);
    const sent = 11 + RDS_COUNTER_NAMES.indexOf('send_queued' as never);
    expect(RDS_COUNTER_NAMES).toContain('send_queued');
    expect(rows.some((r) => r[sent]! > 0)).toBe(true);
    // No table rows in this mode, and the average row as ever.
    expect(active.out).not.toMatch(/tsks +tx\/s/);
    expect(active.out).toMatch(/\(average\)/);
  });
});
