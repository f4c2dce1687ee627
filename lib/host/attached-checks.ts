// Argument checks of AttachedSocket's bind() and sendmsg(), made here with the same errors RdsSocket
// gives, since an attached socket answers them before the host node sees the call; and the abort race
// of its flush().
import { RDS_TRANS_IB, RDS_TRANS_TCP } from '../constants.js';
import { abortError, RdsError } from '../errors.js';
import { checkedAddress, nonUnicastReason, parseEndpoint } from '../core/address.js';
import type { RdsData, SendmsgOptions } from '../core/socket.js';
import { zeroCopyRequested } from '../core/send-flags.js';

/**
 * sendmsg flags and the zero-copy cookie of an attached socket, checked with RdsSocket's errors;
 * `zeroCopyOn` reads SO_ZEROCOPY (only when options are given) and `transport` is SO_RDS_TRANSPORT.
 * @internal
 */
export function sendFlags(
  opts: SendmsgOptions | undefined,
  zeroCopyOn: () => boolean,
  transport: number | null,
): Readonly<{ zcopy: boolean; flags: number }> {
  if (opts === undefined || opts === null) return NO_FLAGS;
  // SO_RDS_TRANSPORT on an attached socket is TCP or IB.
  const zcopy = zeroCopyRequested(opts, zeroCopyOn(), transport === null || transport === RDS_TRANS_TCP ? null : 'ib');
  const flags = opts.flags ?? 0;
  return { zcopy, flags };
}

const NO_FLAGS: Readonly<{ zcopy: boolean; flags: number }> = Object.freeze({ zcopy: false, flags: 0 });

/**
 * The parts and total length of a message's data: one buffer as it is, an array copied, as
 * sendmsg(2) copies the iovec. @internal
 */
export function dataParts(data: RdsData): { parts: Uint8Array | Uint8Array[]; len: number } {
  let parts: Uint8Array | Uint8Array[];
  let len = 0;
  if (data instanceof Uint8Array) {
    parts = data;
    len = data.length;
  } else if (Array.isArray(data)) {
    for (const p of data) {
      if (!(p instanceof Uint8Array))
        throw new RdsError('EINVAL', 'every element of a data array must be a Buffer or Uint8Array');
      len += p.length;
    }
    parts = data.slice();
  } else {
    throw new RdsError('EINVAL', 'data must be a Buffer, a Uint8Array or an array of them');
  }
  return { parts, len };
}

/** A checked unicast destination, or address '' (and port 0) when none is given: connect()'s is used. @internal */
export function destination(dest: { address: string; port: number } | null | undefined): {
  address: string;
  port: number;
} {
  if (dest === undefined || dest === null) return NO_DEST;
  const to = parseEndpoint(dest, 'destination');
  const why = checkedAddress(to.address).nonUnicast;
  if (why !== null) throw new RdsError('EINVAL', `cannot send to ${to.address}: it ${why}`);
  return to;
}

const NO_DEST: Readonly<{ address: string; port: number }> = Object.freeze({ address: '', port: 0 });

/** bind()'s address, checked as RdsSocket.bind() checks it before asking the node. @internal */
export function bindEndpoint(addr: { address: string; port?: number }): { address: string; port: number } {
  const ep = parseEndpoint({ port: 0, ...addr }, 'bind address');
  const why = nonUnicastReason(ep.address);
  if (why !== null) throw new RdsError('EINVAL', `cannot bind to ${ep.address}: it ${why}`);
  if (ep.port === 1)
    throw new RdsError('EINVAL', 'port 1 is reserved for the multipath handshake; choose another port');
  return ep;
}

/** Settles as `done` does, or rejects with the signal's reason for `op` once it aborts first. @internal */
export function untilDoneOrAborted(done: Promise<unknown>, signal: AbortSignal, op: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal.aborted) {
      reject(abortError(signal, op));
      return;
    }
    const onAbort = (): void => reject(abortError(signal, op));
    signal.addEventListener('abort', onAbort, { once: true });
    done.then(
      () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      },
      (e: Error) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

const TRANSPORT_BY_NAME: Record<string, number> = { tcp: RDS_TRANS_TCP, ib: RDS_TRANS_IB };

/** The transport option of the constructor ('tcp' or 'ib') as its SO_RDS_TRANSPORT number. @internal */
export function transportByName(name: unknown): number {
  const t = TRANSPORT_BY_NAME[name as string];
  if (t === undefined) throw new RdsError('EINVAL', `transport must be 'tcp' or 'ib', got ${String(name)}`);
  return t;
}

/** setsockopt(SO_RDS_TRANSPORT)'s value, checked as RdsSocket checks it; `set`: already chosen or bound. @internal */
export function transportOption(value: unknown, set: boolean): number {
  if (typeof value !== 'number' && typeof value !== 'boolean')
    throw new RdsError('EINVAL', 'SO_RDS_TRANSPORT takes an integer');
  const v = Number(value);
  if (set) throw new RdsError('EOPNOTSUPP', 'SO_RDS_TRANSPORT can only be set once, before bind()');
  if (!Number.isInteger(v) || v < 0 || v >= 3)
    throw new RdsError('EINVAL', `SO_RDS_TRANSPORT must be RDS_TRANS_IB (0) or RDS_TRANS_TCP (2), got ${v}`);
  return v;
}
