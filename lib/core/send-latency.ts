/**
 * One path's send-to-acknowledge times (rds-info's and the metrics' histogram, the min-latency
 * path choice), in power-of-two buckets: [<1 ms, <2 ms, <4 ms, ... , >= 2^15 ms].
 */
export class SendLatency {
  readonly histogram: number[] = new Array<number>(17).fill(0);
  private sum = 0;

  /** Sum of the times counted in histogram, ms. */
  get sumMs(): number {
    return this.sum;
  }

  record(ms: number): void {
    this.sum += ms;
    // Bucket b holds [2^(b-1), 2^b) ms: one past the position of the highest bit of floor(ms).
    const b = ms < 1 ? 0 : Math.min(16, 32 - Math.clz32(Math.floor(ms)));
    this.histogram[b]!++;
  }
}
