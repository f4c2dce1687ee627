// The host node wing, as the package entry point (lib/index.ts) registers it with the core:
// serve() and attach() for RdsStack, and the node backends of sockets for RdsSocket.
import type { HostWing } from '../core/ext/host-hooks.js';
import type { SocketBackend } from '../core/socket-backend.js';
import type { RdsSocketOptions } from '../core/socket-types.js';
import { RdsStack } from '../core/stack.js';
import { AttachedSocket } from './attached-socket.js';
import { AttachedStack, attach, defaultAttachedStack } from './attached-stack.js';
import { NodeBackend } from './node-backend.js';
import { defaultNodePath, findNode, implicitAttachDisabled, warnEmbeddedDespite } from './paths.js';
import { HostNode } from './server.js';

/** RdsStack's serve() and attach(). @internal */
export const hostWing: HostWing = {
  serve: (stack, opts) => HostNode.serve(stack, opts),
  attach: (path) => attach(path),
};

/**
 * The backend of a new socket when it lives in a host node: one of an attached stack, or of the
 * default stack while a node answers (docs/host-node.md); null for a socket of this process's stack.
 * @internal
 */
export function nodeBackendFor(opts: RdsSocketOptions): SocketBackend | null {
  if (opts.stack instanceof AttachedStack) return new NodeBackend(opts.stack);
  if (opts.stack !== undefined || implicitAttachDisabled()) return null;
  // The process serving the default stack uses it directly.
  if (RdsStack.default().hostNode !== null) return null;
  // This user's node, else the system node (docs/host-node.md, "Processes, threads and the host node").
  const found = findNode();
  if (found.path === null) {
    warnEmbeddedDespite(found);
    return null;
  }
  return new NodeBackend(defaultAttachedStack(found.path));
}

export { AttachedSocket, AttachedStack, HostNode, defaultNodePath };
