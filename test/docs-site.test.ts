import { spawnSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

// npm run docs: the documentation site (TypeDoc over the published declarations, with the docs/
// pages) builds with warnings as errors (an undocumented export, a broken link), and, where
// Debian's chromium is installed, opens from disk in headless Chromium: the index shows the
// navigation, a guide page and an API page render, and the search finds RdsSocket.
// Uses dist/ (npm test builds first). The site goes to a folder of its own, removed afterwards.

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUT = join(ROOT, 'test', `.docs-site-${process.pid}`);
const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
if (!CHROMIUM)
  console.log(
    'docs site: the headless Chromium check is skipped: /usr/bin/chromium is not installed (apt-get install chromium)',
  );

afterAll(() => rmSync(OUT, { recursive: true, force: true }));

describe('the documentation site', () => {
  let built = false;

  it('builds with TypeDoc, warnings as errors', () => {
    const r = spawnSync(process.execPath, [join(ROOT, 'node_modules', 'typedoc', 'bin', 'typedoc'), '--out', OUT], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 240_000,
    });
    // biome-ignore lint/suspicious/noControlCharactersInRegex: ESC of the colours TypeDoc writes.
    const out = (r.stdout + r.stderr).replace(/\x1b\[[0-9;]*m/g, '');
    expect(out).not.toMatch(/\[warning\]|\[error\]/);
    expect(r.status).toBe(0);
    for (const f of [
      'index.html',
      'classes/index.RdsSocket.html',
      'documents/docs_reliability.html',
      'assets/search.js',
    ])
      expect(existsSync(join(OUT, f)), f).toBe(true);
    built = true;
  }, 250_000);

  it.skipIf(!CHROMIUM)(
    'opens from disk in headless Chromium: navigation, a guide, an API page, search',
    () => {
      expect(built).toBe(true);
      const r = spawnSync(
        process.execPath,
        ['--experimental-websocket', join(ROOT, 'test', 'fixtures', 'site-check.mjs'), CHROMIUM!, OUT],
        { cwd: ROOT, encoding: 'utf8', timeout: 120_000 },
      );
      const line = r.stdout.trim().split('\n').pop() ?? '';
      const found = JSON.parse(line) as {
        error?: string;
        navigation: string[] | null;
        search: string[] | null;
        guide: { title: string; headings: string[] } | null;
        api: { title: string; members: string[] } | null;
      };
      expect(found.error).toBeUndefined();
      // The navigation lists the modules and the guide pages.
      expect(found.navigation).toEqual(
        expect.arrayContaining(['index', 'rpc', 'metrics', 'testing', 'docs/reliability']),
      );
      // The guide renders as HTML, its headings included.
      expect(found.guide!.headings).toEqual(
        expect.arrayContaining(['Reliability guarantees', 'Fault -> what the application sees']),
      );
      // The API page of RdsSocket with its methods.
      expect(found.api!.title).toMatch(/RdsSocket/);
      expect(found.api!.members).toEqual(expect.arrayContaining(['sendmsg', 'send', 'recv', 'bind']));
      // The search finds the class.
      expect(found.search!.some((s) => /RdsSocket/.test(s))).toBe(true);
    },
    130_000,
  );
});
