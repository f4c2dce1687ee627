import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { controlDir } from '../core/control.js';

/**
 * The host node's control socket: $RDS_SOCKET_NODE if set, else
 * $XDG_RUNTIME_DIR/rds-socket/node.sock, /run/rds-socket/node.sock for root, or the per-user
 * control directory (<tmpdir>/rds-socket-<uid>/node.sock) when neither applies.
 */
export function defaultNodePath(): string {
  const env = process.env.RDS_SOCKET_NODE;
  if (env !== undefined && env !== '' && env !== 'none') return env;
  if (process.env.XDG_RUNTIME_DIR) return join(process.env.XDG_RUNTIME_DIR, 'rds-socket', 'node.sock');
  if (process.getuid?.() === 0) return '/run/rds-socket/node.sock';
  return join(controlDir(), 'node.sock');
}

/** RDS_SOCKET_NODE=none: never attach implicitly. */
export function implicitAttachDisabled(): boolean {
  return process.env.RDS_SOCKET_NODE === 'none';
}

/** The pid file a serving node writes next to its socket. */
export function pidFileOf(path: string): string {
  return `${path}.pid`;
}

/**
 * Synchronously: does a node seem to answer at `path`? The socket file exists and the process
 * named in its pid file is alive (a node killed with SIGKILL leaves both files behind; its pid is
 * then gone). Without a readable pid file the socket file alone decides.
 */
export function nodeSeemsAlive(path: string): boolean {
  if (!existsSync(path)) return false;
  let pid: number;
  try {
    pid = Number(readFileSync(pidFileOf(path), 'utf8').trim());
  } catch {
    return true;
  }
  if (!Number.isInteger(pid) || pid <= 0) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
