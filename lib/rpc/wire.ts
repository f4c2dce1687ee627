/**
 * The request/reply wire format of rds-socket/rpc: a 16-byte header at the start of each RDS
 * message's payload, then the body. Every field is big-endian, so a C program on a kernel AF_RDS
 * socket can speak it with a packed struct and htons/htonl:
 *
 *   offset size field
 *   0      2    magic     0x5250 ("RP")
 *   2      1    version   1
 *   3      1    type      1 REQUEST, 2 REPLY, 3 ERROR (body: UTF-8 message),
 *                         4 DUPLICATE (this id was handled and its reply is no longer held),
 *                         5 EXPIRED (this id is older than the server's duplicate window; not run)
 *   4      4    instance  chosen at random by each client (never 0); names the client's id space
 *   8      4    id_hi     request id, high 32 bits
 *   12     4    id_lo     request id, low 32 bits (ids start at 1 and increase per instance)
 *   16     ...  body      request or reply bytes, opaque to the library
 *
 * A reply copies instance and id from its request and goes to the address and port the request
 * came from. A server identifies a request by (source address, source port, instance, id): it runs
 * its handler at most once for each, and answers a retransmission with the held reply.
 */
export const RPC_MAGIC = 0x5250;
/** Version of the rpc header (1). */
export const RPC_VERSION = 1;
/** Size of the rpc header (16 bytes) before the body. */
export const RPC_HEADER_SIZE = 16;

/** Message type: a request. */
export const RPC_REQUEST = 1;
/** Message type: a reply (the handler's result). */
export const RPC_REPLY = 2;
/** Message type: the handler threw (body: its message, UTF-8). */
export const RPC_ERROR = 3;
/** Message type: a retransmission of a request that ran and whose reply is no longer held. */
export const RPC_DUPLICATE = 4;
/** Message type: a request id older than the server's duplicate window; not run. */
export const RPC_EXPIRED = 5;

/** The fields of the rpc header. */
export interface RpcHeader {
  type: number;
  instance: number;
  id: number;
}

/** The header for one message; the body goes after it (sent gathered, not copied here). */
export function encodeRpcHeader(type: number, instance: number, id: number): Buffer {
  const h = Buffer.allocUnsafe(RPC_HEADER_SIZE);
  h.writeUInt16BE(RPC_MAGIC, 0);
  h[2] = RPC_VERSION;
  h[3] = type;
  h.writeUInt32BE(instance >>> 0, 4);
  h.writeUInt32BE(Math.floor(id / 0x100000000) >>> 0, 8);
  h.writeUInt32BE(id >>> 0, 12);
  return h;
}

/** The header of a received payload, or null when it is not an rpc message of this version. */
export function decodeRpcHeader(data: Uint8Array): RpcHeader | null {
  if (data.length < RPC_HEADER_SIZE) return null;
  const b = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.length);
  if (b.readUInt16BE(0) !== RPC_MAGIC || b[2] !== RPC_VERSION) return null;
  const type = b[3]!;
  if (type < RPC_REQUEST || type > RPC_EXPIRED) return null;
  const instance = b.readUInt32BE(4);
  const hi = b.readUInt32BE(8);
  // Ids stay JavaScript-exact (below 2^53); a larger one is not ours.
  if (instance === 0 || hi >= 0x200000) return null;
  const id = hi * 0x100000000 + b.readUInt32BE(12);
  if (id === 0) return null;
  return { type, instance, id };
}
