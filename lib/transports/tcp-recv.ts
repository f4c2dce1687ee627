import type { Socket } from 'node:net';
import type { RdsConnPath } from '../core/path.js';
import { RDS_CTR } from '../core/stats.js';
import type { FrameReader } from '../wire/frame-reader.js';
import { PartialFrameBudget } from './partial-frames.js';
import { ReadTurn } from './read-turn.js';
import type { AdmissionSlot, TcpAdmission } from './tcp-admission.js';
import { refuse, tcpPath, type TcpPath, type TcpShared } from './tcp-carrier.js';
import type { TcpSender } from './tcp-send.js';

/**
 * The receiving side of RDS/TCP (the kernel's tcp_recv.c) and the carrier's life from attach to
 * close: frames are reassembled from the stream and handed up; a peer that starts a header or a
 * payload must finish it in time; partial frames share one budget; the core may stop reading.
 */
export class TcpReceiver {
  /** Frames in progress on every carrier, bounded by maxPartialFrameBytes. */
  private partial!: PartialFrameBudget;

  constructor(
    private readonly ctx: TcpShared,
    private readonly admission: TcpAdmission,
    private readonly sender: TcpSender,
  ) {}

  attach(): void {
    this.partial = new PartialFrameBudget(this.ctx.host.options.maxPartialFrameBytes);
  }

  /** Declared payload bytes of the frames in progress on every carrier (at most maxPartialFrameBytes). */
  get partialFrameBytes(): number {
    return this.partial.held;
  }

  rxPause(cp: RdsConnPath): void {
    const tp = tcpPath(cp);
    tp.setHeld(true);
    this.syncPause(cp, tp);
  }

  rxResume(cp: RdsConnPath): void {
    const tp = tcpPath(cp);
    tp.setHeld(false);
    this.syncPause(cp, tp);
  }

  /**
   * Reads the carrier or not, as the receive limits say. A paused socket stops reading (readStop),
   * so the kernel's receive buffer fills and TCP's window closes on the sender.
   */
  private syncPause(cp: RdsConnPath, tp: TcpPath): void {
    const want = tp.held || tp.waiting;
    if (want === cp.readPaused) return;
    cp.setReadPaused(want);
    if (tp.reader !== null) tp.reader.holdGrowth = want;
    const sock = tp.sock;
    if (sock === null) return;
    if (want) {
      sock.pause();
    } else {
      sock.resume();
      tp.resumed();
    }
  }

