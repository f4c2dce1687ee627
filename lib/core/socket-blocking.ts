// The calls of a socket that may wait, written once for every backend: send() waiting for room,
// an uncongested destination or the peer's confirmation (the wait in the kernel's rds_sendmsg),
// flush(), and the message iterator over recv() (rds_recvmsg's wait). They wait on the socket's
// waiters (socket-waiters.ts) and re-check after every wake-up.
import { abortError, combineSignals, RdsError } from '../errors.js';
import type { Confirmation } from './socket-backend.js';
import type { RdsSocket } from './socket.js';
import type { RdsData, SendOptions, WaitOptions } from './socket-types.js';
import { untilDoneOrAborted } from './socket-waiters.js';
import type { RdsMessage } from './types.js';

/**
 * send() that may wait: for room, an uncongested destination, or the peer's confirmation.
 * `wire`: the host node's cut-through send (see RdsSocket.enqueue). @internal
 */
export async function sendWaiting(
  s: RdsSocket,
  data: RdsData,
  dest: { address: string; port: number } | null | undefined,
  opts: SendOptions,
  wire: Buffer | null = null,
): Promise<number> {
  const signal = combineSignals(opts?.signal, opts?.timeout);
  const confirm = opts?.confirm === true;
  let r: number | Confirmation;
  for (;;) {
    if (signal?.aborted) throw abortError(signal, 'send()');
    // No room: wait without going through an EAGAIN exception.
    if (!s.isClosed && s.backend.bound !== null && !s.backend.hasRoom(true)) {
      await s.waiters.wait(signal, 'send()', abortError);
      continue;
    }
    try {
      r = s.enqueue(data, dest, opts, confirm, wire);
      break;
    } catch (e) {
      if (!(e instanceof RdsError) || (e.code !== 'EAGAIN' && e.code !== 'ENOBUFS')) throw e;
      const watch = e.code === 'ENOBUFS' ? s.backend.watchCongestion : undefined;
      await s.waiters.wait(signal, 'send()', abortError, watch);
    }
  }
  if (typeof r === 'number') return r;
  return r.wait(signal);
}

/** flush(): waits until the backend says every queued message is acknowledged or cancelled. @internal */
export async function flushSocket(s: RdsSocket, opts: WaitOptions): Promise<void> {
  const signal = combineSignals(opts?.signal, opts?.timeout);
  for (;;) {
    const f = s.backend.flushed();
    if (f === true) return;
    s.checkOpen('flush()');
    if (f !== false) {
      await (signal === undefined ? f : untilDoneOrAborted(f, signal, 'flush()'));
      return;
    }
    await s.waiters.wait(signal, 'flush()', abortError);
  }
}

/** messages() and `for await`: ends when the socket closes. @internal */
export async function* socketMessages(
  s: RdsSocket,
  opts: { signal?: AbortSignal },
): AsyncGenerator<RdsMessage, void, undefined> {
  for (;;) {
    if (s.isClosed) return;
    let m: RdsMessage | null;
    try {
      // A message already queued is taken at once: no recv() promise per message of a burst.
      m = opts?.signal?.aborted === true ? null : s.recvmsg();
      if (m === null) m = await s.recv(opts);
    } catch (e) {
      if (e instanceof RdsError && e.code === 'EBADF' && s.isClosed) return;
      throw e;
    }
    yield m;
  }
}
