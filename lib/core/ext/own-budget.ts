import type { RdsOutgoing, SendOwner } from '../message.js';

/**
 * The sender of the messages a path queues on the node's own account (pongs, probe answers, the
 * probe after each connect). No socket's SO_SNDBUF pays for them, so without this count a peer
 * that pings and never acknowledges (or stops reading) makes the queue grow for as long as it
 * pings. The path refuses to queue another once `queued` reaches the stack's maxOwnQueued.
 * The other frames a node sends unasked are bounded where they are made: one congestion map
 * pending per path, one ack-only or heartbeat frame in flight, one hello per carrier.
 */
export class OwnAccount implements SendOwner {
  /** Marks these messages as the path's own: they never move to another path on failover. */
  readonly ownAccount = true;
  private count = 0;

  /** Queued or sent and not yet acknowledged (or cancelled). */
  get queued(): number {
    return this.count;
  }

  /** One more message on this account, if fewer than `max` are out; false (nothing taken) if not. */
  take(max: number): boolean {
    if (this.count >= max) return false;
    this.count++;
    return true;
  }

  messageDone(_msg: RdsOutgoing): void {
    this.count--;
  }
}
