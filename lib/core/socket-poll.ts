// poll(2) for a socket (the kernel's rds_poll in af_rds.c): the bits its backend's state gives,
// and POLLWRBAND once after each congestion map received, which needs the generation last seen.
import { POLLERR, POLLIN, POLLOUT, POLLRDNORM, POLLWRBAND, POLLWRNORM } from '../constants.js';
import type { SocketBackend } from './socket-backend.js';

/** @internal */
export class PollBits {
  constructor(private lastCongGen: number) {}

  /** The poll bits of an open socket over `b` (spec §6.6). */
  mask(b: SocketBackend): number {
    let mask = 0;
    if (b.readable()) mask |= POLLIN | POLLRDNORM;
    // Once after each congestion map received (rds_poll), unless RDS_CONG_MONITOR asks for the
    // maps as messages instead.
    if (!b.options.congMonitor) {
      const gen = b.congGeneration();
      if (gen !== this.lastCongGen) {
        this.lastCongGen = gen;
        mask |= POLLIN | POLLRDNORM | POLLWRBAND;
      }
    }
    if (b.hasRoom(false)) mask |= POLLOUT | POLLWRNORM;
    // A refusal from a host node waits for the next call (as a pending socket error: sk_err).
    if (b.pollErr()) mask |= POLLERR;
    return mask;
  }
}
