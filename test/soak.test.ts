import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runNode } from './helpers.js';

// The short soak: 3 node processes, fault proxies resetting connections, one node SIGKILLed with
// an unread backlog older than ackDelayMaxMs and restarted, another closing its receiving socket
// with an unread backlog and binding a new one. It exits 0 only if no confirmed message went
// undelivered, none vanished without its sender being told, nothing was delivered twice to one
// application instance, and order per socket pair held (bench/soak.mjs checks the logs).
const SOAK = fileURLToPath(new URL('../bench/soak.mjs', import.meta.url));

describe('soak (short)', () => {
  it('3 processes, >= 12 resets, a SIGKILL and restart with an unread backlog, a socket closed and bound again: confirmed-but-never-delivered 0, lost 0, duplicated 0, order intact', async () => {
    const r = await runNode([SOAK, '--short', '--tcp-port', '26421'], 120_000);
    // The failure names why first (its last line, or the error a node died with), then the table.
    const tail = r.out.trim().split('\n').slice(-12).reverse().join('\n');
    expect(r.out, tail).toContain('soak passed');
    expect(r.code).toBe(0);
    const rows = r.out.split('\n').filter((l) => l.includes('->') && /\d/.test(l));
    expect(rows).toHaveLength(8);
    expect(r.out).toMatch(/killed with [1-9]\d* messages unread past ackDelayMaxMs/);
    expect(r.out).toMatch(/closed its receiving socket with [1-9]\d* unread/);
    for (const row of rows) {
      const cols = row.trim().split(/\s+/);
      expect(cols.at(-4)).toBe('0'); // confirmed but never delivered
      expect(cols.at(-3)).toBe('0'); // lost
      expect(cols.at(-2)).toBe('0'); // duplicated
      expect(cols.at(-1)).toBe('ok');
    }
  }, 130_000);
});
