import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs script without declarations
import { apiSurface } from '../scripts/api-surface.mjs';

// The published API is a contract (extend it, do not rename it): every name in
// test/api-surface.txt (exports of the package's entry points and their classes' and interfaces'
// public members, read from dist/*.d.ts) must still be there. A new name must be added to the file
// on purpose (`node scripts/api-surface.mjs --write` after npm run build), so an addition is a
// reviewed line in the diff rather than an accident of an export.
const listed: string[] = readFileSync(new URL('./api-surface.txt', import.meta.url), 'utf8')
  .split('\n')
  .filter((l) => l !== '');

describe('the published API', () => {
  const now: string[] = apiSurface();

  it('keeps every name it had (none renamed or removed)', () => {
    const gone = listed.filter((n) => !now.includes(n));
    expect(gone, `names gone from dist/*.d.ts: extend the API, do not rename it`).toEqual([]);
  });

  it('lists every name it has in test/api-surface.txt (additions are deliberate)', () => {
    const added = now.filter((n) => !listed.includes(n));
    expect(added, 'new public names: run `node scripts/api-surface.mjs --write` and review the diff').toEqual([]);
  });

  it('reads the members of the socket class (the reader sees what it claims to check)', () => {
    for (const n of [
      'RdsSocket',
      'RdsSocket.sendmsg',
      'RdsSocket.recvmsg',
      'RdsStack::attach',
      'rpc:RpcClient.request',
    ])
      expect(now).toContain(n);
  });
});
