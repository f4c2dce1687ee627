import { hostHooks } from '../core/host-hooks.js';
import { RdsStack } from '../core/stack.js';
import { AttachedSocket, AttachedStack, attach, defaultAttachedStack } from './client.js';
import { defaultNodePath, findNode, implicitAttachDisabled, warnEmbeddedDespite } from './paths.js';
import { HostNode } from './server.js';

hostHooks.serve = (stack, opts) => HostNode.serve(stack, opts);
hostHooks.attach = (path) => attach(path);
hostHooks.socket = (opts) => {
  if (opts.stack instanceof AttachedStack) return new AttachedSocket(opts.stack, opts);
  if (opts.stack !== undefined || implicitAttachDisabled()) return null;
  // The process serving the default stack uses it directly.
  if (RdsStack.default().hostNode !== null) return null;
  // This user's node, else the system node (docs/host-node.md, "Processes, threads and the host node").
  const found = findNode();
  if (found.path === null) {
    warnEmbeddedDespite(found);
    return null;
  }
  return new AttachedSocket(defaultAttachedStack(found.path), opts);
};

export { AttachedSocket, AttachedStack, HostNode, defaultNodePath };
