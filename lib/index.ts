import * as constants from './constants.js';
import { RdsStack } from './core/stack.js';
import { LoopTransport } from './transports/loop.js';
import { TcpTransport } from './transports/tcp.js';
import { IbTransport } from './transports/ib.js';
import { RdsSocket } from './core/socket.js';
import { hostWing, nodeBackendFor } from './host/index.js';

// The core never imports a transport; the package entry point decides which ones a stack gets.
// TCP comes first, so sockets use it unless they ask for InfiniBand (SO_RDS_TRANSPORT / transport: 'ib');
// the IB transport loads rdma-core only when first used.
RdsStack.setDefaultTransports([() => new TcpTransport(), () => new IbTransport(), () => new LoopTransport()]);
// Likewise the host node: the core's serve()/attach() and sockets that live in a node go through it.
RdsStack.useHostWing(hostWing);
RdsSocket.useNodeBackends(nodeBackendFor);

export { constants, RdsStack, RdsSocket };
export type {
  RdsSocketOptions,
  RdsData,
  WaitOptions,
  RecvmsgOptions,
  RecvOptions,
  SendOptions,
  SendmsgOptions,
  RdsSocketEvents,
} from './core/socket-types.js';
export type {
  RdsStackOptions,
  RdsMessage,
  ConnectionInfo,
  PathInfo,
  PathStateEvent,
  RdsStackEvents,
  RdsTransportHost,
  StackReport,
  StackReader,
} from './core/stack.js';
export type { RdsTransport, TransportHost } from './core/transport.js';
export type { PeerKind } from './core/handshake.js';
export type {
  TransportConn,
  TransportHandshake,
  TransportPath,
  TransportPathAcks,
  TransportPathHeartbeat,
  TransportPathSend,
} from './core/transport-path.js';
export type { RxTrace } from './core/rx-trace.js';
export type { RdsAddress } from './core/address.js';
export type {
  GetMrOptions,
  FreeMrOptions,
  RdmaArgs,
  RdmaMapArgs,
  AtomicArgs,
  MaskedAtomicArgs,
} from './core/rdma.js';
export type { ConnState } from './core/path.js';
export type { PeerEvent, PeerInfo, PeerStateName } from './core/ext/peer-state.js';
export { RdsError, type RdsErrorCode } from './errors.js';
export { RdsInfoSpaceError, type RdsInfoResult } from './core/info-result.js';
export { RDS_COUNTER_NAMES, type RdsCounterName } from './core/stats.js';
export { TcpTransport, type TcpTransportOptions } from './transports/tcp.js';
export { LoopTransport } from './transports/loop.js';
export { IbTransport, type IbTransportOptions } from './transports/ib.js';
export * as wire from './wire/index.js';
export type { ServeOptions, HostNodeHandle } from './core/ext/host-hooks.js';
export { defaultNodePath, systemNodePath } from './host/paths.js';
