// rds-socket/rpc: request/reply over RDS with correlation ids, timeouts, concurrency limits and
// exactly-once handling per request id. The wire format is documented in ./wire.ts and docs/request-reply.md.
export {
  RpcClient,
  RpcRemoteError,
  RpcTimeoutError,
  type RpcClientOptions,
  type RequestOptions,
  type RpcClientStats,
} from './client.js';
export {
  RpcServer,
  serve,
  type RpcHandler,
  type RpcRequestInfo,
  type RpcServerOptions,
  type RpcServerStats,
} from './server.js';
export {
  RPC_MAGIC,
  RPC_VERSION,
  RPC_HEADER_SIZE,
  RPC_REQUEST,
  RPC_REPLY,
  RPC_ERROR,
  RPC_DUPLICATE,
  RPC_EXPIRED,
  encodeRpcHeader,
  decodeRpcHeader,
  type RpcHeader,
} from './wire.js';
