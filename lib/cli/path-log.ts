import type { RdsStack } from '../index.js';

/** Paths whose failing connects are remembered (so each is logged once); the oldest is forgotten past it. */
const MAX_TRACKED = 4096;

interface Tracked {
  up: boolean;
  failures: number;
}

/**
 * rds-socketd's log of paths: one line when a path comes up, one when it goes down (with why),
 * one when connecting to it starts failing, one when its messages fail over to another path, and
 * one per peer reachability change. A path that
 * keeps failing to connect (a peer that is gone while we still have messages for it) is not
 * logged again until it is up: every attempt used to be two lines (DOWN -> CONNECTING -> DOWN),
 * some 270 lines a minute for one peer.
 */
export function logPaths(stack: RdsStack, log: (line: string) => void): void {
  const paths = new Map<string, Tracked>();
  const name = (ev: { localAddress: string; peerAddress: string; path: number; transport: string }): string =>
    `path ${ev.localAddress} -> ${ev.peerAddress} #${ev.path} (${ev.transport})`;
  const get = (key: string): Tracked => {
    let t = paths.get(key);
    if (t === undefined) {
      if (paths.size >= MAX_TRACKED) paths.delete(paths.keys().next().value!);
      t = { up: false, failures: 0 };
      paths.set(key, t);
    }
    return t;
  };
  stack.on('drop', (ev) => {
    const key = name(ev);
    const t = paths.get(key);
    // A path that was not up (a poke, a connect that failed) is not news.
    if (t === undefined || !t.up) return;
    log(`${key}: down (${ev.reason})`);
    paths.delete(key);
  });
  stack.on('state', (ev) => {
    const key = name(ev);
    if (ev.to === 'UP') {
      const t = get(key);
      if (t.up) return;
      log(`${key}: up${t.failures > 0 ? ` after ${t.failures} failed connect attempts` : ''}`);
      t.up = true;
      t.failures = 0;
    } else if (ev.from === 'CONNECTING' && ev.to === 'DOWN') {
      // A failed connect or poke (a delivered poke goes through ERROR: not a failure).
      const t = get(key);
      if (t.failures++ === 0) log(`${key}: connect failed; further attempts are logged once it is up`);
    }
  });
  // Where a dead path's messages went: what an operator needs to follow a socket's messages
  // across paths (and the nemesis, to explain a reorder).
  stack.on('failover', (ev) =>
    log(`${name(ev)}: failed over to #${ev.to}, ${ev.moved} message${ev.moved === 1 ? '' : 's'} moved`),
  );
  stack.on('peer-down', (ev) => log(`peer ${ev.address}: down (no path up for ${ev.unreachableMs} ms)`));
  stack.on('peer-up', (ev) => log(`peer ${ev.address}: up again after ${ev.unreachableMs} ms`));
}
