// What we say in a handshake that depends on nothing the peer said: the capability word we
// advertise and the hello frame around our extensions (handshake.ts decides when and with what).
import {
  RDS_FLAG_PROBE_PORT,
  RDS_FLAG_RETRANSMITTED,
  RDS_HEADER_SIZE,
  RDSSOCK_CAP_ACK,
  RDSSOCK_CAP_CONFIRM,
  RDSSOCK_CAP_FAILOVER,
  RDSSOCK_CAP_HEARTBEAT,
  RDSSOCK_CAP_LAZY_LANES,
  RDSSOCK_CAP_NO_HELLO,
  RDSSOCK_CAP_PATHS_SHIFT,
  RDSSOCK_CAP_RAILS,
} from '../constants.js';
import { packExtensions, type RdsExtension } from '../wire/extensions.js';
import { encodeHeader } from '../wire/header.js';
import type { RdsConnection } from './connection.js';

/** rds-socket capabilities `conn` advertises (RDSSOCK_CAP_*, the path count in its top bits). */
export function localCapsOf(conn: RdsConnection): number {
  const opts = conn.stack.options;
  // We always answer heartbeats, even when we send none ourselves.
  const paths = conn.transport.mpathCapable ? opts.npaths : 1;
  // Failover needs acks (to know what the peer has) and paths to move between.
  const failover = opts.rdsAcks && paths > 1 ? RDSSOCK_CAP_FAILOVER : 0;
  const acks = opts.rdsAcks ? RDSSOCK_CAP_ACK | RDSSOCK_CAP_CONFIRM : 0;
  // Rails (other address pairs to the same peer) need acks too, and a transport that carries them.
  const rails = opts.rdsAcks && conn.transport.rails === true ? RDSSOCK_CAP_RAILS : 0;
  // Lanes open on demand (lazyLanes) wherever there are lanes.
  const lazy = paths > 1 ? RDSSOCK_CAP_LAZY_LANES : 0;
  return (
    acks | RDSSOCK_CAP_HEARTBEAT | RDSSOCK_CAP_NO_HELLO | failover | rails | lazy | (paths << RDSSOCK_CAP_PATHS_SHIFT)
  );
}

/**
 * The unsequenced hello (seq 0, RETRANSMITTED, sport 1 -> dport 0, handshake extensions) that
 * starts a carrier of a lane > 0 (only rds-socket peers run lanes) and, on path 0, only a carrier
 * to an older rds-socket peer (no RDSSOCK_CAP_NO_HELLO), which acknowledges nothing before it.
 * A kernel never gets it: it would count it in recv_drop_old_seq.
 */
export function helloFrameOf(exts: readonly RdsExtension[]): Buffer {
  const h = Buffer.allocUnsafe(RDS_HEADER_SIZE);
  encodeHeader(h, 0, {
    sport: RDS_FLAG_PROBE_PORT,
    dport: 0,
    flags: RDS_FLAG_RETRANSMITTED,
    exthdr: packExtensions(exts),
  });
  return h;
}
