import { accessSync, constants as fsConstants, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { controlDir } from '../core/ext/control.js';

/** Where rds-socketd run by root (the systemd unit of docs/operations.md) serves the host's node. */
export const SYSTEM_NODE_PATH = '/run/rds-socket/node.sock';

/**
 * The system node's control socket: $RDS_SOCKET_SYSTEM_NODE if set (a service installed
 * elsewhere), else /run/rds-socket/node.sock.
 */
export function systemNodePath(): string {
  const env = process.env.RDS_SOCKET_SYSTEM_NODE;
  return env !== undefined && env !== '' ? env : SYSTEM_NODE_PATH;
}

/**
 * The host node's control socket, where serve() and rds-socketd serve by default: $RDS_SOCKET_NODE
 * if set, else $XDG_RUNTIME_DIR/rds-socket/node.sock, the system path (systemNodePath()) for root,
 * or the per-user control directory (<tmpdir>/rds-socket-<uid>/node.sock) when neither applies.
 * Attaching looks at the system path too: see nodeCandidates().
 */
export function defaultNodePath(): string {
  const env = process.env.RDS_SOCKET_NODE;
  if (env !== undefined && env !== '' && env !== 'none') return env;
  if (process.env.XDG_RUNTIME_DIR) return join(process.env.XDG_RUNTIME_DIR, 'rds-socket', 'node.sock');
  if (process.getuid?.() === 0) return systemNodePath();
  return join(controlDir(), 'node.sock');
}

/**
 * Where `new RdsSocket()` and RdsStack.attach() look for a node, first first: $RDS_SOCKET_NODE
 * alone when set; else this user's own node (defaultNodePath()), then the system node. A user's
 * own node wins because running one is a deliberate choice for that user's processes; the system
 * node is what every other process of the host shares.
 */
export function nodeCandidates(): string[] {
  const own = defaultNodePath();
  const env = process.env.RDS_SOCKET_NODE;
  if (env !== undefined && env !== '' && env !== 'none') return [own];
  const sys = systemNodePath();
  return own === sys ? [own] : [own, sys];
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
 * What is at a node path: nothing; a node that seems alive; the files of a node whose process is
 * gone (`pid`: the dead pid its pid file names); or a live node this process may not connect to
 * (no write permission on the socket, or no search permission on its directory: not in its group).
 */
export type NodeState =
  | { state: 'absent' }
  | { state: 'alive' }
  | { state: 'stale'; pid: number }
  | { state: 'denied' };

/**
 * Synchronously: what answers at `path`? The socket file exists and the process named in its pid
 * file is alive (a node killed with SIGKILL leaves both files behind; its pid is then gone).
 * Without a readable pid file the socket file alone decides. Connecting to a Unix socket takes
 * write permission on it (and search permission on its directories), which access(2) checks.
 */
export function nodeState(path: string): NodeState {
  try {
    statSync(path);
  } catch (e) {
    // EACCES: a directory on the way is closed to this process (the system node's, 0750, to a
    // process outside its group): whether a node serves there cannot be known, nor used.
    return (e as NodeJS.ErrnoException).code === 'EACCES' ? { state: 'denied' } : { state: 'absent' };
  }
  let pid = 0;
  try {
    pid = Number(readFileSync(pidFileOf(path), 'utf8').trim());
  } catch {
    /* no pid file: the socket file decides */
  }
  if (Number.isInteger(pid) && pid > 0 && !processExists(pid)) return { state: 'stale', pid };
  try {
    accessSync(path, fsConstants.W_OK);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EACCES') return { state: 'denied' };
  }
  return { state: 'alive' };
}

/** nodeState(path) is 'alive'. */
export function nodeSeemsAlive(path: string): boolean {
  return nodeState(path).state === 'alive';
}

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** What findNode() saw: the node to attach to, if any, and what it passed over. */
export interface NodeLookup {
  path: string | null;
  /** Candidates whose node is gone, with the dead pid their pid file names. */
  stale: { path: string; pid: number }[];
  /** Candidates this process may not connect to (or not even look at). */
  denied: string[];
}

/** Synchronously: the first of nodeCandidates() whose node seems alive and may be connected to. */
export function findNode(): NodeLookup {
  const out: NodeLookup = { path: null, stale: [], denied: [] };
  for (const path of nodeCandidates()) {
    const s = nodeState(path);
    if (s.state === 'alive') {
      out.path = path;
      return out;
    }
    if (s.state === 'stale') out.stale.push({ path, pid: s.pid });
    else if (s.state === 'denied') out.denied.push(path);
  }
  return out;
}

let warned = false;

/**
 * Once per process: new RdsSocket() runs embedded although a node's files are there (a node that
 * died, or one this process may not use), so it shares no node with the host's other processes.
 */
export function warnEmbeddedDespite(l: NodeLookup): void {
  if (warned || (l.stale.length === 0 && l.denied.length === 0)) return;
  warned = true;
  const why = [
    ...l.stale.map(
      (s) =>
        `the RDS node at ${s.path} is gone: ${s.path} and ${pidFileOf(s.path)} are stale (pid ${s.pid} is not running; killed with SIGKILL?)`,
    ),
    ...l.denied.map(
      (p) => `this process may not connect to the RDS node at ${p} (permission denied: not in the node's group?)`,
    ),
  ];
  process.emitWarning(
    `${why.join('; ')}. This process runs its own embedded RDS node and shares none with other processes. ` +
      'Start rds-socketd again (it takes stale files over), or set RDS_SOCKET_NODE=none to run embedded without this warning.',
    { type: 'RdsSocketWarning', code: 'RDS_NODE_NOT_ATTACHED' },
  );
}
