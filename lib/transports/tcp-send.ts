import type { Socket } from 'node:net';
import type { TransportConn } from '../core/transport-path.js';
import type { RdsOutgoing } from '../core/message.js';
import type { TransportPath } from '../core/transport-path.js';
import { RDS_CTR } from '../core/stats.js';
import { native } from '../native.js';
import { encodeCongUpdate } from '../wire/header.js';
import { TCP_CARRIER, tcpPath, type TcpPath, type TcpShared } from './tcp-carrier.js';
import { socketFd } from './tcp-socket.js';
import { writing } from './tcp-sndbuf.js';

/**
 * The sending side of RDS/TCP (the kernel's tcp_send.c): frames go to the carrier socket, batched
 * into one write where they lie back to back; a kernel peer's messages are released once TCP has
 * acknowledged their last byte (spec §2.4).
 */
export class TcpSender {
  constructor(private readonly ctx: TcpShared) {}

  xmitBegin(cp: TransportPath): boolean {
    const tp = tcpPath(cp);
    // Destroyed (a reset, a shutdown) before its 'close' reached the path: a message moved to the
    // retransmit queue now would be written nowhere and resent, flagged, as if it had been sent.
    if (tp.sock === null || tp.sock.destroyed) return false;
    tp.beginBatch();
    // Between rds-socket peers a batch is usually one write (the run of frames), which needs no
    // cork; the socket is corked only when a batch makes several writes (see corkBatch).
    if (!cp.conn.handshake.ackMode) tp.corkBatch();
    return true;
  }

  xmitEnd(cp: TransportPath): void {
    const tp = tcpPath(cp);
    this.writeRun(tp);
    tp.endBatch();
  }

  xmit(cp: TransportPath, msg: RdsOutgoing): boolean {
    const tp = tcpPath(cp);
    const sock = tp.sock!;
    const w = msg.wire;
    writing(sock, msg.len); // 'auto' caps a same-host carrier's buffer at its first large message
    if (msg.zcPayload !== null) return this.xmitZeroCopy(cp, tp, sock, msg);
    const end = tp.addWritten(w.length);
    if (cp.conn.handshake.ackMode) {
      // A large frame's memory is reused once its message is done: the write holds it.
      if (msg.recycles) return this.writeHeld(tp, sock, msg);
      // An rds-socket peer acknowledges messages itself: no write callback needed, and frames
      // queued back to back (see WireSlab) go to the socket as one buffer.
      if (!tp.extendRun(w)) {
        if (tp.hasRun) tp.corkBatch(); // a second write in this batch
        this.writeRun(tp);
        tp.startRun(w);
      }
      // Past the socket's high-water mark the run goes out now, and the batch stops only if the
      // socket says so: then 'drain' is certain to follow (a write the kernel took whole is not
      // followed by one).
      if (sock.writableLength + tp.runLength < sock.writableHighWaterMark) return true;
      return this.writeRun(tp);
    }
    // Anything else is released once TCP has acknowledged the message's last byte (spec §2.4).
    this.writeRun(tp);
    tp.track.push({ end, seq: msg.seq });
    msg.xmitHold();
    return sock.write(w, (err) => {
      msg.xmitDone();
      if (!err) this.flushedTo(cp, tp, sock, end);
    });
  }

  /** A frame written on its own, held until the socket is done with it (it may be reused). */
  private writeHeld(tp: TcpPath, sock: Socket, msg: RdsOutgoing): boolean {
    tp.corkBatch();
    this.writeRun(tp);
    msg.xmitHold();
    return sock.write(msg.wire, () => msg.xmitDone());
  }

  /** The kernel has taken a kernel peer's stream up to `end`: what TCP has acknowledged is done. */
  private flushedTo(cp: TransportPath, tp: TcpPath, sock: Socket, end: number): void {
    if (!tp.slot.is(sock)) return;
    tp.flushedTo(end);
    this.releaseAcked(cp);
  }

  /**
   * MSG_ZEROCOPY: the header, then the caller's buffers as they are. The message holds its payload
   * until the last write completes, so a cancelled or acknowledged message is released only once
   * no queued write can still read buffers the caller is about to reuse.
   */
  private xmitZeroCopy(cp: TransportPath, tp: TcpPath, sock: Socket, msg: RdsOutgoing): boolean {
    const payload = msg.zcPayload!;
    const writes: Uint8Array[] = [msg.wire];
    for (const part of payload instanceof Uint8Array ? [payload] : payload) if (part.length > 0) writes.push(part);
    tp.corkBatch();
    this.writeRun(tp);
    const end = tp.addWritten(msg.wire.length + msg.len);
    const ackMode = cp.conn.handshake.ackMode;
    if (!ackMode) tp.track.push({ end, seq: msg.seq });
    msg.xmitHold();
    const last = writes.length - 1;
    // Any write refused means 'drain' will come: only then may the batch stop.
    let ok = true;
    for (let i = 0; i < last; i++) ok = sock.write(writes[i]!) && ok;
    ok =
      sock.write(writes[last]!, (err) => {
        msg.xmitDone();
        if (!ackMode && !err) this.flushedTo(cp, tp, sock, end);
      }) && ok;
    return ok;
  }

