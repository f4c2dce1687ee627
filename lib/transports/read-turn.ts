/**
 * At most this many bytes are read from one carrier per turn of the event loop. libuv reads a
 * readable socket up to 32 times per wake-up (64 KiB each here), so a carrier that streams could
 * take 2 MiB, and every frame in it handed up, before any other carrier's reads, timers or
 * writes ran: a ping on another lane waited behind the whole turn (issue #23, head-of-line).
 */
export const READ_TURN_BYTES = 256 * 1024;

/**
 * And at most about this many frames: a frame costs the receive path far more than its bytes when
 * it is small, so 256 KiB of empty pings (5461 frames, a flood from a hostile peer) made one turn
 * several times longer than 256 KiB of messages, and every other carrier's round trip waited
 * through such turns (the attack tests hold the good peer's p99 to a multiple of its idle p99).
 * A turn still takes whole reads: the carrier stops after the read that reached it.
 */
export const READ_TURN_FRAMES = 1024;

/**
 * One carrier's reads in the current turn: once they pass `limit` the carrier stops reading
 * (`stop`) and starts again in the next turn (`start`, from setImmediate, which runs after the
 * other sockets' reads of this turn), unless the receive limits hold it then (`held`).
 */
export class ReadTurn {
  private bytes = 0;
  private frames = 0;
  private resetQueued = false;
  private stopped = false;

  constructor(
    private readonly stop: () => void,
    private readonly start: () => void,
    private readonly held: () => boolean,
    private readonly limit = READ_TURN_BYTES,
    private readonly frameLimit = READ_TURN_FRAMES,
  ) {}

  /** The carrier is stopped for this turn's budget (not for the receive limits). */
  get paused(): boolean {
    return this.stopped;
  }

  /** The read just handed up held `n` frames (complete or finished by it). */
  framesRead(n: number): void {
    this.frames += n;
    if (this.frames >= this.frameLimit && !this.stopped) {
      this.stopped = true;
      this.stop();
    }
  }

  /** `n` bytes were read in this turn. */
  read(n: number): void {
    this.bytes += n;
    if (!this.resetQueued) {
      this.resetQueued = true;
      setImmediate(this.nextTurn);
    }
    if (this.bytes >= this.limit && !this.stopped) {
      this.stopped = true;
      this.stop();
    }
  }

  private readonly nextTurn = (): void => {
    this.resetQueued = false;
    this.bytes = 0;
    this.frames = 0;
    if (!this.stopped) return;
    this.stopped = false;
    if (!this.held()) this.start();
  };
}
