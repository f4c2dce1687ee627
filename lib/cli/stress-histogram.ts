// rds-stress --histogram: round-trip percentiles and a power-of-two histogram, beyond rds-tools' columns.

/** The round trips beyond rds-tools' columns (--histogram). */
export class RttHistogram {
  private readonly samples: number[] = [];
  private readonly buckets = new Array<number>(32).fill(0);
  add(us: number): void {
    if (this.samples.length < 1_000_000) this.samples.push(us);
    let b = 0;
    while (b < 31 && us >= 2 ** b) b++;
    this.buckets[b]!++;
  }
  print(): void {
    if (this.samples.length === 0) return;
    const sorted = Float64Array.from(this.samples).sort();
    const pct = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
    console.log(`rtt p50 ${pct(0.5).toFixed(1)} us, p99 ${pct(0.99).toFixed(1)} us (${sorted.length} round trips)`);
    console.log('rtt histogram (us):');
    this.buckets.forEach((n, b) => {
      if (n > 0) console.log(`  ${b === 0 ? '< 1' : `${2 ** (b - 1)}-${2 ** b}`}`.padEnd(22) + String(n));
    });
  }
}
