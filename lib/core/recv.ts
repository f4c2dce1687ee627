import {
  RDS_CONG_MAP_BYTES,
  RDS_FLAG_ACK_REQUIRED,
  RDS_FLAG_CONG_BITMAP,
  RDS_FLAG_PROBE_PORT,
  RDS_FLAG_RETRANSMITTED,
  RDSSOCK_EXTHDR_MOVED,
  RDSSOCK_EXTHDR_READ,
  RDSSOCK_EXTHDR_REFUSED,
  RDS_EXTHDR_RDMA,
  RDS_EXTHDR_RDMA_BYTES,
  RDS_EXTHDR_RDMA_DEST,
} from '../constants.js';
import { decodeRdmaExtensions, type RdmaExtensions } from '../wire/rdma-ext.js';
import { OFF_ACK, OFF_DPORT, OFF_EXTHDR, OFF_FLAGS, OFF_SPORT, readU64 } from '../wire/header.js';
import { decodeReadReport, parseExtensions, type RdsExtension } from '../wire/extensions.js';
import { follow, RX_DISCARDED, RX_REFUSED, type RxEntry } from './ext/rx-ack.js';
import { isWithdrawn } from './ext/withdrawn.js';
import { KERNEL_PING_PORT } from './ext/heartbeat.js';
import type { RdsConnPath } from './path.js';
import type { RdsStack } from './stack.js';
import { RDS_CTR } from './stats.js';
import type { RdsMessage, Receipt } from './types.js';

/**
 * rds_recv_incoming: everything a transport hands up goes through here. `header` is the 48-byte
 * header, `payload` the h_len bytes. The message came from `cp.conn.faddr` to `cp.conn.laddr`.
 * The transport has called cp.heartbeat.noteRx() for the read or batch this frame came in.
 * `localReceipt`: the loopback transport's receipt for a message whose sender waits for the read
 * (send-confirm.ts localReceipt); the receiving socket settles it.
 */
