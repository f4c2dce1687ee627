import { RDS_MAX_ADV_CREDIT } from '../constants.js';

/** Posted-but-unadvertised receive buffers at which a credit update is requested (spec §7.3). */
export const CREDIT_UPDATE_THRESHOLD = 16;

/**
 * RDS credit flow control, the scheme of the IB transport (spec §7.3), independent of any
 * transport. Send side: one credit per fragment; the last credit is kept back for a credit update
 * unless this send itself carries one; a sender that ran dry is resumed when credits arrive.
 * Receive side: every posted receive buffer is a credit owed to the peer, advertised in h_credit
 * (at most 255 per header); once 16 are owed an update is requested even with no data to carry it.
 */
export class CreditLedger {
  /** Credits we may spend (buffers the peer has posted for us). */
  sendCredits = 0;
  /** Receive buffers we posted and have not yet told the peer about. */
  postedUnadvertised = 0;
  /** A send failed for want of credits; grant() resumes it. */
  stalled = false;
  stalls = 0;

  constructor(
    private readonly onResume: () => void = () => {},
    private readonly onUpdateWanted: () => void = () => {},
  ) {}

  /** Credits arrived (h_credit of any header, or dp_credit at connect). */
  grant(n: number): void {
    if (n <= 0) return;
    this.sendCredits += n;
    if (this.stalled) {
      this.stalled = false;
      this.onResume();
    }
  }

  /**
   * Takes `fragments` credits for one message, or none (and marks the sender stalled). The last
   * credit stays in reserve for a credit update unless this message advertises credits itself.
   */
  tryConsume(fragments: number): boolean {
    const carriesUpdate = this.postedUnadvertised > 0;
    const usable = carriesUpdate ? this.sendCredits : this.sendCredits - 1;
    if (fragments > usable) {
      if (!this.stalled) this.stalls++;
      this.stalled = true;
      return false;
    }
    this.sendCredits -= fragments;
    return true;
  }

  /** A credit update (an ack-only frame) may use the reserved last credit. */
  tryConsumeForUpdate(): boolean {
    if (this.sendCredits < 1) return false;
    this.sendCredits -= 1;
    return true;
  }

  /** We posted `n` receive buffers. */
  posted(n: number): void {
    const before = this.postedUnadvertised;
    this.postedUnadvertised += n;
    if (before < CREDIT_UPDATE_THRESHOLD && this.postedUnadvertised >= CREDIT_UPDATE_THRESHOLD) this.onUpdateWanted();
  }

  /** The h_credit value for the header being sent now (at most 255); those credits count as told. */
  advertise(): number {
    const n = Math.min(RDS_MAX_ADV_CREDIT, this.postedUnadvertised);
    this.postedUnadvertised -= n;
    return n;
  }

  /** Down to the reserved credit: the fragment just sent should ask the peer for an ack (ACK_REQUIRED). */
  get low(): boolean {
    return this.sendCredits <= 1;
  }

  get updateWanted(): boolean {
    return this.postedUnadvertised >= CREDIT_UPDATE_THRESHOLD;
  }
}
