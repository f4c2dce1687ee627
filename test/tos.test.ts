import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import {
  IbTransport,
  LoopTransport,
  RdsSocket,
  RdsStack,
  TcpTransport,
  constants,
  type RdsTransport,
} from '../lib/index.js';
import { rdsIoctl } from '../lib/core/tos.js';
import { makePair, type Pair, runNode, TEST_TCP_PORT, timeout } from './helpers.js';

// SIOCRDSSETTOS / SIOCRDSGETTOS (issue 38), as af_rds.c's rds_ioctl: a transport maps the TOS
// (TCP: every TOS to 0, one connection for all), once and before the first send.
const { SIOCRDSSETTOS, SIOCRDSGETTOS } = constants;
const NET = 139;

describe.each(['tcp', 'attached', 'attached-process'] as const)('SIOCRDSSETTOS over %s', (kind) => {
  let pair: Pair | null = null;
  let host = kind === 'tcp' ? 0 : kind === 'attached' ? 64 : 128;
  afterEach(async () => {
    await pair?.close();
    pair = null;
  });

  it('maps every TOS to 0 on TCP, may be repeated until the first send, then is EINVAL; messages still flow', async () => {
    pair = await makePair(kind, NET, ++host);
    expect(pair.a.ioctl(SIOCRDSSETTOS, 5)).toBe(0);
    expect(pair.a.ioctl(SIOCRDSGETTOS)).toBe(0); // rs_tos: what TCP mapped it to
    // Still 0 kept, so a second set is taken (the kernel's check is rs_tos || rs_conn).
    expect(pair.a.ioctl(SIOCRDSSETTOS, 255)).toBe(0);
    await pair.a.send(Buffer.from('with tos'), pair.b.address(), { signal: timeout() });
    expect((await pair.b.recv({ signal: timeout() })).data.toString()).toBe('with tos');
    expect(() => pair!.a.ioctl(SIOCRDSSETTOS, 1)).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/before the socket first sends/) }),
    );
    expect(pair.a.ioctl(SIOCRDSGETTOS)).toBe(0);
  });

  it('needs a transport (ENOTTY before bind unless SO_RDS_TRANSPORT), a TOS of 0..255, a known request', async () => {
    pair = await makePair(kind, NET, ++host);
    const u = new RdsSocket({ stack: pair.stackA });
    expect(() => u.ioctl(SIOCRDSSETTOS, 1)).toThrow(expect.objectContaining({ code: 'ENOTTY' }));
    expect(u.ioctl(SIOCRDSGETTOS)).toBe(0);
    u.setsockopt(constants.SOL_RDS, constants.SO_RDS_TRANSPORT, constants.RDS_TRANS_TCP);
    expect(u.ioctl(SIOCRDSSETTOS, 1)).toBe(0);
    for (const bad of [256, -1, 1.5, undefined])
      expect(() => pair!.a.ioctl(SIOCRDSSETTOS, bad)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(() => pair!.a.ioctl(0x8912)).toThrow(expect.objectContaining({ code: 'ENOTTY' }));
    await u.close();
    expect(() => u.ioctl(SIOCRDSGETTOS)).toThrow(expect.objectContaining({ code: 'EBADF' }));
  });
});

describe('the TOS maps of the transports', () => {
  it('IB keeps the TOS (a connection per TOS), TCP maps every TOS to 0, loopback has no map (ENOTTY)', () => {
    const ib = new IbTransport();
    const tcp = new TcpTransport();
    for (const tos of [0, 3, 255]) {
      expect(ib.tosMap(tos)).toBe(tos);
      expect(tcp.tosMap(tos)).toBe(0);
    }
    expect((new LoopTransport() as RdsTransport).tosMap).toBeUndefined();
    const none = { map: () => null, kept: 0, sent: false };
    expect(() => rdsIoctl(SIOCRDSSETTOS, 3, none)).toThrow(expect.objectContaining({ code: 'ENOTTY' }));
    // What the kernel's rds_ioctl checks after the map: rs_tos already set, or a cached rs_conn.
    expect(rdsIoctl(SIOCRDSSETTOS, 3, { map: (t) => t, kept: 0, sent: false })).toBe(3);
    expect(() => rdsIoctl(SIOCRDSSETTOS, 3, { map: (t) => t, kept: 2, sent: false })).toThrow(
      expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(/already has TOS 2/) }),
    );
    expect(() => rdsIoctl(SIOCRDSSETTOS, 3, { map: (t) => t, kept: 0, sent: true })).toThrow(
      expect.objectContaining({ code: 'EINVAL' }),
    );
    expect(rdsIoctl(SIOCRDSGETTOS, undefined, { map: (t) => t, kept: 2, sent: true })).toBe(2);
  });
});

describe('rds-ping -Q and rds-stress -Q', () => {
  const cli = (name: string): string => fileURLToPath(new URL(`../dist/cli/${name}.js`, import.meta.url));
  const stacks: RdsStack[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });

  it('rds-ping -Q 7 sets the TOS on its sockets and is answered; -Q 256 is bad usage', async () => {
    const node = new RdsStack({ tcpPort: TEST_TCP_PORT });
    stacks.push(node);
    const s = new RdsSocket({ stack: node });
    await s.bind({ address: `127.${NET}.200.2`, port: 4000 });
    const r = await runNode(
      [
        cli('rds-ping'),
        '-c',
        '2',
        '-i',
        '50ms',
        '-Q',
        '7',
        '-I',
        `127.${NET}.200.1`,
        '--tcp-port',
        String(TEST_TCP_PORT),
        `127.${NET}.200.2`,
      ],
      30_000,
    );
    expect(r.out.split('\n').filter((l) => /^ +\d+: \d+ usec$/.test(l))).toHaveLength(2);
    expect(r.code).toBe(0);
    const bad = await runNode([cli('rds-ping'), '-Q', '256', `127.${NET}.200.2`], 30_000);
    expect(bad.code).toBe(2);
    expect(bad.out).toMatch(/bad TOS "256"/);
  });
});
