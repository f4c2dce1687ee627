import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runNode } from './helpers.js';
import { stressActivePeer, stressPassivePeer } from './fixtures/stress-peer.js';
import {
  decodeStressOptions,
  defaultStressOptions,
  encodeStressOptions,
  stressMismatch,
  stressOptionsLength,
  stressPattern,
  encodeStressHeader,
  OP_REQ,
} from '../lib/cli/stress-wire.js';

// rds-stress (the command, run as a user would) against a peer that speaks rds-tools' protocol as
// described in shared/spec/rds-stress-protocol.md, in both roles. Addresses 127.150.x.y.
const cli = fileURLToPath(new URL('../dist/cli/rds-stress.js', import.meta.url));
const TCP = 27150;
const stress = (args: string[], ms = 40000) => runNode([cli, '--tcp-port', String(TCP), '--startup', '0', ...args], ms);

function averageRow(out: string): number[] {
  const line = out.split('\n').find((l) => l.endsWith('(average)'));
  expect(line, out).toBeDefined();
  return line!.replace('(average)', '').trim().split(/\s+/).map(Number);
}

describe('rds-stress wire formats', () => {
  it('options round-trip in both forms, and the passive tells them apart by the version string', () => {
    const o = {
      ...defaultStressOptions(),
      reqDepth: 3,
      reqSize: 4096,
      sendAddr: '10.1.2.3',
      receiveAddr: '10.1.2.4',
      startingPort: 4100,
      nrTasks: 5,
      runTime: 9,
      verify: 1,
      simplex: 1,
    };
    const legacy = encodeStressOptions(o, false);
    expect(legacy).toHaveLength(59);
    // send_addr in network order at 16, suppress_warnings 0xff at 44, rdma_vector 1 at 47
    expect([...legacy.subarray(16, 20)]).toEqual([10, 1, 2, 3]);
    expect(legacy[44]).toBe(0xff);
    expect(legacy.readUInt32BE(47)).toBe(1);
    expect(stressOptionsLength(legacy.subarray(0, 16))).toBe(59);
    expect(decodeStressOptions(legacy).options).toMatchObject({
      reqDepth: 3,
      reqSize: 4096,
      sendAddr: '10.1.2.3',
      nrTasks: 5,
      verify: 1,
      simplex: 1,
    });
    const full = encodeStressOptions({ ...o, tos: 3, async: 1 }, true);
    expect(full).toHaveLength(77);
    expect(full.subarray(0, 6).toString('latin1')).toBe('2.0.7\0');
    expect(full[6]).toBe(0xff);
    expect(stressOptionsLength(full.subarray(0, 16))).toBe(77);
    expect(decodeStressOptions(full).options).toMatchObject({ tos: 3, async: 1, reqSize: 4096 });
  });

  it('the verify pattern shifts per 256-byte block, and a mismatch names the field or the offset', () => {
    const p = stressPattern(600);
    expect([...p.subarray(0, 3)]).toEqual([11, (41 * 14) & 0xff, (41 * (41 * 14 + 3)) & 0xff]);
    const msg = Buffer.alloc(63 + 600);
    p.copy(msg, 63);
    const h = {
      seq: 7,
      fromAddr: '127.0.0.1',
      toAddr: '127.0.0.2',
      fromPort: 4001,
      toPort: 4002,
      index: 1,
      op: OP_REQ,
    };
    encodeStressHeader(msg, h);
    expect(stressMismatch(msg, h, p)).toBeNull();
    expect(stressMismatch(msg, { ...h, seq: 8 }, p)).toMatch(/^ +seq +8 != +7$/m);
    msg[63 + 300]! ^= 1;
    expect(stressMismatch(msg, h, p)).toBe(
      'An incoming message has a corrupted payload at offset 300; 1 out of 600 bytes corrupted',
    );
  });
});