export function recvIncoming(
  stack: RdsStack,
  cp: RdsConnPath,
  header: Buffer,
  payload: Buffer,
  localReceipt?: RxEntry,
): void {
  // SO_RDS_MSG_RXPATH_LATENCY's stamp 0: the frame as the transport hands it up.
  if (stack.rxTrace.sockets > 0) stack.rxTrace.frameAt = process.hrtime.bigint();
  const flags = header[OFF_FLAGS]!;
  const conn = cp.conn;

  // A map update is recognised by flags == 0x01 exactly, is unsequenced, and is ignored unless
  // it is a whole map (the bytes were consumed either way).
  if (flags === RDS_FLAG_CONG_BITMAP) {
    if (payload.length !== RDS_CONG_MAP_BYTES) {
      stack.counters.add(RDS_CTR.recv_drop_bad_cong_map);
      return;
    }
    stack.counters.add(RDS_CTR.cong_update_received);
    const cleared = conn.peerCong.apply(payload);
    stack.congMapReceived(conn, cleared);
    return;
  }

  // Piggybacked ack: only an rds-socket peer in ack mode sends a non-zero h_ack over TCP.
  const ack = readU64(header, OFF_ACK);
  if (ack !== 0) cp.tx.ackThrough(ack);

  const seq = readU64(header, 0);
  const sport = header.readUInt16BE(OFF_SPORT);
  const dport = header.readUInt16BE(OFF_DPORT);

  // Ack-only frame (seq 0, ports 0, no payload): unsequenced, never delivered. With
  // ACK_REQUIRED it is a heartbeat and wants an ack back at once. Kernels never send seq 0
  // except for congestion maps, so this cannot swallow a kernel's message.
  if (seq === 0 && sport === 0 && dport === 0 && payload.length === 0) {
    stack.counters.add(RDS_CTR.recv_ack_frames);
    // No kernel sends an ack-only frame over TCP (IB's do: alwaysAcks), nor a read report: this
    // peer is rds-socket, whatever its handshake's delay (it must never be taken for a kernel).
    const ext0 = header[OFF_EXTHDR]!;
    if (
      conn.handshake.peer === 'unknown' &&
      (conn.transport.alwaysAcks !== true || ext0 === RDSSOCK_EXTHDR_READ || ext0 === RDSSOCK_EXTHDR_REFUSED)
    )
      conn.handshake.spokeAsRdsSocket();
    // What the peer's applications read, or refused: only a peer we told we understand it sends it
    // (so one whose handshake answer is still on its way reports reads: taken now, not lost).
    if (
      header[OFF_EXTHDR] !== 0 &&
      (conn.handshake.confirmsReads || (conn.handshake.peer === 'unknown' && stack.options.rdsAcks))
    ) {
      const r = decodeReadReport(parseExtensions(header.subarray(OFF_EXTHDR)));
      if (r.refused !== undefined) cp.tx.refusedByPeer(r.refused.seq, r.refused.reason);
      if (r.read !== undefined) cp.tx.readThrough(r.read.seq, r.read.refused);
    }
    if (flags & RDS_FLAG_ACK_REQUIRED) cp.acks.forceAck();
    return;
  }
  // rds-socket's hello (seq 0, sport 1 -> dport 0): the handshake, before any data on this carrier.
  if (seq === 0 && sport === RDS_FLAG_PROBE_PORT && dport === 0 && payload.length === 0) {
    if (conn.handshake.frameReceived(header, cp)) {
      cp.acks.helloReceived();
      cp.showCarrier();
    }
    return;
  }

  // A probe or pong carries the peer's generation: look at it before the duplicate check, so a
  // restarted peer's first frames are not taken for old retransmissions (they may come again,
  // RETRANSMITTED, on a later carrier, still numbered in the new life).
  const handshake =
    payload.length === 0 &&
    ((sport === RDS_FLAG_PROBE_PORT && dport === 0) || (sport === 0 && dport === RDS_FLAG_PROBE_PORT));
  // False: a lane we dialled met a restarted peer and was dropped (handshake.ts, laneSawRestart).
  if (handshake && !conn.handshake.generationReceived(cp, header)) return;
  if (handshake) cp.showCarrier();

  // A kernel's path 0 numbered a first transmission below what path 0 took, which a kernel never
  // does within one connection (it numbers as it queues, sends in that order, flags what it sends
  // again): the connection was made anew with the same GEN_NUM (rds_tcp reloaded; the rds module
  // keeps it) and numbers every path from 1. Path 0 follows by itself, but its lanes kept the old
  // numbering and dropped the kernel's resends as old (the nemesis: lost). So, as for a restart,
  // every path forgets it (protocol.md §2.5). Not for rds-socket peers: they say it with GEN_NUM.
  const retransmitted = (flags & RDS_FLAG_RETRANSMITTED) !== 0;
  if (cp.index === 0 && !retransmitted && seq < cp.rxSeq.next) conn.handshake.kernelRenumbered();

  // Failover between rds-socket peers: a message moved from a dead path carries that path's index
  // and its sequence there (its original number). Kernels never send the record.
  const moved = header[OFF_EXTHDR] === RDSSOCK_EXTHDR_MOVED;
  const verdict = moved
    ? cp.rxSeq.accept(
        seq,
        retransmitted,
        payload.length,
        true,
        conn.path(header[OFF_EXTHDR + 1]!)?.rxSeq,
        readU64(header, OFF_EXTHDR + 2),
      )
    : cp.rxSeq.accept(seq, retransmitted, payload.length);
  if (verdict === 'old') {
    stack.counters.add(RDS_CTR.recv_drop_old_seq);
    // The sender resends only what it has no ack for: make sure it gets one.
    if (conn.handshake.ackMode) cp.acks.forceAck();
    return;
  }
  const ackRequired = (flags & RDS_FLAG_ACK_REQUIRED) !== 0;
  if (ackRequired) stack.counters.add(RDS_CTR.recv_ack_required);
  if (verdict === 'dup') {
    stack.counters.add(RDS_CTR.recv_drop_moved_dup);
    // It shares the fate of the copy that came first on its original path.
    // A path never made has no fate to share: look, do not make it.
    const origin = cp.conn.pathIf(header[OFF_EXTHDR + 1]!);
    const fate = origin?.acks.rx.fateOf(readU64(header, OFF_EXTHDR + 2));
    if (fate === undefined || typeof fate === 'number') {
      const e = cp.acks.recordReceived(
        seq,
        fate === undefined || (fate !== RX_REFUSED && fate !== RX_DISCARDED),
        ackRequired,
      );
      if (e !== null && typeof fate === 'number' && (fate === RX_REFUSED || fate === RX_DISCARDED))
        cp.acks.consumed(e, fate);
    } else {
      const e = cp.acks.recordReceived(seq, false, ackRequired);
      if (e !== null) follow(fate, e);
    }
    return;
  }

  // A withdrawn record (its sender cancelled the message after it went out on a carrier that
  // died; ext/withdrawn.ts): its numbers now count as arrived, so a late copy still in that
  // carrier is a duplicate. Nothing is delivered.
  if (moved && isWithdrawn(header)) {
    stack.counters.add(RDS_CTR.recv_withdrawn);
    cp.acks.recordReceived(seq, true, ackRequired);
    return;
  }

  if (dport === 0) {
    cp.acks.recordReceived(seq, true, ackRequired);
    if (sport === 0 || !stack.options.pingEnable) return;
    stack.counters.add(RDS_CTR.recv_ping);
    if (sport === RDS_FLAG_PROBE_PORT) {
      // Multipath probe: answer with our own handshake so kernel senders stop waiting (spec §3.4).
      conn.handshake.frameReceived(header);
      answerPing(stack, cp, RDS_FLAG_PROBE_PORT, conn.handshake.extensions());
      return;
    }
    // A pong is not sent to a pinger whose port is congested.
    if (conn.peerCong.test(sport)) return;
    answerPing(stack, cp, sport);
    return;
  }
  // A kernel's answer to this path's liveness ping (ext/heartbeat.ts): nobody's message.
  if (sport === 0 && dport === KERNEL_PING_PORT && payload.length === 0 && cp.heartbeat.expectsPong) {
    cp.acks.recordReceived(seq, true, ackRequired);
    cp.heartbeat.pongReceived();
    return;
  }
  if (sport === 0 && dport === RDS_FLAG_PROBE_PORT) {
    cp.acks.recordReceived(seq, true, ackRequired);
    conn.handshake.pongReceived(header);
    cp.pongReceived();
    return;
  }
  // A peer's message is tracked for the acks (null when nothing is acknowledged); one handed over
  // by this stack's loopback transport may carry its own receipt (see localReceipt).
  const entry = cp.acks.recordReceived(seq, false, ackRequired) ?? localReceipt ?? null;
  // RDMA (a peer's op on one of our regions) and RDMA_DEST (a region it exposes): IB only.
  const ext = header[OFF_EXTHDR]!;
  const rdma =
    ext === RDS_EXTHDR_RDMA || ext === RDS_EXTHDR_RDMA_DEST || ext === RDS_EXTHDR_RDMA_BYTES
      ? decodeRdmaExtensions(parseExtensions(header.subarray(OFF_EXTHDR)))
      : undefined;
  // No socket: dropped (recv_drop_no_sock), and an RDSSOCK_CAP_CONFIRM sender is told.
  if (!deliver(stack, conn.laddr, dport, conn.faddr, sport, payload, entry, cp, rdma, header) && entry !== null)
    entry.owner.consumed(entry, RX_REFUSED);
}

