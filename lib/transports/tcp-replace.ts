import type { Socket } from 'node:net';
import type { TransportPath } from '../core/transport-path.js';
import { RDS_CTR } from '../core/stats.js';
import { tcpPath, type TcpPath, type TcpShared } from './tcp-carrier.js';
import { afterReadEnds } from './tcp-drain.js';

/** A path's carrier being drained (`old`) and the connections waiting, in order of arrival, to take over. */
interface Handover {
  readonly old: Socket;
  readonly queue: (() => void)[];
  done: boolean;
}

const handovers = new WeakMap<TcpPath, Handover>();

/**
 * A newer connection from the peer replaces the path's carrier (the newest carrier wins). The old
 * one may still hold bytes our TCP acknowledged and the node has not read (it reads a bounded
 * amount per turn, nothing while the receive limits hold the path): a kernel sender has released
 * those messages (spec §2.4) and, when it connects again after resetting the old connection, never
 * sends them again (issue #40, seen on 6.12). Closing the old descriptor at once lost them.
 *
 * So the old carrier stays the path's carrier, read as before (its frames under the same receive
 * limits and partial-frame budget), until its read side ends (EOF after the peer's reset or
 * FIN, or a read error after what came before it) or it has had DRAIN_AFTER_RESET_MS of reading
 * the receive limits did not hold, and at most headerTimeoutMs in all (an old connection that
 * still looks alive, its reset lost). Only then is it destroyed and `take` run, which makes the
 * new connection (accepted paused: nothing of it read yet) the carrier: the old carrier's frames
 * all come before any of the new one's, and the peer's sequence numbers continue across them.
 * If `take` cannot take the connection (gone meanwhile, the transport closing), the old carrier
 * stays in the slot and its close reaches the path as any other. An old carrier that leaves the
 * path unclosed meanwhile (carrierMovedAway) is not destroyed: the waiting ones go at once.
 *
 * A connection that comes while another waits queues behind it and replaces it in turn. Each
 * waiting connection holds the admission slot it was accepted with (the connection limits bound
 * how many can wait), and the old carrier nothing beyond what it held as the carrier.
 */
export function replaceCarrier(ctx: TcpShared, cp: TransportPath, take: () => void): void {
  const tp = tcpPath(cp);
  const waiting = handovers.get(tp);
  const old = tp.sock;
  // Counted per connection that has to wait (behind the carrier, or behind others waiting).
  if (waiting !== undefined || old !== null) ctx.host.counters.add(RDS_CTR.tcp_connect_raced);
  if (waiting !== undefined) {
    waiting.queue.push(take);
    return;
  }
  if (old === null) {
    take();
    return;
  }
  const h: Handover = { old, queue: [take], done: false };
  handovers.set(tp, h);
  const hold = { heldMs: (now: number) => tp.heldMs(now), capMs: ctx.host.options.headerTimeoutMs };
  afterReadEnds(old, () => turnOver(ctx, cp, h, true), hold);
}

/**
 * The waiting connections' turn, in order, until one becomes the path's carrier: by its turn the
 * pairing may name another path for it (handOver moves it there) or it may be gone, and then the
 * next one goes, and the old carrier stays (it is destroyed only when replaced). The rest queue
 * behind the new carrier.
 */
function turnOver(ctx: TcpShared, cp: TransportPath, h: Handover, destroyOld: boolean): void {
  if (h.done) return;
  h.done = true;
  const tp = tcpPath(cp);
  handovers.delete(tp);
  const before = tp.sock;
  // The new carrier replaces the old one in the slot first, so the old one's close (now, or
  // from the destroy below) is that of a replaced carrier, not the path's loss.
  while (h.queue.length > 0 && tp.sock === before) h.queue.shift()!();
  if (destroyOld && tp.sock !== before) h.old.destroy();
  for (const next of h.queue) replaceCarrier(ctx, cp, next);
}

/**
 * The carrier of `cp` left it unclosed (TcpListener.carrierToLane: it was another lane's):
 * connections waiting to replace it take their turn now, and it is not destroyed.
 */
export function carrierMovedAway(ctx: TcpShared, cp: TransportPath): void {
  const h = handovers.get(tcpPath(cp));
  if (h !== undefined) turnOver(ctx, cp, h, false);
}

/** Whether a connection waits to take over `tp` (replaceCarrier). */
export function carrierWaiting(tp: TcpPath): boolean {
  return handovers.has(tp);
}

/** The socket `take` will attach is still usable (not closed meanwhile, the transport open). */
export function stillUsable(ctx: TcpShared, sock: Socket): boolean {
  return !ctx.closed && !sock.destroyed;
}
