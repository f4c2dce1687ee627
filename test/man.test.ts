import { execFileSync, spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const MAN = fileURLToPath(new URL('../man/', import.meta.url));
const pages = readdirSync(MAN).filter((f) => /\.[1-8]$/.test(f));
const hasGroff = spawnSync('groff', ['--version']).status === 0;
if (!hasGroff) console.log('man page checks skipped: groff is not installed');

describe.skipIf(!hasGroff)('man pages', () => {
  it('has the seven pages the package lists', async () => {
    const pkg = (await import('../package.json', { with: { type: 'json' } })).default as { man: string[] };
    expect(pages.sort()).toEqual([
      'RdsSocket.3',
      'rds-ctl.1',
      'rds-info.1',
      'rds-ping.1',
      'rds-socket.7',
      'rds-socketd.8',
      'rds-stress.1',
    ]);
    expect(pkg.man.map((m) => m.replace('man/', '')).sort()).toEqual(pages.sort());
  });

  it.each(pages)('%s renders without warnings (groff -ww -z)', (page) => {
    const r = spawnSync('groff', ['-ww', '-z', '-man', `${MAN}${page}`], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    // Plain text: drop SGR sequences and overstrike bold/underline.
    const text = execFileSync('groff', ['-man', '-Tutf8', `${MAN}${page}`], { encoding: 'utf8' })
      // biome-ignore lint/suspicious/noControlCharactersInRegex: ESC and backspace are what groff writes.
      .replace(/\x1b\[[0-9;]*m/g, '')
      // biome-ignore lint/suspicious/noControlCharactersInRegex: the backspace of groff's overstrike.
      .replace(/.\x08/g, '');
    expect(text).toMatch(/NAME/);
    expect(text).toMatch(/SEE ALSO/);
  });
});
