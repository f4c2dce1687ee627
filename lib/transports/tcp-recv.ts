import type { Socket } from 'node:net';
import type { TransportPath } from '../core/transport-path.js';
import { RDS_CTR } from '../core/stats.js';
import { type FrameReader, READ_SLAB_SIZE } from '../wire/frame-reader.js';
import { FrameRank, type PartialFrame, PartialFrameBudget } from './partial-frames.js';
import { ReadTurn } from './read-turn.js';
import type { AdmissionSlot, TcpAdmission } from './tcp-admission.js';
import { tcpPath, type TcpPath, type TcpShared } from './tcp-carrier.js';
import { refuse, turnReads } from './tcp-socket.js';
import { readQueuedBeforeResetDestroy } from './tcp-drain.js';
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

  /** Bytes charged to the frames in progress on every carrier: h_len of those over 64 KiB, at least 256 KiB each (at most maxPartialFrameBytes). */
  get partialFrameBytes(): number {
    return this.partial.held;
  }

  rxPause(cp: TransportPath): void {
    const tp = tcpPath(cp);
    tp.setHeld(true);
    this.syncPause(cp, tp);
  }

  rxResume(cp: TransportPath): void {
    const tp = tcpPath(cp);
    tp.setHeld(false);
    this.syncPause(cp, tp);
  }

  /**
   * Reads the carrier or not, as the receive limits say. A paused socket stops reading (readStop),
   * so the kernel's receive buffer fills and TCP's window closes on the sender.
   */
  private syncPause(cp: TransportPath, tp: TcpPath): void {
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
    cp: TransportPath,
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
    // acknowledgement is enough from the first byte. So it is on a carrier the peer has already
    // sent frames on (one moved to the lane it is: TcpListener.carrierToLane).
    const spoken = reader.frames > 0 || (cp.index > 0 && cp.conn.handshake.kernelPairsBySport);
    tp.attach(sock, reader, spoken ? 0 : -1);
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
    // Its frames' rank in the partial-frame budget (FrameRank): a stranger's until it has been
    // identified for KNOWN_AFTER_MS, unless we dialed it or its peer was known when it connected.
    const knownFromStart = accepted === undefined || accepted.knownPeer !== null;
    let identifiedAt = -1;
    let proven = false; // a charged frame has come through complete
    const rank = (now: number): FrameRank =>
      proven
        ? FrameRank.Proven
        : knownFromStart || (identifiedAt >= 0 && now - identifiedAt >= PartialFrameBudget.KNOWN_AFTER_MS)
          ? FrameRank.Known
          : FrameRank.Stranger;
    // The frame in progress (its header complete): which frame it is (frames handed up before it),
    // when its header came (0: none) and the receive limits' hold then (that time does not count),
    // and its place in the partial-frame budget (charged or waiting; null for a small frame).
    let chargedFrame = -1;
    let frameStart = 0;
    let heldAtStart = 0;
    let frameTimer: NodeJS.Timeout | null = null;
    let share: PartialFrame | null = null;
    /** A protocol violation on this carrier: reported, counted, the connection reset and the path dropped. */
    const violation = (counter: number | null, why: string | null, reason: string): void => {
      if (counter !== null) host.counters.add(counter);
      if (why !== null) host.reportProtocolError(cp, new Error(why));
      refuse(sock);
      cp.drop(reason);
    };
    const stopFrame = (): void => {
      frameStart = 0;
      if (share !== null) {
        const f = share;
        share = null;
        this.partial.end(f);
      }
    };
    // The deadline counts from the header, waiting for room or not; only the receive limits'
    // hold (the node's own choice to stop reading) stops it: while they hold, it looks again each
    // second (onResume arms it too, but a carrier still waiting for room does not resume).
    const armFrameTimer = (ms: number): void => {
      if (frameTimer !== null) return;
      frameTimer = setTimeout(() => {
        frameTimer = null;
        if (!carrier.is(sock) || frameStart === 0) return;
        const now = Date.now();
        const late = now - frameStart - (tp.heldMs(now) - heldAtStart);
        if (late < frameTimeoutMs || tp.held) {
          armFrameTimer(Math.max(frameTimeoutMs - late, tp.held ? 1000 : 1));
          return;
        }
        // Timers run before the poll: after an event loop held past the deadline, the rest of
        // the frame may be waiting unread. The verdict comes after that poll (#40).
        const frame = reader.frames;
        setImmediate(() => {
          if (!carrier.is(sock) || frameStart === 0 || reader.frames !== frame) return;
          stopFrame();
          violation(
            RDS_CTR.recv_drop_frame_timeout,
            `frame payload not complete within ${frameTimeoutMs} ms`,
            'frame timeout',
          );
        });
      }, ms);
      frameTimer.unref();
    };
    /** The budget needs this frame's room for another: it has made no progress for STALL_MS. */
    const evict = (): void => {
      share = null; // the budget has let it go
      if (!carrier.is(sock)) return;
      violation(
        RDS_CTR.recv_drop_frame_stalled,
        `frame payload stalled for ${PartialFrameBudget.STALL_MS} ms while another frame waited for room`,
        'frame stalled at the partial-frame cap',
      );
    };
    /** After each read: a frame that has just begun is charged, or waits (not read) for room. */
    const trackFrame = (now: number): void => {
      const len = reader.partialPayload;
      if (frameStart !== 0 && chargedFrame === reader.frames) {
        if (share !== null) share.progressAt = now; // the same frame, still coming
        return;
      }
      // The frame before (if any) is complete (one waiting for room is not read, so it never
      // completes): one that held a share proves the connection.
      if (share !== null) proven = true;
      if (len === 0) {
        if (frameStart !== 0) stopFrame();
        return;
      }
      stopFrame();
      chargedFrame = reader.frames;
      frameStart = now;
      heldAtStart = tp.heldMs(now);
      armFrameTimer(frameTimeoutMs);
      if (len <= PartialFrameBudget.FREE_BYTES) return;
      // A frame over FREE_BYTES gets a read buffer of its own of at least READ_SLAB_SIZE.
      const f: PartialFrame = {
        bytes: Math.max(len, READ_SLAB_SIZE),
        rank: rank(now),
        progressAt: now,
        held: () => tp.held,
        granted: () => {
          if (!carrier.is(sock)) return;
          tp.setWaiting(false);
          this.syncPause(cp, tp);
        },
        evict,
      };
      share = f;
      if (this.partial.begin(f)) return;
      host.counters.add(RDS_CTR.recv_pause_partial_limit);
      tp.setWaiting(true);
      this.syncPause(cp, tp);
    };
    const onResume = carrier.guard(sock, () => {
      if (frameStart !== 0) {
        const now = Date.now();
        if (share !== null) share.progressAt = now;
        // A held frame is not stalled; from now on it may be, for frames waiting for room.
        if (this.partial.waiting > 0) this.partial.sweep();
        armFrameTimer(Math.max(1, frameTimeoutMs - (now - frameStart - (tp.heldMs(now) - heldAtStart))));
      }
      checkHeader();
    });
    tp.setOnResume(onResume);
    // An accepted connection must send a complete frame in time, or it only holds a slot.
    const identifyTimer = identified
      ? null
      : setTimeout(() => {
          // A first frame that came while the event loop was held is read in the next poll.
          setImmediate(() => {
            if (identified || !carrier.is(sock)) return;
            violation(RDS_CTR.recv_drop_header_timeout, null, 'no frame from a new connection');
          });
        }, headerTimeoutMs);
    identifyTimer?.unref();
    sock.once('close', () => {
      if (reader.frames > 0) cp.conn.heardFrom();
      this.admission.freeSlot(slot);
      if (headerTimer) clearTimeout(headerTimer);
      if (identifyTimer) clearTimeout(identifyTimer);
      if (frameTimer) clearTimeout(frameTimer);
      stopFrame();
      tp.dropOnResume(onResume);
      // Whatever still refers to the reader, its read memory goes with the connection.
      reader.discard();
    });
    // A peer that starts a header must finish it: one that sends half and stalls is dropped.
    const checkHeader = (): void => {
      if (reader.partialHeader && !cp.readPaused) {
        if (headerTimer === null) {
          headerTimer = setTimeout(() => {
            headerTimer = null;
            // As for frames: what came while the event loop was held is read first.
            const frames = reader.frames;
            setImmediate(() => {
              if (!carrier.is(sock) || !reader.partialHeader || cp.readPaused || reader.frames !== frames) return;
              violation(
                RDS_CTR.recv_drop_header_timeout,
                `no complete header within ${headerTimeoutMs} ms`,
                'header timeout',
              );
            });
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
      () => {
        turnReads(sock, slab, false);
        cp.acks.readCut(); // more to read at once: the ack waits for the burst's end (ack-pacing.ts)
      },
      () => {
        if (carrier.is(sock)) turnReads(sock, slab, true);
      },
      () => cp.readPaused,
    );
    const received = carrier.guard(sock, (input: Buffer | number): void => {
      host.counters.add(RDS_CTR.tcp_data_ready_calls);
      cp.heartbeat.noteRx();
      turn.read(typeof input === 'number' ? input : input.length);
      const framesBefore = reader.frames;
      try {
        if (typeof input === 'number') reader.filled(input);
        else reader.push(input);
        turn.framesRead(reader.frames - framesBefore);
        if (!identified && reader.frames > 0) {
          identified = true;
          identifiedAt = Date.now();
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
    // What a kernel sent before resetting the connection is read before the descriptor goes,
    // also when the receive limits hold it unread for a while (at most headerTimeoutMs in all).
    readQueuedBeforeResetDestroy(sock, { heldMs: (now) => tp.heldMs(now), capMs: headerTimeoutMs });
    sock.once('close', () => carrier.lost(sock, 'connection closed', () => tp.readerGone()));
    return received;
  }
}
