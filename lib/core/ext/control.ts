import { chmodSync, mkdirSync, readdirSync, unlinkSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Where nodes put their control sockets: $XDG_RUNTIME_DIR/rds-socket, else <tmpdir>/rds-socket-<uid>. */
export function controlDir(): string {
  const base = process.env.XDG_RUNTIME_DIR;
  return base ? join(base, 'rds-socket') : join(tmpdir(), `rds-socket-${process.getuid?.() ?? 'user'}`);
}

export function listControlSockets(dir = controlDir()): string[] {
  try {
    return readdirSync(dir)
      .filter((f) => f.endsWith('.sock'))
      .map((f) => join(dir, f));
  } catch {
    return [];
  }
}

/** True while process `pid` exists (EPERM: it does, under another user). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes the control sockets of processes that died without closing their stack (kill -9, a
 * crash): their files stay behind otherwise, and rds-info would try each one every time. Files are
 * named <pid>.<n>.sock; anything else is left alone. Returns the paths removed.
 */
export function removeStaleControlSockets(dir = controlDir()): string[] {
  const removed: string[] = [];
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return removed;
  }
  for (const f of names) {
    const m = /^(\d+)\.\d+\.sock$/.exec(f);
    if (m === null) continue;
    const pid = Number(m[1]);
    if (pid === process.pid || alive(pid)) continue;
    try {
      unlinkSync(join(dir, f));
      removed.push(join(dir, f));
    } catch {
      /* raced with another cleaner */
    }
  }
  return removed;
}

let seq = 0;

/**
 * A local control endpoint for tools (rds-info, rds-ctl): a Unix socket, owner-only (only the
 * node's own user can connect, who could signal the process anyway), answering one JSON document
 * per request line. What a request means is the caller's `answer` (see control-commands.ts).
 */
export class ControlEndpoint {
  private constructor(
    private readonly server: Server,
    readonly path: string,
  ) {}

  static async open(answer: (request: string) => unknown, path?: string): Promise<ControlEndpoint> {
    const dir = controlDir();
    const file = path ?? join(dir, `${process.pid}.${seq++}.sock`);
    if (path === undefined) {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      chmodSync(dir, 0o700);
      removeStaleControlSockets(dir);
    }
    try {
      unlinkSync(file);
    } catch {
      /* none */
    }
    const server = createServer((c) => {
      c.setEncoding('utf8');
      let buf = '';
      c.on('data', (d: string) => {
        buf += d;
        if (buf.length > 4096) c.destroy();
        const nl = buf.indexOf('\n');
        if (nl < 0) return;
        let body: unknown;
        try {
          body = answer(buf.slice(0, nl).trim());
        } catch (e) {
          // The request was understood but failed (no such path, ...): the tool says why.
          body = { error: (e as Error).message, code: (e as { code?: string }).code };
        }
        c.end(`${JSON.stringify(body)}\n`);
      });
      c.on('error', () => {});
    });
    await new Promise<void>((res, rej) => {
      server.once('error', rej);
      server.listen(file, () => res());
    });
    chmodSync(file, 0o600);
    server.unref();
    return new ControlEndpoint(server, file);
  }

  async close(): Promise<void> {
    await new Promise<void>((res) => this.server.close(() => res()));
    try {
      unlinkSync(this.path);
    } catch {
      /* gone */
    }
  }
}
