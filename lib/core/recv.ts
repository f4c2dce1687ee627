import { RDS_CONG_MAP_BYTES, RDS_FLAG_CONG_BITMAP, RDS_FLAG_PROBE_PORT, RDS_FLAG_RETRANSMITTED } from '../constants.js';
import { OFF_DPORT, OFF_EXTHDR, OFF_FLAGS, OFF_SPORT, readU64 } from '../wire/header.js';
import { decodeHandshake, parseExtensions, npathsExtension, genNumExtension } from '../wire/extensions.js';
import type { RdsConnPath } from './path.js';
import type { RdsStack } from './stack.js';

/**
 * rds_recv_incoming: everything a transport hands up goes through here. `header` is the 48-byte
 * header, `payload` the h_len bytes. The message came from `cp.conn.faddr` to `cp.conn.laddr`.
 */
export function recvIncoming(stack: RdsStack, cp: RdsConnPath, header: Buffer, payload: Buffer): void {
  const flags = header[OFF_FLAGS]!;
  const conn = cp.conn;

  // A map update is recognised by flags == 0x01 exactly, is unsequenced, and is ignored unless
  // it is a whole map (the bytes were consumed either way).
  if (flags === RDS_FLAG_CONG_BITMAP) {
    if (payload.length !== RDS_CONG_MAP_BYTES) {
      stack.stats.inc('recv_drop_bad_cong_map');
      return;
    }
    stack.stats.inc('cong_update_received');
    const cleared = conn.peerCong.apply(payload);
    stack.congMapReceived(conn, cleared);
    return;
  }

  const seq = readU64(header, 0);
  if (seq < cp.nextRxSeq && (flags & RDS_FLAG_RETRANSMITTED)) {
    stack.stats.inc('recv_drop_old_seq');
    return;
  }
  // Accepted even if it went backwards: a restarted peer starts again at 1 without the flag.
  cp.nextRxSeq = seq + 1;
  cp.recvMessages++;
  cp.recvBytes += payload.length;

  const sport = header.readUInt16BE(OFF_SPORT);
  const dport = header.readUInt16BE(OFF_DPORT);

  if (dport === 0) {
    if (sport === 0 || !stack.options.pingEnable) return;
    stack.stats.inc('recv_ping');
    if (sport === RDS_FLAG_PROBE_PORT) {
      // Multipath probe: answer with our own handshake so kernel senders stop waiting (spec §3.4).
      processHandshake(stack, cp, header);
      cp.queueControl(0, RDS_FLAG_PROBE_PORT, [npathsExtension(stack.advertisedPaths(conn)), genNumExtension(stack.genNum)]);
      stack.stats.inc('send_pong');
      return;
    }
    // A pong is not sent to a pinger whose port is congested.
    if (conn.peerCong.test(sport)) return;
    cp.queueControl(0, sport);
    stack.stats.inc('send_pong');
    return;
  }
  if (sport === 0 && dport === RDS_FLAG_PROBE_PORT) {
    processHandshake(stack, cp, header);
    return;
  }
  stack.deliver(conn.laddr, dport, conn.faddr, sport, payload);
}

function processHandshake(stack: RdsStack, cp: RdsConnPath, header: Buffer): void {
  const hs = decodeHandshake(parseExtensions(header.subarray(OFF_EXTHDR)));
  const conn = cp.conn;
  let n = hs.npaths === undefined ? 1 : Math.min(stack.advertisedPaths(conn), hs.npaths);
  n = Math.max(n, 1);
  conn.npaths = n;
  if (hs.genNum !== undefined && hs.genNum !== 0) {
    if (conn.peerGenNum !== 0 && conn.peerGenNum !== hs.genNum) stack.peerRestarted(conn);
    conn.peerGenNum = hs.genNum;
  }
}
