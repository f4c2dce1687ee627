/**
 * An accepted connection's place in the limits: it counts towards maxConnections until it
 * closes, and towards maxUnidentifiedConnections (and, for a known peer, its own allowance)
 * until its first complete frame.
 */
export interface AdmissionSlot {
  open: boolean;
  identified: boolean;
  /** The known peer whose allowance this slot uses, or null. */
  knownPeer: string | null;
}

/** Unidentified connections one known peer may hold beyond the shared pool (its lanes, reconnects). */
export const KNOWN_PEER_UNIDENTIFIED = 16;

/** The TCP transport's connection counts: live carriers, and accepted ones not yet identified. */
export class TcpAdmission {
  /** Live carriers, and accepted ones that have not yet sent a complete frame. */
  carriers = 0;
  unidentified = 0;
  /** Unidentified connections per known peer (see KNOWN_PEER_UNIDENTIFIED). */
  private readonly knownUnidentified = new Map<string, number>();

  /** Unidentified connections `peer` holds from its own allowance. */
  knownSlots(peer: string): number {
    return this.knownUnidentified.get(peer) ?? 0;
  }

  takeSlot(knownPeer: string | null): AdmissionSlot {
    this.carriers++;
    this.unidentified++;
    if (knownPeer !== null) this.knownUnidentified.set(knownPeer, (this.knownUnidentified.get(knownPeer) ?? 0) + 1);
    return { open: true, identified: false, knownPeer };
  }

  /** The connection sent its first complete frame: it no longer holds an unidentified slot. */
  identifySlot(slot: AdmissionSlot): void {
    if (slot.identified) return;
    slot.identified = true;
    this.unidentified--;
    const p = slot.knownPeer;
    if (p !== null) {
      const n = (this.knownUnidentified.get(p) ?? 1) - 1;
      if (n > 0) this.knownUnidentified.set(p, n);
      else this.knownUnidentified.delete(p);
    }
  }

  /** Idempotent: the connection is gone. */
  freeSlot(slot: AdmissionSlot): void {
    if (!slot.open) return;
    this.identifySlot(slot);
    slot.open = false;
    this.carriers--;
  }
}
