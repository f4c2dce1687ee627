import { afterAll, describe, expect, it } from 'vitest';
import { RdsStack, constants } from '../../lib/index.js';
import { bound, guest, KERNEL, pattern, PEER, ready, reloadRds, sha, SMALL } from './kernel-lib.js';

// A socket's TOS over RDS/TCP with a kernel peer (issue 38): the kernel maps every TOS to 0 on TCP
// (rds_tcp_get_tos_map) and carries all of them on one connection, as rds-socket does. The guest's
// sockets set their TOS with SIOCRDSSETTOS (rdspeer.py, RDSPEER_TOS) and ours with sock.ioctl().

const stacks: RdsStack[] = [];
afterAll(async () => {
  for (const s of stacks) await s.close();
  await reloadRds(); // leave the kernel without our connections, as the other files expect
});

describe('SIOCRDSSETTOS against the kernel over TCP', () => {
  const stack = new RdsStack();
  stacks.push(stack);

  it('a kernel socket with TOS 5 (kept as 0, as TCP maps it) sends to rds-socket; all arrive', async () => {
    const s = await bound(stack, SMALL, 5340);
    const N = 12;
    const tx = guest(`RDSPEER_TOS=5 timeout 150 python3 ${PEER} send ${KERNEL} 6340 ${SMALL} 5340 ${N} 5000 3`);
    const got: string[] = [];
    for (let i = 0; i < N; i++) got.push(sha((await s.recv({ timeout: 60_000 })).data));
    const t = await tx;
    expect(t.code, t.out).toBe(0);
    expect(t.lines.find((l) => 'tos_set' in l)).toEqual({ tos_set: 5, tos_kept: 0 });
    expect(got).toEqual(t.lines.filter((l) => 'sha256' in l).map((l) => l.sha256));
  });

  it('an rds-socket socket with TOS 7 sends to a kernel socket with TOS 7; both keep 0', async () => {
    const s = await bound(stack, SMALL, 5341);
    expect(s.ioctl(constants.SIOCRDSSETTOS, 7)).toBe(0);
    expect(s.ioctl(constants.SIOCRDSGETTOS)).toBe(0);
    const N = 10;
    const rx = guest(`RDSPEER_TOS=7 timeout 150 python3 ${PEER} recv ${KERNEL} 4341 ${N} ${SMALL} 5341`);
    await ready(s);
    const sent: string[] = [];
    for (let i = 0; i < N; i++) {
      const data = pattern(i, 100 + i * 321, 9);
      sent.push(sha(data));
      await s.send(data, { address: KERNEL, port: 4341 }, { timeout: 30_000 });
    }
    const r = await rx;
    expect(r.code, r.out).toBe(0);
    expect(r.lines.find((l) => 'tos_set' in l)).toEqual({ tos_set: 7, tos_kept: 0 });
    expect(r.lines.filter((l) => 'sha256' in l).map((l) => l.sha256)).toEqual(sent);
    // The kernel's rule after a send, which rds-socket follows: the TOS can no longer change.
    expect(() => s.ioctl(constants.SIOCRDSSETTOS, 1)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
  });
});
