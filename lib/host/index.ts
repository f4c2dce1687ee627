import { hostHooks } from '../core/host-hooks.js';
import { RdsStack } from '../core/stack.js';
import { AttachedSocket, AttachedStack, attach, defaultAttachedStack } from './client.js';
import { defaultNodePath, implicitAttachDisabled, nodeSeemsAlive } from './paths.js';
import { HostNode } from './server.js';

hostHooks.serve = (stack, opts) => HostNode.serve(stack, opts);
hostHooks.attach = (path) => attach(path);
hostHooks.socket = (opts) => {
  if (opts.stack instanceof AttachedStack) return new AttachedSocket(opts.stack, opts);
  if (opts.stack !== undefined || implicitAttachDisabled()) return null;
  // The process serving the default stack uses it directly.
  if (RdsStack.default().hostNode !== null) return null;
  const path = defaultNodePath();
  if (!nodeSeemsAlive(path)) return null;
  return new AttachedSocket(defaultAttachedStack(path), opts);
};

export { AttachedSocket, AttachedStack, HostNode, defaultNodePath };
