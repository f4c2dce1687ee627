// send({ confirm }) on a socket of this process's stack: the wait for the peer to have one
// message (its confirmation, send-confirm.ts), given up on abort as RDS_CANCEL_SENT_TO would.
import { abortError, RdsError } from '../../errors.js';
import type { RdsOutgoing } from '../message.js';
import type { Confirmation } from '../socket-backend.js';
import { RDS_CTR, type RdsStats } from '../stats.js';

/**
 * The confirmation of `msg`, queued by a socket that keeps its waiting messages in `confirming`
 * (close() and RDS_CANCEL_SENT_TO end those waits).
 * @internal
 */
export function confirmationOf(msg: RdsOutgoing, confirming: Set<RdsOutgoing>, counters: RdsStats): Confirmation {
  return {
    len: msg.len,
    wait: (signal) => {
      if (msg.done && !msg.cancelled) return Promise.resolve();
      if (msg.done)
        return Promise.reject(new RdsError('ECANCELED', 'the message was cancelled before the peer had it'));
      return new Promise<void>((resolve, reject) => {
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
        msg.onConfirm((err) => {
          signal?.removeEventListener('abort', onAbort);
          confirming.delete(msg);
          if (err) reject(err);
          else resolve();
        });
        confirming.add(msg);
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    },
  };
}