describe('rds-stress options it does not take', () => {
  it('-D over TCP, and RDMA options it cannot honour, are refused with usage status 2, saying why', async () => {
    const d = await stress(['-D', '1024', '--transport', 'tcp', '-s', '127.150.9.2', '-r', '127.150.9.1']);
    expect(d.code, d.out).toBe(2);
    expect(d.out).toMatch(/RDMA \(-D\) needs an InfiniBand\/RoCE transport: RDS\/TCP cannot register memory/);
    const cases = [
      [['-D', '4096', '-I', '513'], /-I needs an integer 1\.\.512/],
      [['-D', '2000000'], /-D needs an integer 0\.\.1048576/],
      [['-D', '65536', '-I', '32'], /an RDMA op of 65536 x 32 bytes is more than 1048576/],
      [['-D', '1048576', '-d', '64', '-t', '4'], /the RDMA buffers .* would be more than 268435456/],
      [['-M', '3'], /-M needs an integer 0\.\.2/],
      [
        ['-D', '4096', '--rdma-cache-mrs', '1', '--rdma-use-once', '1'],
        /--rdma-cache-mrs conflicts with --rdma-use-once/,
      ],
      [['-D', '4096', '--rdma-cache-mrs', '1'], /--rdma-cache-mrs conflicts with --rdma-use-get-mr=0/],
      [['-D', '4096', '--rdma-alignment', '8'], /--rdma-alignment is not supported: .* a Node Buffer cannot be placed/],
      [['-D', '4096', '--rdma-key-o-meter'], /--rdma-key-o-meter is not supported/],
      [['--transport', 'rdma'], /--transport takes tcp or ib, got rdma/],
    ] as const;
    // Refused while parsing, before any socket: the runs need no ports and go side by side.
    const runs = await Promise.all(cases.map(([args]) => stress([...args, '-s', '127.150.9.2', '-r', '127.150.9.1'])));
    runs.forEach((r, i) => {
      expect(r.code, `${cases[i]![0].join(' ')}: ${r.out}`).toBe(2);
      expect(r.out).toMatch(cases[i]![1]);
    });
    // Eleven node start-ups: the budget is for them (about 1 s each on an idle machine), not for the tool.
  }, 120_000);

  it('passive with --transport tcp: an active asking for RDMA is told it needs IB (exit 1), nothing bound', async () => {
    const passive = stress(['-r', '127.150.5.3', '-p', '4850', '--transport', 'tcp']);
    const o = { ...defaultStressOptions(), rdmaSize: 8192, sendAddr: '127.150.5.3', receiveAddr: '127.150.5.4' };
    for (let attempt = 0; ; attempt++) {
      const s = connect({ host: '127.150.5.3', port: 4850 });
      const ok = await new Promise<boolean>((res) =>
        s.once('connect', () => res(true)).once('error', () => res(false)),
      );
      if (ok) {
        s.end(encodeStressOptions(o, false));
        break;
      }
      s.destroy();
      expect(attempt).toBeLessThan(200);
      await new Promise((r) => setTimeout(r, 50));
    }
    const r = await passive;
    expect(r.code, r.out).toBe(1);
    expect(r.out).toMatch(/asked for RDMA \(-D 8192\): RDMA \(-D\) needs an InfiniBand\/RoCE transport/);
  });
});