/**
 * Hands a message to the socket bound to (laddr, dport); false if there is none. `from`, the
 * path it came on, stops being read if the message took the socket or the stack over a hard
 * receive limit (see RxLimiter). `header`: the message's RDS header, when it came from a peer.
 */
export function deliver(
  stack: RdsStack,
  laddr: string,
  dport: number,
  faddr: string,
  sport: number,
  data: Buffer,
  receipt: Receipt | null,
  from?: RdsConnPath,
  rdma?: RdmaExtensions,
  header?: Buffer,
): boolean {
  const sock = stack.binds.get(laddr, dport);
  if (sock === undefined) {
    stack.counters.add(RDS_CTR.recv_drop_no_sock);
    return false;
  }
  if (stack.rxTrace.sockets > 0) stack.rxTrace.deliverAt = process.hrtime.bigint();
  stack.counters.add(RDS_CTR.recv_delivered);
  stack.counters.add(RDS_CTR.recv_bytes_added_to_sock, data.length);
  // rds_recv_incoming_exthdrs: the peer's op on our region is done; a cookie it exposes rides along.
  if (rdma?.rkey !== undefined) sock.rdmaUsed?.(rdma.rkey);
  const msg: RdsMessage = { data, address: faddr, port: sport, path: from?.index };
  if (rdma?.destCookie !== undefined) msg.rdmaDest = rdma.destCookie;
  if (!sock.enqueueIncoming(msg, receipt, header)) return false;
  if (from !== undefined) stack.rxLimit.delivered(from, sock);
  return true;
}

/** A pong, unless the peer already holds maxOwnQueued of the path's own messages: then counted. */
function answerPing(stack: RdsStack, cp: RdsConnPath, dport: number, exts?: RdsExtension[]): void {
  if (cp.tx.queueControl(0, dport, exts) !== null) stack.counters.add(RDS_CTR.send_pong);
  else stack.counters.add(RDS_CTR.recv_drop_ping_budget);
}