  /** Hands the gathered run of frames to the socket; false when the socket wants a 'drain' first. */
  writeRun(tp: TcpPath): boolean {
    const run = tp.takeRun();
    if (run === null || tp.sock === null) return true;
    return tp.sock.write(run);
  }

  xmitCong(cp: TransportPath, map: Buffer): boolean {
    const tp = tcpPath(cp);
    const sock = tp.sock!;
    const frame = encodeCongUpdate(map);
    tp.corkBatch();
    this.writeRun(tp);
    const end = tp.addWritten(frame.length);
    // Its write completing counts for releaseAcked too: it may be the byte that follows a proof.
    if (
      !sock.write(frame, (err) => {
        if (!err && !cp.conn.handshake.ackMode) this.flushedTo(cp, tp, sock, end);
      })
    ) {
      this.ctx.host.counters.add(RDS_CTR.tcp_sndbuf_full);
      return false;
    }
    return true;
  }

  xmitControl(cp: TransportPath, header: Buffer, done: () => void): void {
    const tp = tcpPath(cp);
    const sock = tp.sock;
    if (sock === null) {
      done();
      return;
    }
    this.writeRun(tp);
    tp.addWritten(header.length);
    sock.write(header, () => done());
  }

  capabilitiesChanged(conn: TransportConn): void {
    for (const cp of conn.madePaths()) {
      const tp = cp.carrierIf(TCP_CARRIER);
      if (tp === null) continue;
      if (conn.handshake.ackMode) tp.track.drain();
      else this.releaseAcked(cp);
    }
  }

  /**
   * The peer's first frame (a kernel's congestion map) arrived on this carrier: the peer has taken
   * it as a path. Messages already written wait until TCP acknowledges a byte written from now on
   * (releaseAcked), so unless more is on its way a congestion map update follows.
   */
  carrierProven(cp: TransportPath, tp: TcpPath): void {
    tp.markProven();
    if (tp.track.length === 0 || cp.conn.handshake.ackMode) return;
    if (cp.tx.sendQueue.length === 0) cp.tx.queueCongUpdate();
    this.releaseAcked(cp);
  }

  /**
   * Frees messages whose last byte TCP has acknowledged: bytes handed to the kernel minus those
   * it still holds unacknowledged (SIOCOUTQ). Without the native addon, handing the bytes to the
   * kernel is the best Node can see, and counts.
   *
   * Only on a proven carrier, and only once the acknowledgement covers a byte written after the
   * proof. A 6.1 kernel's TCP acknowledges what arrives on a connection it has not accepted yet
   * (spec §3.5-3.6); if its RDS then refuses the connection (the path is still shutting down the
   * previous one) it resets it unread, and if it takes it, it reads what had queued only when its
   * receive worker or the next segment comes. Its first frame shows it took the connection; a
   * segment that arrives after that is read at once, with everything queued before it. Until
   * then, acknowledged messages stay in the retransmit queue and are resent if the carrier dies.
   */
  private releaseAcked(cp: TransportPath): void {
    const tp = tcpPath(cp);
    const sock = tp.sock;
    if (sock === null || tp.track.length === 0) return;
    if (cp.conn.handshake.ackMode) {
      tp.track.drain();
      return;
    }
    if (tp.provenAt < 0) return; // carrierProven() calls again
    // A carrier being torn down answers nothing any more: Node drops its descriptor when it
    // destroys the socket, before 'close' makes the path let go of it, and a write that completed
    // just before still calls back in between. What TCP had not acknowledged then is lost with the
    // socket: it stays in the retransmit queue and is resent on the next carrier.
    if (sock.destroyed) return;
    if (cp.conn.handshake.releaseOnTransportAck) {
      const acked = acknowledged(tp, sock);
      if (acked < 0) return;
      const upTo = acked > tp.provenAt ? acked : 0;
      let seq = -1;
      for (let h = tp.track.peek(); h !== undefined && h.end <= upTo; h = tp.track.peek()) {
        seq = h.seq;
        tp.track.shift();
      }
      if (seq >= 0) {
        tp.outqProgress();
        cp.tx.ackThrough(seq);
      }
    }
    tp.pollOutq(() => {
      if (tp.slot.is(sock)) this.releaseAcked(cp);
    }, this.ctx.ref);
  }
}

/**
 * How far TCP has acknowledged the carrier's stream: the bytes handed to the kernel minus those it
 * still holds unacknowledged (SIOCOUTQ). Without the native addon, handing them to the kernel is
 * the best Node can see, and counts (as documented). With it, a carrier whose descriptor is gone
 * or whose ioctl fails proves nothing: -1, and nothing is released (the bytes the kernel still
 * held are exactly the ones a reset discards).
 */
function acknowledged(tp: TcpPath, sock: Socket): number {
  const n = native();
  if (n === null) return tp.flushed;
  const fd = socketFd(sock);
  if (fd < 0) return -1;
  try {
    return tp.flushed - n.tcpOutq(fd);
  } catch {
    return -1;
  }
}
