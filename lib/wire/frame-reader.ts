import { RDS_HEADER_SIZE, RDS_MAX_MSG_SIZE } from '../constants.js';
import { OFF_LEN } from './header.js';

/** A protocol violation seen in a byte stream; the transport drops that connection. */
export class RdsProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RdsProtocolError';
  }
}

export type FrameHandler = (header: Buffer, payload: Buffer) => void;

/**
 * Reassembles `[48-byte header][h_len bytes]` records from a TCP byte stream (spec §2.3).
 * A frame that lies whole inside one read chunk is handed up as views of that chunk, without a
 * copy (like the kernel, which keeps the socket buffers a message arrived in); only a frame split
 * across reads is assembled in memory of its own. h_len is bounded before any payload memory is
 * allocated, so a lying header costs nothing.
 */
export class FrameReader {
  private readonly header = Buffer.allocUnsafe(RDS_HEADER_SIZE);
  private headerFill = 0;
  private payload: Buffer | null = null;
  private payloadFill = 0;
  private failed = false;

  constructor(private readonly onFrame: FrameHandler, private readonly maxLen = RDS_MAX_MSG_SIZE) {}

  /** Bytes still missing from the frame in progress: [header bytes, payload bytes] (rds-info -T). */
  get remaining(): [number, number] {
    if (this.payload === null) return [RDS_HEADER_SIZE - this.headerFill, 0];
    return [0, this.payload.length - this.payloadFill];
  }

  /** True between frames: nothing partial is buffered. */
  get idle(): boolean {
    return this.headerFill === 0 && this.payload === null;
  }

  /** Feeds bytes; throws RdsProtocolError on a violation (and refuses further input). */
  push(chunk: Buffer): void {
    if (this.failed) throw new RdsProtocolError('stream already failed');
    let off = 0;
    while (off < chunk.length) {
      if (this.headerFill === 0 && this.payload === null && chunk.length - off >= RDS_HEADER_SIZE) {
        const len = chunk.readUInt32BE(off + OFF_LEN);
        if (len <= this.maxLen && chunk.length - off - RDS_HEADER_SIZE >= len) {
          const start = off + RDS_HEADER_SIZE;
          off = start + len;
          this.onFrame(chunk.subarray(start - RDS_HEADER_SIZE, start), chunk.subarray(start, off));
          continue;
        }
      }
      if (this.payload === null) {
        const n = Math.min(RDS_HEADER_SIZE - this.headerFill, chunk.length - off);
        chunk.copy(this.header, this.headerFill, off, off + n);
        this.headerFill += n;
        off += n;
        if (this.headerFill < RDS_HEADER_SIZE) return;
        const len = this.header.readUInt32BE(OFF_LEN);
        if (len > this.maxLen) {
          this.failed = true;
          throw new RdsProtocolError(`h_len ${len} exceeds the ${this.maxLen}-byte maximum`);
        }
        if (len === 0) {
          this.emit(Buffer.alloc(0));
          continue;
        }
        this.payload = Buffer.allocUnsafe(len);
        this.payloadFill = 0;
      }
      const need = this.payload.length - this.payloadFill;
      const n = Math.min(need, chunk.length - off);
      chunk.copy(this.payload, this.payloadFill, off, off + n);
      this.payloadFill += n;
      off += n;
      if (this.payloadFill === this.payload.length) {
        const p = this.payload;
        this.payload = null;
        this.emit(p);
      }
    }
  }

  private emit(payload: Buffer): void {
    const header = Buffer.from(this.header);
    this.headerFill = 0;
    this.onFrame(header, payload);
  }
}
