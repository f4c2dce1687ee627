import { connect } from 'node:net';
import { controlDir, listControlSockets, removeStaleControlSockets } from '../core/ext/control.js';
import { nodeCandidates, nodeSeemsAlive } from '../host/paths.js';

/** What to tell a user whose node did not answer (rds-info, rds-ctl). */
export const HOW_TO_OPEN =
  'A node answers once its control endpoint is open: run it with RDS_SOCKET_CONTROL=1 in its environment ' +
  '(default stack), or make its stack with new RdsStack({ control: true }) or call stack.openControl(); ' +
  'it must run as the same user (and XDG_RUNTIME_DIR), or give its socket with --socket PATH.';

/** Sends one request line to a node's control socket; resolves with its JSON answer. */
export function controlRequest<T>(path: string, line: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const c = connect(path);
    let buf = '';
    c.setEncoding('utf8');
    c.on('data', (d: string) => (buf += d));
    c.on('end', () => {
      try {
        resolve(JSON.parse(buf) as T);
      } catch (e) {
        reject(e as Error);
      }
    });
    c.on('error', reject);
    c.write(`${line}\n`);
  });
}

/**
 * The control sockets a tool should ask: the one given with --socket, else every node's in the
 * control directory (stale ones of dead processes removed first) and the host node's, narrowed to
 * one process with -p PID.
 */
export function nodeSockets(socket: string | undefined, pid: string | undefined): string[] {
  if (socket !== undefined) return [socket];
  removeStaleControlSockets();
  const paths = listControlSockets();
  // Host nodes (rds-socketd) may live outside the control directory: this user's and the system's.
  for (const hostNode of nodeCandidates())
    if (!paths.includes(hostNode) && nodeSeemsAlive(hostNode)) paths.push(hostNode);
  return pid === undefined ? paths : paths.filter((p) => p.split('/').pop()!.startsWith(`${pid}.`));
}

export { controlDir };
