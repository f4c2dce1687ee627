import type { Socket } from 'node:net';
import type { TransportPath } from '../core/transport-path.js';
import { RDS_CTR } from '../core/stats.js';
import { tcpPath, type TcpPath, type TcpShared } from './tcp-carrier.js';
import { afterReadEnds } from './tcp-drain.js';

/** Connections waiting, in order of arrival, to take over a path whose carrier is being drained. */
const handovers = new WeakMap<TcpPath, (() => void)[]>();

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
 * stays in the slot and its close reaches the path as any other.
 *
 * A connection that comes while another waits queues behind it and replaces it in turn. Each
 * waiting connection holds the admission slot it was accepted with (the connection limits bound
 * how many can wait), and the old carrier nothing beyond what it held as the carrier.
 */
export function replaceCarrier(ctx: TcpShared, cp: TransportPath, take: () => void): void {
  const tp = tcpPath(cp);
  const waiting = handovers.get(tp);
  if (waiting !== undefined) {
    waiting.push(take);
    return;
  }
  const old = tp.sock;
  if (old === null) {
    take();
    return;
  }
  ctx.host.counters.add(RDS_CTR.tcp_connect_raced);
  const queue = [take];
  handovers.set(tp, queue);
  const hold = { heldMs: (now: number) => tp.heldMs(now), capMs: ctx.host.options.headerTimeoutMs };
  afterReadEnds(
    old,
    () => {
      handovers.delete(tp);
      // The new carrier replaces the old one in the slot first, so the old one's close (now, or
      // from the destroy below) is that of a replaced carrier, not the path's loss.
      queue.shift()!();
      old.destroy();
      for (const next of queue) replaceCarrier(ctx, cp, next);
    },
    hold,
  );
}

/** Whether a connection waits to take over `tp` (replaceCarrier). */
export function carrierWaiting(tp: TcpPath): boolean {
  return handovers.has(tp);
}

/** The socket `take` will attach is still usable (not closed meanwhile, the transport open). */
export function stillUsable(ctx: TcpShared, sock: Socket): boolean {
  return !ctx.closed && !sock.destroyed;
}
