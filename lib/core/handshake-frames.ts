// What we say in a handshake: the capability word we advertise, the extensions and the hello frame
// around them (handshake.ts decides when, and what it knows of the peer decides the path count).
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
  RDSSOCK_CAP_WITHDRAWN,
} from '../constants.js';
import {
  genNumExtension,
  npathsExtension,
  packExtensions,
  rdsCapsExtension,
  sportIdxExtension,
  type RdsExtension,
} from '../wire/extensions.js';
import { encodeHeader } from '../wire/header.js';
import type { RdsConnection } from './connection.js';
import type { RdsConnPath } from './path.js';

/** rds-socket capabilities `conn` advertises (RDSSOCK_CAP_*, the path count in its top bits). */
export function localCapsOf(conn: RdsConnection): number {
  const opts = conn.stack.options;
  // We always answer heartbeats, even when we send none ourselves.
  const paths = conn.transport.mpathCapable ? opts.npaths : 1;
  // Failover needs acks (to know what the peer has) and paths to move between.
  const failover = opts.rdsAcks && paths > 1 ? RDSSOCK_CAP_FAILOVER : 0;
  // With acks, a cancelled message still in a dead carrier keeps its place (withdrawn.ts).
  const acks = opts.rdsAcks ? RDSSOCK_CAP_ACK | RDSSOCK_CAP_CONFIRM | RDSSOCK_CAP_WITHDRAWN : 0;
  // Rails (other address pairs to the same peer) need acks too, and a transport that carries them.
  const rails = opts.rdsAcks && conn.transport.rails === true ? RDSSOCK_CAP_RAILS : 0;
  // Lanes open on demand (lazyLanes) wherever there are lanes.
  const lazy = paths > 1 ? RDSSOCK_CAP_LAZY_LANES : 0;
  return (
    acks | RDSSOCK_CAP_HEARTBEAT | RDSSOCK_CAP_NO_HELLO | failover | rails | lazy | (paths << RDSSOCK_CAP_PATHS_SHIFT)
  );
}

/**
 * Extensions of a handshake frame (hello, probe, pong): the kernel's set (NPATHS when `paths` is
 * given, GEN_NUM, and SPORT_IDX when we choose our source ports), then ours last, where kernel
 * parsers stop (`caps`: Handshake.localCaps). `paths` null (a peer not known yet, over a
 * multipath transport): no NPATHS, so a kernel keeps the path count it has (it sets one only from
 * an NPATHS record, rds_recv_hs_exthdrs, and raises it to 1 if it had none). A 7.x kernel that
 * ran 8 paths with our previous life still hashes its sockets over 8 lanes and queues on the ones
 * down; told 1 before we knew it pairs by port, it sent their next messages on path 0, ahead of
 * what waited on their lanes (kernel-npaths-restart.test.ts). Once the peer is known,
 * Handshake.settle sees that it is told.
 */
export function handshakeExtensionsOf(conn: RdsConnection, paths: number | null, caps: number): RdsExtension[] {
  const exts: RdsExtension[] = [];
  if (paths !== null) exts.push(npathsExtension(paths));
  exts.push(genNumExtension(conn.stack.genNum));
  if (conn.isInitiator && conn.transport.mpathCapable) exts.push(sportIdxExtension());
  exts.push(rdsCapsExtension(caps));
  return exts;
}

/**
 * The unsequenced hello (seq 0, RETRANSMITTED, sport 1 -> dport 0, handshake extensions) that
 * starts some carriers (startsWithHello, below). A kernel never gets it: it would count it in
 * recv_drop_old_seq.
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

/**
 * Whether a new carrier of `cp` starts with the unsequenced hello: every lane > 0 except to a
 * kernel (7.x runs lanes too: it would count the hello in recv_drop_old_seq), and on path 0 an
 * older rds-socket peer's (Handshake.wantsLegacyHello); elsewhere the sequenced probe serves.
 *
 * And path 0 to a peer known to be rds-socket with messages queued (to resend, or sent while it
 * was down): they go ahead of the probe, sequenced, so a peer that restarted learns what we are
 * only once they are through. If the carrier stalls meanwhile (a partition in one direction, a
 * paused node), its handshake wait runs out and it takes us for a kernel, whose TCP
 * acknowledgement confirms a message: bytes a paused node's kernel took and the node never read
 * were confirmed and lost (the nemesis, seed 6067). The hello goes ahead of anything queued and
 * says it at once. (A peer that was rds-socket and is a kernel now counts it in recv_drop_old_seq.)
 */
export function startsWithHello(cp: RdsConnPath): boolean {
  const hs = cp.conn.handshake;
  if (cp.index > 0) return hs.peer !== 'kernel';
  if (hs.wantsLegacyHello) return true;
  return hs.peer === 'rds-socket' && !cp.conn.isLoopback && cp.tx.sendQueue.length > 0;
}
