// Socket options (the kernel's af_rds.c setsockopt/getsockopt and sock_setsockopt's SOL_SOCKET
// part): their values, checked and stored once for every kind of socket (RdsSocket calls these),
// and read back. The actions (RDS_CANCEL_SENT_TO, RDS_GET_MR, RDS_FREE_MR, SO_RDS_TRANSPORT) are
// RdsSocket's own; the backend hears of each stored value (SocketBackend.optionSet).
import {
  RDS_CONG_MONITOR,
  RDS_RECVERR,
  RMEM_DEFAULT,
  SOCK_MIN_RCVBUF,
  SOCK_MIN_SNDBUF,
  SOL_RDS,
  SOL_SOCKET,
  SO_RCVBUF,
  SO_RCVTIMEO,
  SO_RCVTIMEO_NEW,
  SO_RDS_MSG_RXPATH_LATENCY,
  SO_RDS_TRANSPORT,
  SO_SNDBUF,
  SO_SNDTIMEO,
  SO_SNDTIMEO_NEW,
  SO_TIMESTAMP,
  SO_TIMESTAMP_NEW,
  SO_ZEROCOPY,
  WMEM_DEFAULT,
} from '../constants.js';
import { RdsError } from '../errors.js';
import { parseRxTraceOption } from './rx-trace.js';
import type { SocketBackend } from './socket-backend.js';

/** The longest delay a Node.js timer takes (SO_SNDTIMEO's bound). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** A socket's option values, as the application set them. @internal */
export class SocketOptionValues {
  /** Budgets as the application set them (the kernel stores twice these and uses half). */
  sndbuf = WMEM_DEFAULT / 2;
  rcvbuf = RMEM_DEFAULT / 2;
  timestamps = false;
  /** SO_ZEROCOPY: MSG_ZEROCOPY sends reference the caller's buffers instead of copying them. */
  zerocopy = false;
  /** SO_SNDTIMEO in ms, 0 = never. */
  sndtimeo = 0;
  /** SO_RCVTIMEO in ms, 0 = a blocking recv() waits forever. */
  rcvtimeo = 0;
  recvErr = false;
  congMonitor = false;
  /** SO_RDS_MSG_RXPATH_LATENCY: the trace points each message reports (RdsMessage.rxTrace); [] = off. */
  rxTrace: readonly number[] = [];
}

/** One valued option: how its value is checked and stored, and how it reads back. */
interface OptionRule {
  name: string;
  store(v: SocketOptionValues, value: unknown): void;
  /** Absent for an option the kernel takes in setsockopt only (getsockopt: ENOPROTOOPT). */
  read?(v: SocketOptionValues): number;
}

const flag = (name: string, key: 'timestamps' | 'recvErr' | 'congMonitor'): OptionRule => ({
  name,
  store: (v, value) => {
    v[key] = intValue(value, name) !== 0;
  },
  read: (v) => (v[key] ? 1 : 0),
});

const SOCKET_RULES = new Map<number, OptionRule>([
  [
    SO_SNDBUF,
    {
      name: 'SO_SNDBUF',
      store: (v, value) => {
        v.sndbuf = Math.max(nonNegative(value, 'SO_SNDBUF'), SOCK_MIN_SNDBUF / 2);
      },
      // Linux reports twice the value set (the kernel's bookkeeping overhead allowance).
      read: (v) => v.sndbuf * 2,
    },
  ],
  [
    SO_RCVBUF,
    {
      name: 'SO_RCVBUF',
      store: (v, value) => {
        v.rcvbuf = Math.max(nonNegative(value, 'SO_RCVBUF'), SOCK_MIN_RCVBUF / 2);
      },
      read: (v) => v.rcvbuf * 2,
    },
  ],
  [SO_TIMESTAMP, flag('SO_TIMESTAMP', 'timestamps')],
  [SO_TIMESTAMP_NEW, flag('SO_TIMESTAMP', 'timestamps')],
  [
    SO_ZEROCOPY,
    {
      name: 'SO_ZEROCOPY',
      store: (v, value) => {
        const n = intValue(value, 'SO_ZEROCOPY');
        if (n !== 0 && n !== 1) throw new RdsError('EINVAL', `SO_ZEROCOPY takes 0 or 1, got ${n}`);
        v.zerocopy = n === 1;
      },
      read: (v) => (v.zerocopy ? 1 : 0),
    },
  ],
  [SO_SNDTIMEO, timeo('SO_SNDTIMEO', 'sndtimeo')],
  [SO_SNDTIMEO_NEW, timeo('SO_SNDTIMEO', 'sndtimeo')],
  [SO_RCVTIMEO, timeo('SO_RCVTIMEO', 'rcvtimeo')],
  [SO_RCVTIMEO_NEW, timeo('SO_RCVTIMEO', 'rcvtimeo')],
]);

