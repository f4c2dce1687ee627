import { describe, expect, it } from 'vitest';

// The admission attacks of bench/attacks (issue 18), each run briefly against a victim node in a
// child process (built library: npm test builds first). They assert bounds, not speed targets.
// Addresses 127.106-109.x.y, ports 27101-27104 (see each attack).

interface AttackResult {
  peakRssMiB: number;
  goodP99Ms: number | null;
  goodIdleP99Ms: number | null;
  victimUp: boolean;
  detail: Record<string, unknown> & { victim?: Record<string, number>; good?: { timeouts: number } };
}

async function attack(name: string, seconds = 1): Promise<AttackResult> {
  const mod = (await import(`../bench/attacks/${name}.mjs`)) as {
    name: string;
    run(o: { seconds: number }): Promise<AttackResult>;
  };
  expect(mod.name).toBe(name);
  const r = await mod.run({ seconds });
  console.log(
    `${name}: good idle p99 ${r.goodIdleP99Ms ?? r.detail.idleP99Ms} ms, under attack p99 ${r.goodP99Ms} ms, ${r.detail.good?.roundTrips} round trips` +
      (r.detail.steadyP99Ms !== undefined ? ` (between restarts ${r.detail.steadyP99Ms} ms)` : ''),
  );
  return r;
}

/**
 * The good peer's p99 under attack is held to its own idle p99, measured in the same run just before
 * the attack (bench/attacks/admission-lib.mjs measureIdle): at most K times it, or it plus SLACK_MS,
 * whichever is larger. The attacker's sockets live in this process, beside the good peer (only the
 * victim is a child), so every connect/close callback of the flood shares the good peer's event loop:
 * on a loaded 2-core machine that alone put a p99 at 280 ms against an idle p99 of 8 ms (a bound of
 * idle + 200 ms failed 1 run in 3). SLACK_MS is therefore 500 ms: above that noise, while the
 * starvation these attacks caused before issue 18 (the good peer behind the attacker for seconds,
 * up to the 5 s receive timeout) is far beyond it, as is a 700 ms stall in the victim's echo path
 * (injected every 5th echo: all four cases fail). K is 4, not 6: with only 40 idle samples the idle
 * p99 is their maximum, and one slow idle round trip (118 ms seen) must not stretch the bound to
 * seconds; K only matters once the idle p99 itself passes 167 ms (a machine so loaded that it must).
 */
const K = 4;
const SLACK_MS = 500;

function expectP99Within(p99: number | null, idleP99: number | null, what: string): void {
  expect(idleP99, `${what}: idle p99`).not.toBeNull();
  expect(p99, `${what}: p99 under attack`).not.toBeNull();
  const bound = Math.max(K * idleP99!, idleP99! + SLACK_MS);
  expect(p99!, `${what}: p99 ${p99} ms under attack, idle p99 ${idleP99} ms, bound ${bound} ms`).toBeLessThanOrEqual(
    bound,
  );
}

describe('admission attacks (bench/attacks)', () => {
  it('tls-refusal-crash: refusing CA-signed peers never kills the victim', async () => {
    const r = await attack('tls-refusal-crash');
    expect(r.victimUp, JSON.stringify(r.detail)).toBe(true);
    expect(r.detail.victim!.conn_refused_allowlist).toBeGreaterThan(0);
    expect(r.detail.good!.timeouts).toBe(0);
    expectP99Within(r.goodP99Ms, r.goodIdleP99Ms, 'tls-refusal-crash');
  }, 30_000);

  it('tls-idle-flood: idle connections never start a handshake and are all closed by the victim', async () => {
    const r = await attack('tls-idle-flood');
    expect(r.victimUp).toBe(true);
    expect(r.detail.victim!.conn_refused_limit).toBeGreaterThan(0);
    // The attacker never holds more than 300: closing more than that means the victim ends them.
    expect(r.detail.closedByVictim as number).toBeGreaterThan(300);
    expect(r.detail.good!.timeouts).toBe(0);
    expectP99Within(r.goodP99Ms, r.goodIdleP99Ms, 'tls-idle-flood');
  }, 30_000);

  it('slot-flood-known-peer: a restarting known peer gets back in well under headerTimeoutMs', async () => {
    const r = await attack('slot-flood-known-peer');
    expect(r.victimUp).toBe(true);
    expect(r.detail.restarts as number).toBeGreaterThan(0);
    expect(r.detail.reconnectMaxMs as number).toBeLessThan(2000); // headerTimeoutMs is 10 s
    expect(r.detail.good!.timeouts).toBe(0);
    // Between restarts (each reconnect is bounded above, not by the idle p99).
    expectP99Within(r.detail.steadyP99Ms as number, r.detail.idleP99Ms as number, 'slot-flood-known-peer');
  }, 30_000);

  it('stranger-churn: strangers leave no state after the idle time and are not dialled again', async () => {
    const r = await attack('stranger-churn');
    expect(r.victimUp).toBe(true);
    expect(r.detail.strangers as number).toBeGreaterThan(0);
    expect(r.detail.connsAfterIdle as number).toBeLessThanOrEqual(1); // the good peer's
    expect(r.detail.dialsPerSecAfterIdle).toBe(0);
    expect(r.detail.good!.timeouts).toBe(0);
    expectP99Within(r.goodP99Ms, r.goodIdleP99Ms, 'stranger-churn');
  }, 30_000);
});
