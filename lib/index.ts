import * as constants from './constants.js';
import { RdsStack } from './core/stack.js';
import { LoopTransport } from './transports/loop.js';
import { TcpTransport } from './transports/tcp.js';

// The core never imports a transport; the package entry point decides which ones a stack gets.
RdsStack.setDefaultTransports([() => new TcpTransport(), () => new LoopTransport()]);

export { constants, RdsStack };
export { RdsSocket } from './core/socket.js';
export type { RdsSocketOptions, RdsData, WaitOptions, SendOptions, RdsSocketEvents } from './core/socket.js';
export type {
  RdsStackOptions, RdsMessage, ConnectionInfo, PathInfo, PathStateEvent, RdsStackEvents, RdsTransportHost,
} from './core/stack.js';
export type { RdsTransport } from './core/transport.js';
export type { RdsAddress } from './core/address.js';
export type { ConnState } from './core/path.js';
export { RdsError, type RdsErrorCode } from './errors.js';
export { RDS_COUNTER_NAMES, type RdsCounterName } from './core/stats.js';
export { TcpTransport, type TcpTransportOptions } from './transports/tcp.js';
export { LoopTransport } from './transports/loop.js';
export * as wire from './wire/index.js';