const RDS_RULES = new Map<number, OptionRule>([
  [RDS_RECVERR, flag('RDS_RECVERR', 'recvErr')],
  [RDS_CONG_MONITOR, flag('RDS_CONG_MONITOR', 'congMonitor')],
  // af_rds.c's rds_setsockopt takes SO_TIMESTAMP_OLD / _NEW at SOL_RDS too (rds_getsockopt does not).
  [SO_TIMESTAMP, { ...flag('SO_TIMESTAMP', 'timestamps'), read: undefined }],
  [SO_TIMESTAMP_NEW, { ...flag('SO_TIMESTAMP', 'timestamps'), read: undefined }],
  // Set only, as in the kernel (rds_getsockopt has no case for it: ENOPROTOOPT).
  [
    SO_RDS_MSG_RXPATH_LATENCY,
    {
      name: 'SO_RDS_MSG_RXPATH_LATENCY',
      store: (v, value) => {
        v.rxTrace = parseRxTraceOption(value, () => {
          v.rxTrace = [];
        });
      },
    },
  ],
]);

/** SO_SNDTIMEO, SO_RCVTIMEO: whole milliseconds a timer can take, 0 = never. */
function timeo(name: string, key: 'sndtimeo' | 'rcvtimeo'): OptionRule {
  return {
    name,
    store: (v, value) => {
      const ms = intValue(value, name);
      if (ms < 0 || ms > MAX_TIMER_MS)
        throw new RdsError('EINVAL', `${name} takes whole milliseconds from 0 (never) to ${MAX_TIMER_MS}, got ${ms}`);
      v[key] = ms;
    },
    read: (v) => v[key],
  };
}

/** Checks and stores a valued option (level SOL_RDS: the ones not handled by RdsSocket itself). @internal */
export function storeOption(v: SocketOptionValues, level: number, optname: number, value: unknown): void {
  if (level === SOL_SOCKET) {
    const rule = SOCKET_RULES.get(optname);
    if (rule === undefined)
      throw new RdsError(
        'ENOPROTOOPT',
        `unknown SOL_SOCKET option ${optname} (supported: SO_SNDBUF, SO_RCVBUF, SO_TIMESTAMP, SO_ZEROCOPY, SO_SNDTIMEO, SO_RCVTIMEO)`,
      );
    rule.store(v, value);
    return;
  }
  if (level !== SOL_RDS)
    throw new RdsError('ENOPROTOOPT', `unknown option level ${level}; use SOL_RDS (276) or SOL_SOCKET (1)`);
  const rule = RDS_RULES.get(optname);
  if (rule === undefined) throw new RdsError('ENOPROTOOPT', `unknown SOL_RDS option ${optname}`);
  rule.store(v, value);
}

/** getsockopt(): an option's value; SO_RDS_TRANSPORT is `transportType`. @internal */
export function readOption(v: SocketOptionValues, level: number, optname: number, transportType: number): number {
  if (level === SOL_SOCKET) {
    const rule = SOCKET_RULES.get(optname);
    if (rule?.read === undefined) throw new RdsError('ENOPROTOOPT', `unknown SOL_SOCKET option ${optname}`);
    return rule.read(v);
  }
  if (level !== SOL_RDS) throw new RdsError('ENOPROTOOPT', `unknown option level ${level}`);
  if (optname === SO_RDS_TRANSPORT) return transportType;
  const rule = RDS_RULES.get(optname);
  if (rule?.read === undefined) throw new RdsError('ENOPROTOOPT', `SOL_RDS option ${optname} cannot be read`);
  return rule.read(v);
}

/** An option only the socket's own side reads (a blocking recv()'s bound): a host node need not hear of it. @internal */
export function socketSideOnly(level: number, optname: number): boolean {
  return level === SOL_SOCKET && (optname === SO_RCVTIMEO || optname === SO_RCVTIMEO_NEW);
}

/** setsockopt() of a valued option: checked and stored, then the backend hears of it. @internal */
export function setValued(b: SocketBackend, level: number, optname: number, value: unknown): void {
  const before = valueBefore(b.options, level, optname);
  storeOption(b.options, level, optname, value);
  b.optionSet(level, optname, value, before);
}

/** An option's value before setsockopt() changes it, or undefined when it cannot be read (an action). @internal */
export function valueBefore(v: SocketOptionValues, level: number, optname: number): number | undefined {
  try {
    return readOption(v, level, optname, 0);
  } catch {
    return undefined; // setsockopt() itself then says what is wrong with the option
  }
}

/** An integer option value (a boolean counts as 0/1); EINVAL otherwise. @internal */
export function intValue(v: unknown, name: string): number {
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (typeof v !== 'number' || !Number.isInteger(v))
    throw new RdsError('EINVAL', `${name} takes an integer, got ${typeof v === 'number' ? v : typeof v}`);
  return v;
}

function nonNegative(value: unknown, name: string): number {
  const n = intValue(value, name);
  if (n < 0) throw new RdsError('EINVAL', `${name} must not be negative`);
  return n;
}

/** An object option value (RDS_GET_MR, RDS_FREE_MR). @internal */
export function objectValue(value: unknown, name: string): Record<string, unknown> {
  if (value === null || typeof value !== 'object') throw new RdsError('EINVAL', `${name} takes an object`);
  return value as Record<string, unknown>;
}
