import type { ConnState } from '../path.js';

/**
 * Whether a peer is reachable, aggregated over every path to it (all its connections: local
 * addresses, transports, multipath lanes):
 * - 'up': at least one path is UP;
 * - 'unreachable': no path is UP, for less than the stack's peerDownMs so far;
 * - 'down': no path has been UP for peerDownMs or longer ('peer-down' was emitted).
 */
export type PeerStateName = 'up' | 'unreachable' | 'down';

/** What 'peer-down' and 'peer-up' carry. */
export interface PeerEvent {
  /** The peer's address. */
  address: string;
  /** 'peer-down': how long no path to it has been UP; 'peer-up': how long it was unreachable. */
  unreachableMs: number;
  /** When it became unreachable (ms since the epoch): the last path left UP, or the first attempt. */
  unreachableSince: number;
}

/** One entry of RdsStack.peers(). */
export interface PeerInfo {
  address: string;
  state: PeerStateName;
  /** When the peer entered this state, ms since the epoch ('down' counts from 'unreachable'). */
  since: number;
  /** How long no path has been UP (0 while up). */
  unreachableMs: number;
  /** Paths to the peer that are UP now. */
  pathsUp: number;
  /** Data messages queued or sent and not yet acknowledged to the peer, by every socket. */
  queuedMessages: number;
  queuedBytes: number;
}

/** One peer's reachability. Sockets keep a reference to read `state` cheaply when they send. */
export class PeerState {
  state: PeerStateName = 'unreachable';
  /** Start of the current state (for 'down': of the unreachable period). */
  since = Date.now();
  pathsUp = 0;
  /** The table forgot this peer: a holder must look it up again. */
  forgotten = false;
  timer: NodeJS.Timeout | null = null;

  constructor(readonly address: string) {}

  unreachableMs(now = Date.now()): number {
    return this.state === 'up' ? 0 : now - this.since;
  }
}

export interface PeerListener {
  peerDown(ev: PeerEvent): void;
  peerUp(ev: PeerEvent): void;
}

/**
 * Per-peer reachability fed by path state changes only: it holds no reference to connections or
 * paths, so a connection that goes away leaves nothing behind here but a count that went to zero
 * with its last DOWN transition. Its only timer runs while a peer is unreachable and not yet
 * declared down; close() stops it.
 */
export class PeerTable {
  private readonly peers = new Map<string, PeerState>();
  private closed = false;

  constructor(
    /** No path UP this long (ms) makes a peer down; Infinity: never declared down. */
    private readonly downMs: number,
    private readonly listener: PeerListener,
  ) {}

  /** The peer's entry, made (unreachable from now) if it has none: someone is about to use it. */
  entry(address: string): PeerState {
    let p = this.peers.get(address);
    if (p === undefined) {
      p = new PeerState(address);
      this.peers.set(address, p);
      if (!this.closed) this.armDown(p);
    }
    return p;
  }

  get(address: string): PeerState | undefined {
    return this.peers.get(address);
  }

  list(): PeerState[] {
    return [...this.peers.values()];
  }

  /** A path to `address` changed state. */
  pathChanged(address: string, from: ConnState, to: ConnState): void {
    if (this.closed) return;
    const p = this.entry(address);
    if (to === 'UP' && from !== 'UP') {
      if (p.pathsUp++ > 0) return;
      this.clearDown(p);
      const was = p.state;
      const now = Date.now();
      const ev: PeerEvent = { address, unreachableMs: now - p.since, unreachableSince: p.since };
      p.state = 'up';
      p.since = now;
      if (was === 'down') this.listener.peerUp(ev);
    } else if (from === 'UP' && to !== 'UP') {
      // Never below zero, whatever order a transport reports transitions in.
      if (p.pathsUp > 0 && --p.pathsUp > 0) return;
      if (p.state !== 'up') return;
      p.state = 'unreachable';
      p.since = Date.now();
      this.armDown(p);
    }
  }

  /**
   * Drop a peer that nothing refers to any more (no connection to it): only while it is not up,
   * so its path count cannot be left behind.
   */
  forget(address: string): void {
    const p = this.peers.get(address);
    if (p === undefined || p.state === 'up') return;
    this.clearDown(p);
    p.forgotten = true;
    this.peers.delete(address);
  }

  /** The stack is closing: no more timers or events. */
  close(): void {
    this.closed = true;
    for (const p of this.peers.values()) this.clearDown(p);
  }

  private armDown(p: PeerState): void {
    if (p.timer !== null || !Number.isFinite(this.downMs)) return;
    const delay = Math.max(0, p.since + this.downMs - Date.now());
    p.timer = setTimeout(() => {
      p.timer = null;
      if (p.state !== 'unreachable' || this.closed) return;
      p.state = 'down';
      this.listener.peerDown({ address: p.address, unreachableMs: Date.now() - p.since, unreachableSince: p.since });
    }, delay);
    // Reachability reports never keep a process alive; reconnect timers do while sockets are open.
    p.timer.unref();
  }

  private clearDown(p: PeerState): void {
    if (p.timer !== null) clearTimeout(p.timer);
    p.timer = null;
  }
}
