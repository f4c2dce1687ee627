import type { RdsConnection } from './connection.js';
import { RdsConnPath } from './path.js';
import { pathFigures } from './ext/path-stats.js';
import { pathEndpoints, RAIL_FIRST_INDEX } from './ext/rail.js';
import type { PeerInfo, PeerTable } from './ext/peer-state.js';
import type { RdsCounterName, RdsStats } from './stats.js';
import type { BoundSocket, ConnectionInfo, MessageInfo, SocketInfo } from './types.js';

// What rds-info and the stack's listing calls show (the kernel's info.c and stats.c): plain data
// read from the connections, sockets, counters and peer table, never changing them.

/** Everything rds-info can show (the control endpoint serves it). */
export interface StackInfo {
  counters: Record<RdsCounterName, number>;
  sockets: SocketInfo[];
  connections: ConnectionInfo[];
  sendQueue: MessageInfo[];
  retransQueue: MessageInfo[];
  recvQueue: MessageInfo[];
}

/** rds-info's whole view: counters, sockets, connections and the three message queues. */
export function stackInfo(conns: Iterable<RdsConnection>, counters: RdsStats, sockets: BoundSocket[]): StackInfo {
  const all = [...conns];
  const sendQueue: MessageInfo[] = [];
  const retransQueue: MessageInfo[] = [];
  for (const c of all) {
    for (const p of c.madePaths()) {
      const list = (
        q: Iterable<{ done: boolean; sport: number; dport: number; seq: number; len: number }>,
        out: MessageInfo[],
      ): void => {
        for (const m of q) {
          if (!m.done)
            out.push({
              localAddress: c.laddr,
              localPort: m.sport,
              peerAddress: c.faddr,
              peerPort: m.dport,
              seq: m.seq,
              bytes: m.len,
            });
        }
      };
      list(p.tx.sendQueue, sendQueue);
      list(p.tx.retrans, retransQueue);
    }
  }
  return {
    counters: counters.snapshot(),
    sockets: sockets.map((s) => s.info()),
    connections: connectionsInfo(all),
    sendQueue,
    retransQueue,
    recvQueue: sockets.flatMap((s) => s.receiveQueue()),
  };
}

/** Every connection and its paths in use: state, sequence numbers, queues, figures. */
export function connectionsInfo(conns: Iterable<RdsConnection>): ConnectionInfo[] {
  return [...conns].map((c) => ({
    localAddress: c.laddr,
    peerAddress: c.faddr,
    transport: c.transport.name,
    tos: c.tos,
    npaths: c.npaths,
    initiator: c.isInitiator,
    // The lanes in use, then the rail slots (index 8 and up). A path not made yet is shown as the
    // fresh one it would be (DOWN, zeros), made here and dropped: looking must not cost memory.
    // Its nextTxSeq is 0: the first number is drawn from the clock when the path is made.
    paths: slotIndexes(c)
      .map((i) => {
        const made = c.pathIf(i);
        return { p: made ?? new RdsConnPath(c, i), made: made !== undefined };
      })
      .map(({ p, made }) => {
        const q = p.tx.pendingCount();
        const f = pathFigures(p);
        const ends = pathEndpoints(p);
        return {
          index: p.index,
          state: p.stateName,
          rail: ends.rail,
          source: ends.source,
          destination: ends.destination,
          nextTxSeq: made ? p.tx.nextTxSeq : 0,
          nextRxSeq: p.rxSeq.next,
          sendQueue: q.send,
          retransQueue: q.retrans,
          inFlightMessages: q.send + q.retrans,
          sentMessages: f.sentMessages,
          sentBytes: f.sentBytes,
          recvMessages: f.recvMessages,
          recvBytes: f.recvBytes,
          upCount: f.upCount,
          connectFailures: f.connectFailures,
          failedAttempts: p.control.failedAttempts,
          held: p.control.held,
          acksSent: f.acksSent,
          heartbeatsSent: f.heartbeatsSent,
          movedByFailover: f.movedByFailover,
          failedOverTo: p.conn.failover.failedOverTo(p)?.index ?? null,
          latencyHistogram: f.latencyHistogram,
          latencySumMs: f.latencySumMs,
          transport: c.transport.pathInfo?.(p) ?? null,
        };
      }),
  }));
}

/** The indexes connectionsInfo lists: the lanes in use, then every rail slot. */
function slotIndexes(c: RdsConnection): number[] {
  const out: number[] = [];
  for (let i = 0; i < Math.min(Math.max(1, c.npaths), c.pathSlots); i++) out.push(i);
  for (let i = RAIL_FIRST_INDEX; i < c.pathSlots; i++) out.push(i);
  return out;
}

/** Every peer of the table with its reachability and the application messages queued for it. */
export function peersInfo(conns: Iterable<RdsConnection>, table: PeerTable): PeerInfo[] {
  const queued = new Map<string, { messages: number; bytes: number }>();
  for (const c of conns) {
    let q = queued.get(c.faddr);
    if (q === undefined) {
      q = { messages: 0, bytes: 0 };
      queued.set(c.faddr, q);
    }
    for (const p of c.madePaths()) {
      for (const list of [p.tx.sendQueue, p.tx.retrans]) {
        for (const m of list) {
          // Withdrawn records (ext/withdrawn.ts) hold a place and carry no message.
          if (m.done || !m.fromSocket || m.owner!.placeHolder === true) continue;
          q.messages++;
          q.bytes += m.len;
        }
      }
    }
  }
  const now = Date.now();
  return table
    .list()
    .map((p) => ({
      address: p.address,
      state: p.state,
      since: p.since,
      unreachableMs: p.unreachableMs(now),
      pathsUp: p.pathsUp,
      queuedMessages: queued.get(p.address)?.messages ?? 0,
      queuedBytes: queued.get(p.address)?.bytes ?? 0,
    }))
    .sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0));
}
