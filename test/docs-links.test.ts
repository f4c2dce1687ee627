import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The documentation stays navigable: every relative link in README.md, docs/**/*.md and the man
// pages leads to a file that exists and, for a markdown file, to a heading that exists there
// (GitHub's anchors); README stays a front door (short, no source file map).

const ROOT = fileURLToPath(new URL('..', import.meta.url));

function markdownFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...markdownFiles(p));
    else if (name.endsWith('.md')) out.push(p);
  }
  return out;
}

/** Markdown without fenced code blocks and inline code spans (links there are not links). */
function prose(md: string): string {
  return md.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').replace(/`[^`\n]*`/g, '');
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to '-', repeats numbered. */
function anchors(md: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  const text = md.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
  for (const m of text.matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const base = m[1]!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .replace(/<[^>]+>/g, '')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base);
    seen.set(base, n === undefined ? 1 : n + 1);
    out.add(n === undefined ? base : `${base}-${n}`);
  }
  for (const m of md.matchAll(/<a\s+(?:name|id)="([^"]+)"/g)) out.add(m[1]!);
  return out;
}

interface Broken {
  file: string;
  link: string;
  why: string;
}

function checkMarkdown(file: string): Broken[] {
  const md = readFileSync(file, 'utf8');
  const broken: Broken[] = [];
  for (const m of prose(md).matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
    const link = m[1]!;
    if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue; // https:, mailto:, ...
    const [path, hash] = link.split('#', 2) as [string, string | undefined];
    const target = path === '' ? file : resolve(dirname(file), decodeURIComponent(path));
    const rel = relative(ROOT, file);
    if (!existsSync(target)) {
      broken.push({ file: rel, link, why: 'no such file' });
      continue;
    }
    if (hash !== undefined && hash !== '') {
      if (!target.endsWith('.md')) {
        broken.push({ file: rel, link, why: 'an anchor into a file that is not markdown' });
        continue;
      }
      if (!anchors(readFileSync(target, 'utf8')).has(hash))
        broken.push({ file: rel, link, why: `no heading with anchor #${hash} in ${relative(ROOT, target)}` });
    }
  }
  return broken;
}

const docs = [join(ROOT, 'README.md'), ...markdownFiles(join(ROOT, 'docs'))];

describe('documentation links', () => {
  it('the anchor rule is GitHub’s', () => {
    const a = anchors(
      '# A dead peer: \'peer-down\', SO_SNDTIMEO\n## Reliability: what "delivered" means\n## `poll()` x\n## X\n## X\n```\n# not\n```\n',
    );
    expect([...a]).toEqual([
      'a-dead-peer-peer-down-so_sndtimeo',
      'reliability-what-delivered-means',
      'poll-x',
      'x',
      'x-1',
    ]);
  });

  it.each(docs.map((f) => [relative(ROOT, f), f]))('every relative link of %s resolves', (_rel, file) => {
    expect(checkMarkdown(file)).toEqual([]);
  });

  it('every docs/, examples/ or man/ path a man page names exists', () => {
    const broken: string[] = [];
    for (const page of readdirSync(join(ROOT, 'man'))) {
      const text = readFileSync(join(ROOT, 'man', page), 'utf8').replace(/\\-/g, '-');
      for (const m of text.matchAll(/\b((?:docs|examples|man)\/[\w./-]*\w)/g))
        if (!existsSync(join(ROOT, m[1]!))) broken.push(`${page}: ${m[1]}`);
    }
    expect(broken).toEqual([]);
  });

  it('every man page points to the documentation (SEE ALSO names docs/)', () => {
    for (const page of readdirSync(join(ROOT, 'man'))) {
      const text = readFileSync(join(ROOT, 'man', page), 'utf8').replace(/\\-/g, '-');
      const seeAlso = text.slice(text.indexOf('.SH SEE ALSO'));
      expect(seeAlso, page).toMatch(/docs\/README\.md/);
    }
  });

  it('the checker finds a broken file and a broken anchor', () => {
    const tmp = join(ROOT, 'docs', `.links-selftest-${process.pid}.md`);
    writeFileSync(tmp, '# T\n[a](nope.md) [b](#t) [c](README.md#no-such-heading) `[d](nope2.md)`\n');
    try {
      expect(checkMarkdown(tmp).map((b) => b.link)).toEqual(['nope.md', 'README.md#no-such-heading']);
    } finally {
      rmSync(tmp, { force: true });
    }
  });
});

describe('README stays a front door', () => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');

  it('is at most 400 lines', () => {
    expect(readme.split('\n').length).toBeLessThanOrEqual(400);
  });

  it('names no file under lib/ (docs/architecture.md holds the source map)', () => {
    expect(readme.match(/\blib\/[\w./-]+/g) ?? []).toEqual([]);
  });

  it('still gives the test command CI runs (npm test)', () => {
    expect(readme).toMatch(/^npm test\b/m);
  });
});
