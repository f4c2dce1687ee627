import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync, copyFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The code blocks of README.md and of every docs/**/*.md page, and test/fixtures/types/published.ts, compiled with tsc --noEmit against
// the published declarations (dist/*.d.ts, built by pretest), reached through the package's own
// name and "exports" as an installed package would be. Fragments get declarations for the names
// they use without defining (sock, dest, big, ...).

const ROOT = fileURLToPath(new URL('..', import.meta.url));

const PREAMBLE_IMPORTS: Record<string, string> = {
  RdsSocket: 'rds-socket',
  RdsStack: 'rds-socket',
  RdsError: 'rds-socket',
  constants: 'rds-socket',
  TcpTransport: 'rds-socket',
  LoopTransport: 'rds-socket',
};
const PREAMBLE_DECLS: Record<string, string> = {
  sock: 'declare const sock: RdsSocket;',
  dest: 'declare const dest: { address: string; port: number };',
  data: 'declare const data: Buffer;',
  big: 'declare const big: Buffer;',
  reuse: 'declare function reuse(cookie: number): void;',
  handle: "declare function handle(m: import('rds-socket').RdsMessage): void;",
  markPeerUnreachable: 'declare function markPeerUnreachable(d: { address: string; port: number }): void;',
  workerPorts: 'declare const workerPorts: number[];',
  key: 'declare const key: string;',
  cert: 'declare const cert: string;',
  ca: 'declare const ca: string;',
};

/** docs/ and its subfolders' markdown pages. */
function docPages(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...docPages(p));
    else if (name.endsWith('.md')) out.push(p);
  }
  return out;
}

/** One module per js/ts block of a page; `require` lines go to a CommonJS (.cts) module of their own. */
function readmeModules(readme: string, prefix = 'block'): { name: string; text: string }[] {
  const out: { name: string; text: string }[] = [];
  let n = 0;
  for (const m of readme.matchAll(/```(js|ts)\n([\s\S]*?)```/g)) {
    n++;
    const line = readme.slice(0, m.index).split('\n').length;
    const lines = m[2]!.split('\n');
    const cjs = lines.filter((l) => /\brequire\(/.test(l));
    const esm = lines.filter((l) => !/\brequire\(/.test(l)).join('\n');
    if (cjs.length > 0) out.push({ name: `${prefix}${n}-line${line}.cts`, text: `${cjs.join('\n')}\nexport {};\n` });
    const defined = new Set<string>();
    for (const d of esm.matchAll(/\b(?:const|let|var|function)\s+([A-Za-z_$][\w$]*)/g)) defined.add(d[1]!);
    for (const d of esm.matchAll(/import\s*\{([^}]*)\}/g))
      for (const x of d[1]!.split(','))
        defined.add(
          x
            .trim()
            .split(/\s+as\s+/)
            .pop()!
            .replace(/^type\s+/, ''),
        );
    for (const d of esm.matchAll(/import\s+([A-Za-z_$][\w$]*)\s+from/g)) defined.add(d[1]!);
    const uses = (id: string) => new RegExp(`(^|[^.\\w$])${id.replace('$', '\\$')}\\b`).test(esm);
    const head: string[] = [];
    const imports = Object.keys(PREAMBLE_IMPORTS).filter(
      (id) =>
        !defined.has(id) &&
        (uses(id) ||
          Object.keys(PREAMBLE_DECLS).some((d) => !defined.has(d) && uses(d) && PREAMBLE_DECLS[d]!.includes(id))),
    );
    if (imports.length > 0) head.push(`import { ${imports.join(', ')} } from 'rds-socket';`);
    for (const [id, decl] of Object.entries(PREAMBLE_DECLS)) if (!defined.has(id) && uses(id)) head.push(decl);
    out.push({ name: `${prefix}${n}-line${line}.ts`, text: `${head.join('\n')}\n${esm}\nexport {};\n` });
  }
  return out;
}

describe('README and docs/ examples against the published declarations', () => {
  it('every code block of README.md, of docs/**/*.md and the types fixture compile with tsc --noEmit (strict, no skipLibCheck)', () => {
    const dir = join(ROOT, 'test', `.readme-types-${process.pid}`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir);
    try {
      const readme = readmeModules(readFileSync(join(ROOT, 'README.md'), 'utf8'));
      expect(readme.length).toBeGreaterThanOrEqual(3);
      const mods = [...readme];
      for (const page of docPages(join(ROOT, 'docs'))) {
        const prefix = `docs-${relative(join(ROOT, 'docs'), page)
          .replace(/\.md$/, '')
          .replace(/[^\w-]/g, '_')}-block`;
        mods.push(...readmeModules(readFileSync(page, 'utf8'), prefix));
      }
      expect(mods.length).toBeGreaterThanOrEqual(20);
      for (const m of mods) writeFileSync(join(dir, m.name), m.text);
      copyFileSync(join(ROOT, 'test', 'fixtures', 'types', 'published.ts'), join(dir, 'published.ts'));
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            module: 'nodenext',
            moduleResolution: 'nodenext',
            target: 'es2022',
            lib: ['es2022', 'dom'],
            types: ['node'],
            strict: true,
            useUnknownInCatchVariables: false,
            noEmit: true,
            skipLibCheck: false,
          },
          include: ['*.ts', '*.cts'],
        }),
      );
      const r = spawnSync(
        process.execPath,
        [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(dir, 'tsconfig.json')],
        { cwd: dir, encoding: 'utf8', timeout: 120000 },
      );
      expect(r.stdout + r.stderr).toBe('');
      expect(r.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 130000);

  it('every program in examples/ type-checks against the published declarations (checkJs; JavaScript, so not strict)', () => {
    const dir = join(ROOT, 'test', `.examples-types-${process.pid}`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir);
    try {
      const examples = readdirSync(join(ROOT, 'examples')).filter((f) => f.endsWith('.mjs'));
      expect(examples.length).toBeGreaterThanOrEqual(10);
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            module: 'nodenext',
            moduleResolution: 'nodenext',
            target: 'es2022',
            lib: ['es2022', 'dom'],
            types: ['node'],
            allowJs: true,
            checkJs: true,
            noEmit: true,
            skipLibCheck: false,
          },
          include: examples.map((f) => `../../examples/${f}`),
        }),
      );
      const r = spawnSync(
        process.execPath,
        [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(dir, 'tsconfig.json')],
        { cwd: dir, encoding: 'utf8', timeout: 120000 },
      );
      expect(r.stdout + r.stderr).toBe('');
      expect(r.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 130000);
});
