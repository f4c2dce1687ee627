import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runNode } from './helpers.js';

const escapeRegExp = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

// The benchmark's own code, checked for correctness only (no timing asserts: machines are noisy).
describe('bench (smoke)', () => {
  it('runs every scenario for every contender and writes the ratio table and JSON', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'rds-bench-')), 'results.json');
    const r = await runNode(
      ['--expose-gc', fileURLToPath(new URL('../bench/run.mjs', import.meta.url)), '--smoke', '--out', out],
      230_000,
    );
    expect(r.code, r.out).toBe(0);
    expect(r.out).toMatch(/rds\/net\s+rds\/netb\s+rds\/zmq/);
    const json = JSON.parse(readFileSync(out, 'utf8')) as {
      results: Record<string, Record<string, unknown[]>>;
      ratios: { metric: string; rdsNetb: number }[];
      mesh: { nodes: number };
      sustained: { msgsPerSec: number; sender: { samples: number }; receiver: { samples: number } };
      headOfLine: {
        idle: { p50us: number };
        both: { p99us: number; mibPerSec: number };
        streamOnly: { mibPerSec: number };
      };
      scale: { peers: number; pathsUp: number; perPeerKiB: number };
      attached: {
        rows: { metric: string; inProcess: number; attached: number }[];
        fanout: { tcpConnections: number; coresBusy: number; cpuUsPerMsg: number };
        cores: number;
        throughputCeilings: { n: string; ipCores: number; atCores: number; atCeil: number; floorCeil: number }[];
        floors: { unixRttP50us: number; relayMiBps: number };
        cpuPerMessageUs: Record<string, { inProcessEach: number[]; attachedEach: number[] }>;
      };
      jobQueue: { rows: Record<string, { jobsPerSec: number }> };
      targets: { name: string; figure: number; target: string; met: boolean }[];
    };
    for (const [name, scenario] of Object.entries(json.results)) {
      // 64 KiB messages are also sent with MSG_ZEROCOPY (to a sink that connects, and one that accepts);
      // round trips have no batched node:net (a ping-pong has nothing to batch).
      const extra = name.startsWith('throughput 65536 B') ? ['rds-zc'] : [];
      const batched = name.startsWith('latency') ? [] : ['netb'];
      expect(Object.keys(scenario).sort()).toEqual(['net', ...batched, 'rds', ...extra, 'zmq']);
      for (const runs of Object.values(scenario)) expect(runs).toHaveLength(1);
    }
    expect(json.ratios.find((x) => x.metric === 'throughput 1024 B msgsPerSec')!.rdsNetb).toBeGreaterThan(0);
    // Head-of-line: pings idle and under a 1 MiB stream, the stream with and without them.
    expect(json.headOfLine.idle.p50us).toBeGreaterThan(0);
    expect(json.headOfLine.both.p99us).toBeGreaterThan(0);
    expect(json.headOfLine.streamOnly.mibPerSec).toBeGreaterThan(0);
    // Scale: every peer exchanged a message and negotiated its paths before the victim measured.
    expect(json.scale.peers).toBe(8);
    expect(json.scale.pathsUp).toBeGreaterThanOrEqual(8);
    // One line per target, judged on this run: figure, target, met or not met.
    expect(json.targets.map((t) => t.name)).toEqual(
      expect.arrayContaining([
        '1 KiB msgs/s vs node:net batched',
        '64 B msgs/s vs zeromq.js',
        '64 KiB msgs/s vs node:net batched',
        '64 KiB msgs/s vs zeromq.js, copying',
        'ping p50 under a 1 MiB stream vs idle (8 paths)',
        'ping p99 under a 1 MiB stream vs idle (8 paths)',
        'stream throughput with pings vs without (8 paths)',
        'RSS per idle peer, all paths',
        'fan-in 2x1 KiB msgs/s vs node:net',
        'fan-in 2x1 KiB msgs/s vs node:net batched',
        'attached: 1 KiB CPU per message attached (4 processes) <= 1.5x in-process',
        'attached: 64 KiB CPU per message attached (4 processes) <= 1.5x in-process',
        'attached: 1 KiB throughput attached >= 0.7x in-process',
        'attached: 64 KiB throughput attached >= 0.6x in-process',
        'attached: round trip p99 attached <= 3x in-process',
        'job queue jobs/s, rds-socket without confirm vs zeromq.js',
        'job queue jobs/s, rds-socket with confirm vs zeromq.js',
        'attached: 8+8 processes total >= 0.6x one in-process pair',
        'attached: 8+8 processes: at most npaths (8) TCP connections',
      ]),
    );
    // Attached sockets (host nodes) against in-process ones, each row measured both ways, and
    // the floors (plain sockets, no RDS) measured in the same run.
    expect(json.attached.rows).toHaveLength(4);
    for (const row of json.attached.rows) {
      expect(row.inProcess).toBeGreaterThan(0);
      expect(row.attached).toBeGreaterThan(0);
    }
    expect(json.targets.map((t) => t.name).some((n) => n.startsWith('attached: round trip p50 attached <='))).toBe(
      true,
    );
    // CPU per message per process: 2 in-process, 4 attached (two host nodes, receiver, sender).
    expect(json.attached.cpuPerMessageUs['1 KiB'].inProcessEach).toHaveLength(2);
    expect(json.attached.cpuPerMessageUs['64 KiB'].attachedEach).toHaveLength(4);
    for (const kind of ['rds', 'rds-confirm', 'zmq']) expect(json.jobQueue.rows[kind].jobsPerSec).toBeGreaterThan(0);
    expect(json.attached.fanout.tcpConnections).toBeGreaterThanOrEqual(1);
    // Throughput set against the cores: how busy each row kept them (every process's own CPU over
    // the counted seconds, the 18 of 8+8 too) and what that CPU per message allows at most.
    expect(json.attached.fanout.coresBusy).toBeGreaterThan(0);
    expect(json.attached.fanout.cpuUsPerMsg).toBeGreaterThan(0);
    expect(json.attached.throughputCeilings.map((c) => c.n)).toEqual(['1 KiB', '64 KiB']);
    for (const c of json.attached.throughputCeilings) {
      expect(c.atCores).toBeGreaterThan(0);
      expect(c.atCores).toBeLessThanOrEqual(json.attached.cores * 1.25);
      expect(c.floorCeil).toBeGreaterThan(0);
    }
    expect(r.out).toMatch(/throughput against the \d+ cores this run may use/);
    expect(json.attached.floors.unixRttP50us).toBeGreaterThan(0);
    expect(json.attached.floors.relayMiBps).toBeGreaterThan(0);
    for (const t of json.targets)
      expect(r.out).toMatch(
        new RegExp(`^${escapeRegExp(t.name)} .*target ${escapeRegExp(t.target)} +${t.met ? 'met' : 'not met'}$`, 'm'),
      );
    expect(r.out).toMatch(/raw TCP over loopback/);
    expect(json.ratios.map((x) => x.metric)).toContain('throughput 65536 B msgsPerSec MSG_ZEROCOPY');
    expect(json.ratios.map((x) => x.metric)).toContain('throughput 65536 B, sink accepts msgsPerSec MSG_ZEROCOPY');
    expect(Object.keys(json.results)).toHaveLength(6);
    expect(json.ratios.length).toBeGreaterThanOrEqual(10);
    expect(json.mesh.nodes).toBeGreaterThan(1);
    expect(r.out).toMatch(/sustained .* heap after GC: sender .* receiver/);
    expect(json.sustained.msgsPerSec).toBeGreaterThan(0);
    expect(json.sustained.sender.samples).toBeGreaterThan(2);
    expect(json.sustained.receiver.samples).toBeGreaterThan(2);
  }, 240_000);
});
