// The flags and zero-copy cookie of a sendmsg() call, checked as rds_sendmsg checks them. One
// function for both kinds of socket: an attached socket answers these checks itself, before its
// host node sees the call, and must give the same errors an embedded socket gives.
import { MSG_CMSG_COMPAT, MSG_DONTWAIT, MSG_ZEROCOPY } from '../constants.js';
import { RdsError } from '../errors.js';
import type { SendmsgOptions } from './socket-types.js';

/**
 * True when the call asks for zero-copy and the socket allows it. `zerocopyOn` is SO_ZEROCOPY;
 * `nonTcp` names the socket's transport when that is not TCP (MSG_ZEROCOPY is TCP's only).
 * @internal
 */
export function zeroCopyRequested(opts: SendmsgOptions, zerocopyOn: boolean, nonTcp: string | null): boolean {
  if (opts === null || typeof opts !== 'object') throw new RdsError('EINVAL', 'sendmsg options must be an object');
  const flags = opts.flags ?? 0;
  if (typeof flags !== 'number' || !Number.isInteger(flags))
    throw new RdsError('EINVAL', `flags must be an integer, got ${String(flags)}`);
  if ((flags & ~(MSG_DONTWAIT | MSG_CMSG_COMPAT | MSG_ZEROCOPY)) !== 0) {
    throw new RdsError(
      'EOPNOTSUPP',
      `unsupported sendmsg flags 0x${(flags >>> 0).toString(16)}; RDS takes MSG_DONTWAIT and MSG_ZEROCOPY`,
    );
  }
  // As in the kernel, MSG_ZEROCOPY means zero-copy only on a socket that opted in with SO_ZEROCOPY.
  const zcopy = (flags & MSG_ZEROCOPY) !== 0 && zerocopyOn;
  if (zcopy && nonTcp !== null) {
    throw new RdsError('EOPNOTSUPP', `MSG_ZEROCOPY works on TCP sockets only; this one uses ${nonTcp}`);
  }
  const cookie = opts.zcopyCookie;
  if (cookie === undefined) {
    if (zcopy) throw new RdsError('EINVAL', 'MSG_ZEROCOPY needs a zcopyCookie (a u32) to report the completion with');
    return false;
  }
  if (!zcopy) {
    throw new RdsError(
      'EINVAL',
      zerocopyOn
        ? 'zcopyCookie is only for MSG_ZEROCOPY sends; add MSG_ZEROCOPY to flags'
        : 'zcopyCookie needs zero-copy: set SO_ZEROCOPY on the socket and pass MSG_ZEROCOPY',
    );
  }
  if (typeof cookie !== 'number' || !Number.isInteger(cookie) || cookie < 0 || cookie > 0xffffffff) {
    throw new RdsError('EINVAL', `zcopyCookie must be an integer in [0, 2^32), got ${String(cookie)}`);
  }
  return true;
}
