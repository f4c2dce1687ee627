// send({ confirm }) on a socket of this process's stack: the wait for the peer to have one
// message (its confirmation, send-confirm.ts), given up on abort as RDS_CANCEL_SENT_TO would.
import { abortError } from '../../errors.js';
import type { RdsOutgoing } from '../message.js';
import type { Confirmation } from '../socket-backend.js';
import { RDS_CTR, type RdsStats } from '../stats.js';

/**
 * The confirmation of `msg`, queued by a socket that keeps its waiting messages in `confirming`
 * (close() and RDS_CANCEL_SENT_TO end those waits). It is registered on the message at once, not
 * when wait() is called: from the moment it is queued, the message is one whose read must be
 * reported (an acknowledgement as queued, the loopback's hand-over, must hold it for the read), and
 * an outcome that comes before wait() is kept for it, never taken for "confirmed".
 * @internal
 */
export function confirmationOf(msg: RdsOutgoing, confirming: Set<RdsOutgoing>, counters: RdsStats): Confirmation {
  let outcome: { err: Error | undefined } | null = null;
  let waiter: ((err?: Error) => void) | null = null;
  msg.onConfirm((err) => {
    confirming.delete(msg);
    if (waiter !== null) waiter(err);
    else outcome = { err };
  });
  confirming.add(msg);
  const len = msg.len;
  return {
    len,
    wait: (signal) => {
      if (outcome !== null) return outcome.err === undefined ? Promise.resolve(len) : Promise.reject(outcome.err);
      return new Promise<number>((resolve, reject) => {
        const onAbort = (): void => {
          if (msg.done) {
            // Acknowledged as queued: it is at the peer and cannot be taken back; stop waiting.
            msg.confirm(abortError(signal!, 'send()'));
            return;
          }
          // Give up on this message exactly as RDS_CANCEL_SENT_TO would: never (re)transmitted.
          counters.add(RDS_CTR.send_cancelled);
          msg.complete(abortError(signal!, 'send()'));
        };
        waiter = (err) => {
          signal?.removeEventListener('abort', onAbort);
          if (err) reject(err);
          else resolve(len);
        };
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    },
  };
}
