import { defer } from './defer.js';

/** A path whose last turn moved more messages than this is carrying a stream: it batches. */
const EAGER_MAX = 2;
/** Bytes queued since the last pump that make the next one run without waiting for the turn's end. */
const FLUSH_BYTES = 64 << 10;

/**
 * When a path's pump runs (PathSend.schedulePump): the rule the host node's FrameWriter follows
 * for its control sockets. A path carrying single messages (its last turn moved at most EAGER_MAX)
 * pumps the first message of a turn at once, in a microtask, so a request or a reply does not wait
 * for the end of the turn. Otherwise the pump runs once at the end of the turn (setImmediate), so
 * a stream leaves in one batch per turn, and earlier when FLUSH_BYTES have been queued, so the
 * receiver works in parallel with a producer that never yields.
 *
 * A microtask alone batched a synchronous loop of sendmsg() calls, but not a loop of awaited
 * send()s: each await let the pump run between two messages, one TCP write per message
 * (docs/performance.md, session 27, has the figures before and after).
 */
export class PumpTurn {
  private microQueued = false;
  private turnQueued = false;
  /** A pump is due at the end of the turn. */
  private turnPump = false;
  /** The pump ran at once this turn already: the rest of the turn is batched. */
  private eagerUsed = false;
  private pending = 0;
  /** `moved()` when the turn began, and messages moved in the last turn that moved any. */
  private turnStart = 0;
  private lastTurn = 0;

  constructor(
    private readonly pump: () => void,
    /** Messages the path has moved to its transport so far. */
    private readonly moved: () => number,
  ) {}

  private readonly micro = (): void => {
    this.microQueued = false;
    this.pending = 0;
    this.pump();
  };

  private readonly turn = (): void => {
    this.turnQueued = false;
    if (this.turnPump) {
      this.turnPump = false;
      this.pending = 0;
      this.pump();
    }
    this.eagerUsed = false;
    const n = this.moved() - this.turnStart;
    if (n > 0) this.lastTurn = n;
  };

  /** Something for the pump to do: `bytes` more queued (0 for room, an ack, a state change). */
  schedule(bytes: number): void {
    if (!this.turnQueued) {
      this.turnQueued = true;
      this.turnStart = this.moved();
      setImmediate(this.turn);
    }
    this.pending += bytes;
    // A microtask already due moves everything queued before it runs.
    if (this.microQueued) return;
    if ((!this.eagerUsed && this.lastTurn <= EAGER_MAX) || this.pending >= FLUSH_BYTES) {
      this.eagerUsed = true;
      this.microQueued = true;
      defer(this.micro);
    } else this.turnPump = true;
  }
}
