import { SIOCRDSGETTOS, SIOCRDSSETTOS } from '../constants.js';
import { RdsError } from '../errors.js';

// A socket's type of service (af_rds.c rds_ioctl, SIOCRDSSETTOS / SIOCRDSGETTOS). The kernel
// maps the TOS the application asks for through its transport's get_tos_map: RDS/TCP maps every
// TOS to 0 (all TOS share one connection, which therefore carries 0), RDS/IB keeps it (a
// connection per TOS, its service level from the TOS); a socket with no transport yet (unbound,
// no SO_RDS_TRANSPORT) or on a transport without a map (the kernel's loopback) answers ENOTTY.
// The map is the transport's (RdsTransport.tosMap); the core only keeps what it answered and
// keys the socket's connections by it (connection.c: a connection per laddr, faddr, transport, tos).
// A socket sets its TOS once, before its first send: the kernel refuses (EINVAL) when the TOS
// kept is already non-zero or the socket has a connection cached by a send.

function noMap(what: string): RdsError {
  return new RdsError(
    'ENOTTY',
    `${what} needs a socket whose transport maps a TOS: bind() it first (or set SO_RDS_TRANSPORT), as the kernel requires`,
  );
}

/** What an ioctl() needs of the socket: its transport's map (null: none), the TOS kept, whether it sent. */
export interface TosState {
  /** The transport's get_tos_map for `tos`, or null where the socket has no transport with one. */
  map(tos: number): number | null;
  /** rs_tos: the TOS kept (0 until set). */
  readonly kept: number;
  /** The socket has sent (the kernel's cached rs_conn). */
  readonly sent: boolean;
}

/**
 * ioctl(2) on an RDS socket: SIOCRDSSETTOS (arg: the TOS, 0..255) answers the TOS to keep (the
 * transport's map of it); SIOCRDSGETTOS answers the TOS kept. The caller keeps what SET answers.
 */
export function rdsIoctl(request: number, arg: unknown, s: TosState): number {
  switch (request) {
    case SIOCRDSSETTOS: {
      if (typeof arg !== 'number' || !Number.isInteger(arg) || arg < 0 || arg > 255)
        throw new RdsError('EINVAL', `SIOCRDSSETTOS takes a TOS from 0 to 255 (rds_tos_t is a u8), got ${String(arg)}`);
      const tos = s.map(arg);
      if (tos === null) throw noMap('SIOCRDSSETTOS');
      if (s.sent)
        throw new RdsError(
          'EINVAL',
          'SIOCRDSSETTOS must come before the socket first sends (its connection is chosen then)',
        );
      if (s.kept !== 0)
        throw new RdsError('EINVAL', `SIOCRDSSETTOS: the socket already has TOS ${s.kept}; a TOS is set once`);
      return tos;
    }
    case SIOCRDSGETTOS:
      return s.kept;
    default:
      throw new RdsError(
        'ENOTTY',
        `ioctl request 0x${request.toString(16)} is not one an RDS socket takes (SIOCRDSSETTOS, SIOCRDSGETTOS)`,
      );
  }
}

/**
 * A socket's rs_tos and whether it has queued a message (SIOCRDSSETTOS must come before the
 * first send: the kernel caches the connection then). Only the socket writes it. @internal
 */
export class SocketTos {
  sent = false;
  tos = 0;

  /** ioctl(2) for a socket whose backend maps a TOS as `map` does and hears of a kept one by `kept`. */
  ioctl(request: number, arg: unknown, map: TosState['map'], kept?: (tos: number) => void): number {
    const r = rdsIoctl(request, arg, { map, kept: this.tos, sent: this.sent });
    if (request !== SIOCRDSSETTOS) return r;
    this.tos = r;
    kept?.(r);
    return 0;
  }
}
