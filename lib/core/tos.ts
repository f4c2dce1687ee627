import { RDS_TRANS_IB, RDS_TRANS_TCP, SIOCRDSGETTOS, SIOCRDSSETTOS } from '../constants.js';
import { RdsError } from '../errors.js';

// A socket's type of service (af_rds.c rds_ioctl, SIOCRDSSETTOS / SIOCRDSGETTOS). The kernel
// maps the TOS the application asks for through its transport's get_tos_map: RDS/TCP maps every
// TOS to 0 (all TOS share one connection, which therefore carries 0), RDS/IB keeps it (a
// connection per TOS, its service level from the TOS); a socket with no transport yet (unbound,
// no SO_RDS_TRANSPORT) or on a transport without a map (the kernel's loopback) answers ENOTTY.
// A socket sets its TOS once, before its first send: the kernel refuses (EINVAL) when the TOS
// kept is already non-zero or the socket has a connection cached by a send.

// What rds-socket keeps is always 0: TCP maps every TOS to 0, and a non-zero TOS on IB (which
// needs a connection per TOS) is refused, so the kernel's "TOS already set" case cannot arise.

/** The transport's get_tos_map for `tos`, or null where the transport has none (ENOTTY). */
export function tosMap(transType: number, tos: number): number | null {
  if (transType === RDS_TRANS_TCP) return 0;
  if (transType === RDS_TRANS_IB) return tos;
  return null;
}

function noMap(what: string): RdsError {
  return new RdsError(
    'ENOTTY',
    `${what} needs a socket whose transport maps a TOS: bind() it first (or set SO_RDS_TRANSPORT), as the kernel requires`,
  );
}

/**
 * ioctl(2) on an RDS socket: SIOCRDSSETTOS (arg: the TOS, 0..255; returns 0) and SIOCRDSGETTOS
 * (returns the TOS kept). `transType` is the socket's RDS_TRANS_* (RDS_TRANS_NONE before one is
 * chosen); `sent` says whether the socket has sent (the kernel's cached rs_conn).
 */
export function rdsIoctl(request: number, arg: unknown, transType: number, sent: boolean): number {
  switch (request) {
    case SIOCRDSSETTOS: {
      if (typeof arg !== 'number' || !Number.isInteger(arg) || arg < 0 || arg > 255)
        throw new RdsError('EINVAL', `SIOCRDSSETTOS takes a TOS from 0 to 255 (rds_tos_t is a u8), got ${String(arg)}`);
      const tos = tosMap(transType, arg);
      if (tos === null) throw noMap('SIOCRDSSETTOS');
      if (sent)
        throw new RdsError(
          'EINVAL',
          'SIOCRDSSETTOS must come before the socket first sends (its connection is chosen then)',
        );
      if (tos !== 0)
        // rds_rdma opens a connection per TOS and puts the TOS in its connect private data; the
        // userspace IB transport has one connection per peer, so it cannot honour another TOS.
        throw new RdsError(
          'EOPNOTSUPP',
          `SIOCRDSSETTOS ${tos}: the IB transport has one connection per peer (TOS 0); a connection per TOS is not implemented`,
        );
      return 0;
    }
    case SIOCRDSGETTOS:
      // The TOS kept (rs_tos): 0, see above.
      return 0;
    default:
      throw new RdsError(
        'ENOTTY',
        `ioctl request 0x${request.toString(16)} is not one an RDS socket takes (SIOCRDSSETTOS, SIOCRDSGETTOS)`,
      );
  }
}
