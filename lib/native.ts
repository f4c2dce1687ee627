import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

/** What the prebuilt addon (src-native/) provides. */
export interface NativeBinding {
  /** ioctl(SIOCOUTQ): bytes in a TCP socket's send queue not yet acknowledged by the peer. */
  tcpOutq(fd: number): number;
  /** SO_KEEPALIVE with TCP_KEEPIDLE / TCP_KEEPINTVL / TCP_KEEPCNT (seconds, seconds, probes). */
  tcpKeepalive(fd: number, idle: number, interval: number, probes: number): void;
}

let cached: NativeBinding | null | undefined;
let loadError: Error | null = null;

/**
 * The addon, loaded on first use from prebuilds/ (committed, so installing needs no compiler).
 * Returns null where it cannot load (another platform); callers fall back and say so.
 */
export function native(): NativeBinding | null {
  if (cached !== undefined) return cached;
  try {
    const require = createRequire(import.meta.url);
    const load = require('node-gyp-build') as (dir: string) => NativeBinding;
    cached = load(fileURLToPath(new URL('..', import.meta.url)));
  } catch (e) {
    loadError = e as Error;
    cached = null;
  }
  return cached;
}

export function nativeLoadError(): Error | null {
  native();
  return loadError;
}