  /**
   * Makes `sock` the path's carrier. Bytes arrive as 'data' chunks, or (slab) as counts of bytes
   * read into `reader`'s memory, which the returned function takes.
   */
  attachCarrier(
    cp: RdsConnPath,
    sock: Socket,
    reader: FrameReader,
    slab: boolean,
    accepted?: AdmissionSlot,
  ): (n: number) => void {
    const host = this.ctx.host;
    const tp = tcpPath(cp);
    const carrier = tp.slot;
    // A kernel that pairs by source port (SPORT_IDX, 7.0+) never resets a lane connection (one it
    // cannot place yet it keeps until it can) and may send nothing on a lane: there TCP's
    // acknowledgement is enough from the first byte.
    tp.attach(sock, reader, cp.index > 0 && cp.conn.handshake.kernelPairsBySport ? 0 : -1);
    // An accepted carrier counts as unidentified until its first complete frame (its slot was
    // taken when it was admitted); one we initiated is identified from the start.
    const slot = accepted ?? this.admission.takeSlot(null);
    if (accepted === undefined) this.admission.identifySlot(slot);
    let identified = slot.identified;
    // A new carrier reads unless the core still holds the path (its queue is still over the limit).
    cp.setReadPaused(false);
    this.syncPause(cp, tp);
    let headerTimer: NodeJS.Timeout | null = null;
    const { headerTimeoutMs, frameTimeoutMs } = host.options;
    // The frame in progress (its header complete): its share of the partial-frame budget, which
    // frame it is (frames handed up before it), and when its clock started (0: none running).
    let charged = 0;
    let chargedFrame = -1;
    let frameStart = 0;
    let frameTimer: NodeJS.Timeout | null = null;
    let withdraw: (() => void) | null = null;
    /** A protocol violation on this carrier: reported, counted, the connection reset and the path dropped. */
    const violation = (counter: number | null, why: string | null, reason: string): void => {
      if (counter !== null) host.counters.add(counter);
      if (why !== null) host.reportProtocolError(cp, new Error(why));
      refuse(sock);
      cp.drop(reason);
    };
    const stopFrame = (): void => {
      frameStart = 0;
      if (charged > 0) {
        const n = charged;
        charged = 0;
        this.partial.give(n);
      }
    };
    const armFrameTimer = (ms: number): void => {
      if (frameTimer !== null) return;
      frameTimer = setTimeout(() => {
        frameTimer = null;
        if (!carrier.is(sock) || frameStart === 0) return;
        // Our own pause stops the clock; onResume restarts it.
        if (cp.readPaused) return;
        const late = Date.now() - frameStart;
        if (late < frameTimeoutMs) {
          armFrameTimer(frameTimeoutMs - late);
          return;
        }
        violation(
          RDS_CTR.recv_drop_frame_timeout,
          `frame payload not complete within ${frameTimeoutMs} ms`,
          'frame timeout',
        );
      }, ms);
      frameTimer.unref();
    };
    /** After each read: charge a frame that has just begun, or wait (not reading) for room. */
    const trackFrame = (now: number): void => {
      const len = reader.partialPayload;
      if (len === 0) {
        if (frameStart !== 0) stopFrame();
        return;
      }
      if (frameStart !== 0 && chargedFrame === reader.frames) return; // the same frame, still coming
      stopFrame();
      chargedFrame = reader.frames;
      const share = len > PartialFrameBudget.FREE_BYTES ? len : 0;
      if (share === 0 || this.partial.tryTake(share)) {
        charged = share;
        frameStart = now;
        armFrameTimer(frameTimeoutMs);
        return;
      }
      host.counters.add(RDS_CTR.recv_pause_partial_limit);
      tp.setWaiting(true);
      this.syncPause(cp, tp);
      withdraw = this.partial.wait(len, () => {
        withdraw = null;
        charged = len; // given back by the close handler if this carrier is already replaced
        frameStart = Date.now();
        if (!carrier.is(sock)) return;
        tp.setWaiting(false);
        this.syncPause(cp, tp);
      });
    };
    tp.setOnResume(
      carrier.guard(sock, () => {
        if (frameStart !== 0) {
          frameStart = Date.now();
          armFrameTimer(frameTimeoutMs);
        }
        checkHeader();
      }),
    );
    // An accepted connection must send a complete frame in time, or it only holds a slot.
    const identifyTimer = identified
      ? null
      : setTimeout(() => {
          if (identified || !carrier.is(sock)) return;
          violation(RDS_CTR.recv_drop_header_timeout, null, 'no frame from a new connection');
        }, headerTimeoutMs);
    identifyTimer?.unref();
    sock.once('close', () => {
      if (reader.frames > 0) cp.conn.heardFrom();
      this.admission.freeSlot(slot);
      if (headerTimer) clearTimeout(headerTimer);
      if (identifyTimer) clearTimeout(identifyTimer);
      if (frameTimer) clearTimeout(frameTimer);
      withdraw?.();
      stopFrame();
      if (carrier.is(sock)) tp.setOnResume(null);
    });
    // A peer that starts a header must finish it: one that sends half and stalls is dropped.
    const checkHeader = (): void => {
      if (reader.partialHeader && !cp.readPaused) {
        if (headerTimer === null) {
          headerTimer = setTimeout(() => {
            headerTimer = null;
            if (!carrier.is(sock) || !reader.partialHeader || cp.readPaused) return;
            violation(
              RDS_CTR.recv_drop_header_timeout,
              `no complete header within ${headerTimeoutMs} ms`,
              'header timeout',
            );
          }, headerTimeoutMs);
          headerTimer.unref();
        }
      } else if (headerTimer !== null) {
        clearTimeout(headerTimer);
        headerTimer = null;
      }
    };
    // A bounded read per turn (read-turn.ts); the receive limits' own pause (cp.readPaused) wins.
    const turn = new ReadTurn(
      () => sock.pause(),
      () => {
        if (carrier.is(sock)) sock.resume();
      },
      () => cp.readPaused,
    );
    const received = carrier.guard(sock, (input: Buffer | number): void => {
      host.counters.add(RDS_CTR.tcp_data_ready_calls);
      cp.noteRxActivity();
      turn.read(typeof input === 'number' ? input : input.length);
      const framesBefore = reader.frames;
      try {
        if (typeof input === 'number') reader.filled(input);
        else reader.push(input);
        turn.framesRead(reader.frames - framesBefore);
        if (!identified && reader.frames > 0) {
          identified = true;
          this.admission.identifySlot(slot);
          cp.conn.heardFrom();
        }
        if (!carrier.is(sock)) return; // a frame made the core drop the path
        if (tp.provenAt < 0 && reader.frames > 0) this.sender.carrierProven(cp, tp);
        trackFrame(cp.heartbeat.lastRxAt);
        checkHeader();
      } catch (e) {
        if (!carrier.is(sock)) return;
        host.reportProtocolError(cp, e instanceof Error ? e : new Error(String(e)));
        refuse(sock);
        cp.drop('protocol error');
      }
    });
    if (!slab) sock.on('data', received);
    sock.on(
      'drain',
      carrier.guard(sock, () => {
        host.counters.add(RDS_CTR.tcp_write_space_calls);
        cp.tx.kick();
      }),
    );
    sock.on('error', () => {});
    sock.once('close', () => carrier.lost(sock, 'connection closed', () => tp.readerGone()));
    return received;
  }
}