describe('rds-stress against an rds-tools peer', () => {
  it('passive: serves the 59-byte options from an active peer, both ways verified, ends when the peer closes', async () => {
    const passive = stress(['-r', '127.150.1.2', '-p', '4800']);
    const peer = await stressActivePeer({
      local: '127.150.1.1',
      dest: '127.150.1.2',
      ctlPort: 4800,
      tcpPort: TCP,
      tasks: 2,
      depth: 4,
      req: 2000,
      ack: 100,
      verify: true,
      runMs: 2500,
    });
    const r = await passive;
    expect(peer.mismatches).toEqual([]);
    expect(peer.acksReceived).toBeGreaterThan(0);
    expect(peer.reqReceived).toBeGreaterThan(0); // not simplex: the passive sends requests too
    expect(r.code, r.out).toBe(0);
    expect(r.out).toMatch(/^Starting up\n/);
    expect(r.out).toContain('tsks   tx/s   rx/s  tx+rx K/s    mbi K/s    mbo K/s tx us/c   rtt us cpu %');
    const avg = averageRow(r.out);
    expect(avg[0]).toBe(2);
    expect(avg[2]).toBeGreaterThan(0);
    expect(avg[8]).toBe(-1);
  });

  it('active: sends options the peer reads as rds-tools would, verified both ways, no histogram unless asked', async () => {
    let ready!: () => void;
    const listening = new Promise<void>((r) => (ready = r));
    const peer = stressPassivePeer({ local: '127.150.2.2', ctlPort: 4810, tcpPort: TCP }, ready);
    await listening;
    const r = await stress([
      '-s',
      '127.150.2.2',
      '-r',
      '127.150.2.1',
      '-p',
      '4810',
      '-t',
      '2',
      '-d',
      '2',
      '-q',
      '3000',
      '-a',
      '70',
      '-v',
      '-T',
      '2',
    ]);
    const seen = await peer;
    expect(r.code, r.out).toBe(0);
    expect(seen.mismatches).toEqual([]);
    expect(seen.reqReceived).toBeGreaterThan(0);
    expect(seen.options).toHaveLength(59);
    const o = seen.options;
    expect([o.readUInt32BE(0), o.readUInt32BE(4), o.readUInt32BE(8), o.readUInt32BE(12)]).toEqual([2, 3000, 70, 0]);
    expect([...o.subarray(16, 24)]).toEqual([127, 150, 2, 2, 127, 150, 2, 1]);
    expect([o.readUInt16BE(24), o.readUInt16BE(26), o.readUInt32BE(28)]).toEqual([4810, 2, 2]);
    expect(o[35]).toBe(1); // verify
    expect(o[38]).toBe(1); // use_cong_monitor
    expect(o[44]).toBe(0xff); // suppress_warnings, as the real tool sends it
    expect(averageRow(r.out)[1]).toBeGreaterThan(0);
    expect(r.out).not.toMatch(/rtt histogram/);
  });

  it('active with --async sends the 77-byte form; -o keeps the passive from sending requests', async () => {
    let ready!: () => void;
    const listening = new Promise<void>((r) => (ready = r));
    const peer = stressPassivePeer({ local: '127.150.3.2', ctlPort: 4820, tcpPort: TCP }, ready);
    await listening;
    const r = await stress([
      '-s',
      '127.150.3.2',
      '-r',
      '127.150.3.1',
      '-p',
      '4820',
      '--async',
      '-o',
      '-v',
      '-T',
      '1',
      '--histogram',
    ]);
    const seen = await peer;
    expect(r.code, r.out).toBe(0);
    expect(seen.options).toHaveLength(77);
    expect(seen.options.subarray(0, 6).toString('latin1')).toBe('2.0.7\0');
    expect(seen.options[16 + 45]).toBe(1); // simplex
    expect(seen.options[76]).toBe(1); // async
    expect(seen.mismatches).toEqual([]);
    expect(seen.reqSent).toBe(0);
    expect(averageRow(r.out)[2]).toBe(0); // rx/s: no requests came back
    expect(r.out).toMatch(/rtt p50 [\d.]+ us, p99 [\d.]+ us/);
  });

  it('a corrupted payload is reported as rds-tools reports it, and the run fails', async () => {
    let ready!: () => void;
    const listening = new Promise<void>((r) => (ready = r));
    const peer = stressPassivePeer({ local: '127.150.4.2', ctlPort: 4830, tcpPort: TCP, corruptReq: 5 }, ready);
    await listening;
    const r = await stress(['-s', '127.150.4.2', '-r', '127.150.4.1', '-p', '4830', '-v', '-T', '3']);
    await peer;
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/An incoming message has a corrupted payload at offset 960; 1 out of 961 bytes corrupted/);
    expect(r.out).toMatch(/header from 127\.150\.4\.2:4831 to id 4831 bogus/);
  });

  it('passive: bytes that are not rds-stress options are reported with what arrived, not a crash', async () => {
    const passive = stress(['-r', '127.150.5.2', '-p', '4840']);
    for (let attempt = 0; ; attempt++) {
      const s = connect({ host: '127.150.5.2', port: 4840 });
      const ok = await new Promise<boolean>((res) =>
        s.once('connect', () => res(true)).once('error', () => res(false)),
      );
      if (ok) {
        s.end(`{"params":{"req":1024}}\n${'x'.repeat(40)}`);
        break;
      }
      s.destroy();
      expect(attempt).toBeLessThan(200);
      await new Promise((r) => setTimeout(r, 50));
    }
    const r = await passive;
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/sent options we cannot run: .* \(got 59 bytes: 7b 22 70 61/);
    expect(r.out).not.toMatch(/SyntaxError|at .*\.js:\d+/);
  });

  it('active: a passive that never answers the go byte is reported after --timeout', async () => {
    let ready!: () => void;
    const listening = new Promise<void>((r) => (ready = r));
    const peer = stressPassivePeer({ local: '127.150.6.2', ctlPort: 4850, tcpPort: TCP, silent: true }, ready);
    await listening;
    const r = await stress(['-s', '127.150.6.2', '-r', '127.150.6.1', '-p', '4850', '--timeout', '1', '-T', '1']);
    await peer;
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/no go byte back from the passive side at 127\.150\.6\.2:4850 within 1 s \(got no bytes\)/);
  });

  it('active: an unreachable passive side is reported, with --connect-retries honoured', async () => {
    const r = await stress(['-s', '127.150.7.2', '-r', '127.150.7.1', '-p', '4860', '--connect-retries', '1']);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/cannot reach the passive side at 127\.150\.7\.2:4860/);
  });
});
