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
    return readdirSync(dir).filter((f) => f.endsWith('.sock')).map((f) => join(dir, f));
  } catch {
    return [];
  }
}

let seq = 0;

/**
 * A local control endpoint for tools (rds-info): a Unix socket, owner-only, answering one JSON
 * document per request line. Requests: "info".
 */
export class ControlEndpoint {
  private constructor(private readonly server: Server, readonly path: string) {}

  static async open(info: () => unknown, path?: string): Promise<ControlEndpoint> {
    const dir = controlDir();
    const file = path ?? join(dir, `${process.pid}.${seq++}.sock`);
    if (path === undefined) {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      chmodSync(dir, 0o700);
    }
    try {
      unlinkSync(file);
    } catch { /* none */ }
    const server = createServer((c) => {
      c.setEncoding('utf8');
      let buf = '';
      c.on('data', (d: string) => {
        buf += d;
        if (buf.length > 4096) c.destroy();
        const nl = buf.indexOf('\n');
        if (nl < 0) return;
        const req = buf.slice(0, nl).trim();
        const body = req === 'info' ? { pid: process.pid, ...(info() as object) } : { error: `unknown request ${JSON.stringify(req)}` };
        c.end(JSON.stringify(body) + '\n');
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
    } catch { /* gone */ }
  }
}
