import type { RdsStack } from '../stack.js';

/**
 * What a stack's control endpoint answers (control.ts), one request per line:
 *   info                              everything rds-info shows
 *   reconnect PEER INDEX [LOCAL]      drop path INDEX to PEER and let it connect again (also out of
 *                                     a disconnect or of ERROR after maxReconnectAttempts)
 *   disconnect PEER INDEX [LOCAL]     drop path INDEX and keep it down until reconnect
 *   reset-stats                       every counter and path figure back to zero
 * rds-info sends the first, rds-ctl the others. Errors are answered as { error, code }.
 */
export function controlAnswer(stack: RdsStack, request: string): unknown {
  const [cmd, ...args] = request.split(/\s+/).filter((w) => w !== '');
  switch (cmd) {
    case 'info':
      return { pid: process.pid, ...stack.info() };
    case 'reconnect':
    case 'disconnect': {
      const [peer, index, local] = args;
      const i = Number(index);
      if (peer === undefined || !Number.isInteger(i) || i < 0 || args.length > 3)
        return { error: `usage: ${cmd} PEER PATH-INDEX [LOCAL-ADDRESS]`, code: 'EINVAL' };
      if (cmd === 'reconnect') stack.reconnectPath(peer, i, local);
      else stack.disconnectPath(peer, i, local);
      return { ok: true };
    }
    case 'reset-stats':
      stack.resetStats();
      return { ok: true };
    default:
      return { error: `unknown request ${JSON.stringify(request)}`, code: 'EINVAL' };
  }
}
