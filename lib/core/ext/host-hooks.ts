import { RdsError } from '../../errors.js';
import type { RdsStack } from '../stack.js';

/** What RdsStack.serve() takes. */
export interface ServeOptions {
  /** The control socket's path; default $RDS_SOCKET_NODE, else the default node path (see docs/host-node.md). */
  path?: string;
  /** Group (name or gid) given the control socket, so its members may attach; default the process's. */
  group?: string | number;
  /** The control socket's mode; default 0o660. */
  mode?: number;
  /** Called on state changes (a client attached / detached / dropped), one line each. */
  log?: (line: string) => void;
  /**
   * The most one attached process may have the node hold for it, all its sockets together: bytes
   * it sent that the node has not yet had acknowledged by the peer (or cancelled). The process's
   * sockets answer EAGAIN past it (each socket's SO_SNDBUF still applies); a process that sends
   * past it anyway is dropped. Default 256 MiB.
   */
  maxClientSendBytes?: number;
}

/** One process attached to a host node (HostNodeHandle.clients()). */
export interface AttachedClientInfo {
  id: number;
  /** Its pid: the kernel's (SO_PEERCRED) when `verified`, else the one its hello claimed. */
  pid: number;
  /** Its uid and gid (SO_PEERCRED), -1 when not `verified`. */
  uid: number;
  gid: number;
  /** pid, uid and gid come from the kernel (needs the native addon), not from the client's word. */
  verified: boolean;
  /** The pid the client claimed in its hello. */
  claimedPid: number;
  sockets: { id: number; bound: string }[];
}

/** A node being served: what serve() resolves to. */
export interface HostNodeHandle {
  readonly path: string;
  /** Attached processes: their credentials (SO_PEERCRED where the native addon is there) and sockets. */
  clients(): AttachedClientInfo[];
  /** Counters: attached, detached, dropped (protocol errors / limits), malformed frames. */
  readonly counters: Record<string, number>;
  /** Stops serving: attached sockets see ENETDOWN; the stack goes on. */
  close(): Promise<void>;
}

/**
 * What lib/host gives the core, without the core importing it: the stack's serve() and attach().
 * The package entry point (lib/index.ts) registers it with RdsStack.useHostWing(), and the host
 * node's socket backends with RdsSocket.useNodeBackends().
 * @internal
 */
export interface HostWing {
  serve(stack: RdsStack, opts: ServeOptions): Promise<HostNodeHandle>;
  attach(path: string | undefined): Promise<RdsStack>;
}

let hostWing: HostWing | null = null;

/** RdsStack.useHostWing(): the package entry point hands the core its host node. @internal */
export function registerHostWing(wing: HostWing): void {
  hostWing = wing;
}

/** The registered host node, or EOPNOTSUPP when the core is used without the package entry point. @internal */
export function loadedHostWing(): HostWing {
  if (hostWing === null)
    throw new RdsError('EOPNOTSUPP', 'the host node is not loaded; import rds-socket (its entry point)');
  return hostWing;
}
