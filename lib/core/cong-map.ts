import { RDS_CONG_MAP_BYTES } from '../constants.js';

/**
 * One bit per RDS port (spec §5.1): port p is bit (p & 7) of byte (p >> 3), counted from the
 * least-significant bit, 1 = congested. One map per address: the local one we advertise, and a
 * copy of each peer's that senders consult.
 */
export class CongMap {
  /** Allocated on first use: a peer that never sends a map (or a stranger) costs no 8 KiB. */
  private map: Buffer | null = null;

  get bits(): Buffer {
    return (this.map ??= Buffer.alloc(RDS_CONG_MAP_BYTES));
  }

  /** Bumped on every change, so pollers can tell "an update arrived since I last looked". */
  generation = 0;

  test(port: number): boolean {
    return this.map !== null && (this.map[port >> 3]! & (1 << (port & 7))) !== 0;
  }

  set(port: number): boolean {
    const b = this.bits[port >> 3]!;
    const m = 1 << (port & 7);
    if (b & m) return false;
    this.bits[port >> 3] = b | m;
    this.generation++;
    return true;
  }

  clear(port: number): boolean {
    if (this.map === null) return false;
    const b = this.map[port >> 3]!;
    const m = 1 << (port & 7);
    if (!(b & m)) return false;
    this.bits[port >> 3] = b & ~m;
    this.generation++;
    return true;
  }

  /**
   * Replaces the map with a received one. Returns the ports that went from congested to clear,
   * folded into the 64-bit monitor mask (bit p % 64), as the IB receiver computes it.
   */
  apply(map: Uint8Array): bigint {
    if (this.map === null && allZero(map)) {
      // Nothing congested before or after: stay unallocated (every new carrier sends one of these).
      this.generation++;
      return 0n;
    }
    const bits = this.bits;
    let lo = 0;
    let hi = 0;
    for (let i = 0; i < RDS_CONG_MAP_BYTES; i++) {
      const cleared = bits[i]! & ~map[i]!;
      if (cleared === 0) continue;
      // Byte i covers ports 8i..8i+7, i.e. monitor bits (8i % 64)..+7.
      const shift = (i * 8) & 63;
      if (shift < 32) lo |= cleared << shift;
      else hi |= cleared << (shift - 32);
    }
    bits.set(map.subarray(0, RDS_CONG_MAP_BYTES));
    this.generation++;
    return (BigInt(hi >>> 0) << 32n) | BigInt(lo >>> 0);
  }

  isClear(): boolean {
    if (this.map === null) return true;
    for (let i = 0; i < RDS_CONG_MAP_BYTES; i += 4) if (this.map.readUInt32LE(i) !== 0) return false;
    return true;
  }
}

function allZero(map: Uint8Array): boolean {
  for (let i = 0; i < RDS_CONG_MAP_BYTES; i++) if (map[i] !== 0) return false;
  return true;
}
