// `sock instanceof AttachedSocket`: whether an RdsSocket lives in a host node. There is one socket
// class (RdsSocket); what carries it is its backend, here a NodeBackend (node-backend.ts).
import { RdsSocket } from '../core/socket.js';

/** Matches the RdsSockets that live in a host node (their backend talks to it); never constructed. */
// biome-ignore lint/complexity/noStaticOnlyClass: a class, so that `instanceof AttachedSocket` (and test matchers that want a constructor) keep working.
export abstract class AttachedSocket {
  static [Symbol.hasInstance](v: unknown): boolean {
    return v instanceof RdsSocket && v.nodePath !== undefined;
  }
}
