import { describe, expect, it } from 'vitest';

// The admission attacks of bench/attacks (issue 18), each run briefly against a victim node in a
// child process (built library: npm test builds first). They assert bounds, not speed targets.
// Addresses 127.106-109.x.y, ports 27101-27104 (see each attack).

interface AttackResult {
  peakRssMiB: number;
  goodP99Ms: number | null;
  victimUp: boolean;
  detail: Record<string, unknown> & { victim?: Record<string, number>; good?: { timeouts: number } };
}

async function attack(name: string, seconds = 1): Promise<AttackResult> {
  const mod = (await import(`../bench/attacks/${name}.mjs`)) as {
    name: string;
    run(o: { seconds: number }): Promise<AttackResult>;
  };
  expect(mod.name).toBe(name);
  return mod.run({ seconds });
}

describe('admission attacks (bench/attacks)', () => {
  it('tls-refusal-crash: refusing CA-signed peers never kills the victim', async () => {
    const r = await attack('tls-refusal-crash');
    expect(r.victimUp, JSON.stringify(r.detail)).toBe(true);
    expect(r.detail.victim!.conn_refused_allowlist).toBeGreaterThan(0);
    expect(r.detail.good!.timeouts).toBe(0);
  }, 30_000);

  it('tls-idle-flood: idle connections never start a handshake and are all closed by the victim', async () => {
    const r = await attack('tls-idle-flood');
    expect(r.victimUp).toBe(true);
    expect(r.detail.victim!.conn_refused_limit).toBeGreaterThan(0);
    // The attacker never holds more than 300: closing more than that means the victim ends them.
    expect(r.detail.closedByVictim as number).toBeGreaterThan(300);
    expect(r.detail.good!.timeouts).toBe(0);
  }, 30_000);

  it('slot-flood-known-peer: a restarting known peer gets back in well under headerTimeoutMs', async () => {
    const r = await attack('slot-flood-known-peer');
    expect(r.victimUp).toBe(true);
    expect(r.detail.restarts as number).toBeGreaterThan(0);
    expect(r.detail.reconnectMaxMs as number).toBeLessThan(2000); // headerTimeoutMs is 10 s
    expect(r.detail.good!.timeouts).toBe(0);
  }, 30_000);

  it('stranger-churn: strangers leave no state after the idle time and are not dialled again', async () => {
    const r = await attack('stranger-churn');
    expect(r.victimUp).toBe(true);
    expect(r.detail.strangers as number).toBeGreaterThan(0);
    expect(r.detail.connsAfterIdle as number).toBeLessThanOrEqual(1); // the good peer's
    expect(r.detail.dialsPerSecAfterIdle).toBe(0);
  }, 30_000);
});
