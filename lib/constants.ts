// Linux uapi values (include/uapi/linux/rds.h, asm-generic socket.h, poll.h).
// Kept numerically identical so code ported from C keeps its option numbers.

export const AF_RDS = 21;
export const PF_RDS = 21;
export const SOL_RDS = 276;
export const SOL_SOCKET = 1;

// SOL_SOCKET options (asm-generic)
export const SO_SNDBUF = 7;
export const SO_RCVBUF = 8;
export const SO_TIMESTAMP = 29;
export const SO_TIMESTAMP_OLD = 29;
export const SO_TIMESTAMP_NEW = 63;
export const SO_ZEROCOPY = 60;
/**
 * Send timeout (asm-generic SO_SNDTIMEO_OLD 21, SO_SNDTIMEO_NEW 67). rds-socket takes it in
 * milliseconds, not a struct timeval: messages unacknowledged that long are given up (ETIMEDOUT).
 */
export const SO_SNDTIMEO = 21;
export const SO_SNDTIMEO_OLD = 21;
export const SO_SNDTIMEO_NEW = 67;

// sendmsg(2) flags RDS accepts (anything else is EOPNOTSUPP)
export const MSG_DONTWAIT = 0x40;
export const MSG_CMSG_COMPAT = 0x80000000;
export const MSG_ZEROCOPY = 0x4000000;
/** Completions one recvmsg() reports at most (RDS_MAX_ZCOOKIES). */
export const RDS_MAX_ZCOOKIES = 8;

// SOL_RDS options
export const RDS_CANCEL_SENT_TO = 1;
export const RDS_GET_MR = 2;
export const RDS_FREE_MR = 3;
export const RDS_RECVERR = 5;
export const RDS_CONG_MONITOR = 6;
export const RDS_GET_MR_FOR_DEST = 7;
export const SO_RDS_TRANSPORT = 8;
export const SO_RDS_MSG_RXPATH_LATENCY = 10;

// Transports (SO_RDS_TRANSPORT values)
export const RDS_TRANS_IB = 0;
export const RDS_TRANS_GAP = 1;
export const RDS_TRANS_IWARP = 1;
export const RDS_TRANS_TCP = 2;
export const RDS_TRANS_COUNT = 3;
export const RDS_TRANS_NONE = 0xffffffff;
/** Kernel-internal loopback transport; reported by getsockopt for sockets that only talk locally. */
export const RDS_TRANS_LOOP = 3;

// Control-message types
export const RDS_CMSG_RDMA_ARGS = 1;
export const RDS_CMSG_RDMA_DEST = 2;
export const RDS_CMSG_RDMA_MAP = 3;
export const RDS_CMSG_RDMA_STATUS = 4;
export const RDS_CMSG_CONG_UPDATE = 5;
export const RDS_CMSG_ATOMIC_FADD = 6;
export const RDS_CMSG_ATOMIC_CSWP = 7;
export const RDS_CMSG_MASKED_ATOMIC_FADD = 8;
export const RDS_CMSG_MASKED_ATOMIC_CSWP = 9;

// RDMA operation flags (struct rds_rdma_args.flags, struct rds_get_mr_args.flags)
/** rds_rdma_args: the operation is an RDMA WRITE to the peer (else a READ from it). */
export const RDS_RDMA_READWRITE = 0x0001;
/** rds_rdma_args: fence the SEND behind the RDMA op (IB_SEND_FENCE). */
export const RDS_RDMA_FENCE = 0x0002;
/** rds_get_mr_args / RDS_FREE_MR: invalidate the mapping when it is released. */
export const RDS_RDMA_INVALIDATE = 0x0004;
/** rds_get_mr_args: free the MR once the peer's RDMA op on it completes (exthdr RDMA). */
export const RDS_RDMA_USE_ONCE = 0x0008;
export const RDS_RDMA_DONTWAIT = 0x0010;
/** rds_rdma_args: report the op's completion with RDS_CMSG_RDMA_STATUS. */
export const RDS_RDMA_NOTIFY_ME = 0x0020;
/** rds_rdma_args: no RDS message reaches the peer's socket, only the RDMA op. */
export const RDS_RDMA_SILENT = 0x0040;

// RDMA completion status (struct rds_rdma_notify.status)
export const RDS_RDMA_SUCCESS = 0;
export const RDS_RDMA_REMOTE_ERROR = 1;
export const RDS_RDMA_CANCELED = 2;
export const RDS_RDMA_DROPPED = 3;
export const RDS_RDMA_OTHER_ERROR = 4;
/** RDS_RDMA_BYTES extension flags (u8). */
export const RDS_FLAG_RDMA_WR_BYTES = 0x01;
export const RDS_FLAG_RDMA_RD_BYTES = 0x02;
export const RDS_CMSG_RXPATH_LATENCY = 11;
export const RDS_CMSG_ZCOPY_COOKIE = 12;
export const RDS_CMSG_ZCOPY_COMPLETION = 13;

// getsockopt(SOL_RDS, RDS_INFO_*)
export const RDS_INFO_FIRST = 10000;
export const RDS_INFO_COUNTERS = 10000;
export const RDS_INFO_CONNECTIONS = 10001;
export const RDS_INFO_SEND_MESSAGES = 10003;
export const RDS_INFO_RETRANS_MESSAGES = 10004;
export const RDS_INFO_RECV_MESSAGES = 10005;
export const RDS_INFO_SOCKETS = 10006;
export const RDS_INFO_TCP_SOCKETS = 10007;
export const RDS_INFO_IB_CONNECTIONS = 10008;
export const RDS_INFO_LAST = 10017;

// Congestion monitor helpers
export const RDS_CONG_MONITOR_SIZE = 64;
export const RDS_CONG_MONITOR_BIT = (port: number): number => port % RDS_CONG_MONITOR_SIZE;
export const RDS_CONG_MONITOR_MASK = (port: number): bigint => 1n << BigInt(port % RDS_CONG_MONITOR_SIZE);

// poll(2) bits (asm-generic/poll.h)
export const POLLIN = 0x0001;
export const POLLPRI = 0x0002;
export const POLLOUT = 0x0004;
export const POLLERR = 0x0008;
export const POLLHUP = 0x0010;
export const POLLNVAL = 0x0020;
export const POLLRDNORM = 0x0040;
export const POLLRDBAND = 0x0080;
export const POLLWRNORM = 0x0100;
export const POLLWRBAND = 0x0200;

// Wire constants (net/rds/rds.h)
export const RDS_HEADER_SIZE = 48;
export const RDS_MAX_MSG_SIZE = 1 << 20;
export const RDS_CONG_MAP_BYTES = 8192;
export const RDS_TCP_PORT = 16385;
export const RDS_PORT = 18634;
export const RDS_FLAG_CONG_BITMAP = 0x01;
export const RDS_FLAG_ACK_REQUIRED = 0x02;
export const RDS_FLAG_RETRANSMITTED = 0x04;
export const RDS_FLAG_PROBE_PORT = 1;
/**
 * Header flag 0x20 (UEK, and mainline 7.0+ on IB): the extension area holds an RDMA_BYTES record.
 * Receivers find the record by walking the area anyway; the flag is informational.
 */
export const RDS_FLAG_EXTHDR_EXTENSION = 0x20;
export const RDS_MPATH_WORKERS = 8;
export const RDS_MAX_ADV_CREDIT = 255;

export const RDS_EXTHDR_NONE = 0;
export const RDS_EXTHDR_VERSION = 1;
export const RDS_EXTHDR_RDMA = 2;
export const RDS_EXTHDR_RDMA_DEST = 3;
export const RDS_EXTHDR_RDMA_BYTES = 4;
export const RDS_EXTHDR_NPATHS = 5;
export const RDS_EXTHDR_GEN_NUM = 6;
export const RDS_EXTHDR_CAP_BITS = 7;
export const RDS_EXTHDR_SPORT_IDX = 8;
export const RDS_EXTHDR_CSUM = 9;
/**
 * rds-socket's own capability extension (be32 bits). Its type is >= 16 so every kernel parser
 * (mainline stops at types >= 16, UEK above 9) stops there; it is always packed last.
 */
export const RDSSOCK_EXTHDR_CAPS = 0x52;
/** The peer acknowledges messages with h_ack and ack-only frames (RDS/IB style) over TCP. */
export const RDSSOCK_CAP_ACK = 0x1;
/** The peer answers heartbeat frames. */
export const RDSSOCK_CAP_HEARTBEAT = 0x2;
/**
 * The peer takes messages moved from a dead path to a live one (failover between rds-socket
 * nodes) and suppresses duplicates by their original path and sequence (RDSSOCK_EXTHDR_MOVED).
 */
export const RDSSOCK_CAP_FAILOVER = 0x4;
/**
 * On a message moved by failover: u8 original path index, be64 original sequence number. Only
 * ever sent to peers that advertised RDSSOCK_CAP_FAILOVER (never to a kernel).
 */
export const RDSSOCK_EXTHDR_MOVED = 0x53;
/** Bits 4..7 of the capabilities: how many paths (1, 2, 4 or 8) the peer can run. */
export const RDSSOCK_CAP_PATHS_SHIFT = 4;
/**
 * The peer tells apart "queued" and "read": its h_ack is flow control only (it may cover messages
 * acknowledged as queued), RDSSOCK_EXTHDR_READ says which messages its applications have taken,
 * and RDSSOCK_EXTHDR_REFUSED which were dropped (no socket bound) or discarded (socket closed
 * unread). Confirmations resolve on the read cursor only.
 */
export const RDSSOCK_CAP_CONFIRM = 0x8;
/**
 * The peer needs no unsequenced hello: it learns our generation from the sequenced probe and pong
 * (the first sequenced frame an incarnation sends on path 0 is its probe). Peers without it get
 * the hello on every carrier, as before.
 */
export const RDSSOCK_CAP_NO_HELLO = 0x100;
/**
 * Lanes open on demand: the peer opens a lane > 0 only when a socket whose messages use it has
 * something to send, and, as the larger address, asks for one with a poke whose TCP source port
 * is the lane index mod 8 (its pokes for path 0 to a peer it knows use ports that are 0 mod 8;
 * before the handshake, an ephemeral port, so a lane may open unasked, never fail to). An initiator opens
 * every lane as soon as the path count is known only for peers without this bit.
 */
export const RDSSOCK_CAP_LAZY_LANES = 0x400;
/**
 * On ack-only frames to RDSSOCK_CAP_CONFIRM peers: be64 read cursor (every message up to it has
 * been read, except those reported refused), be32 how many refused or discarded messages lie at
 * or before it (so a sender can tell a lost RDSSOCK_EXTHDR_REFUSED).
 */
export const RDSSOCK_EXTHDR_READ = 0x54;
/** On ack-only frames to RDSSOCK_CAP_CONFIRM peers: be64 sequence, u8 RDSSOCK_REFUSED_*. */
export const RDSSOCK_EXTHDR_REFUSED = 0x55;
/**
 * The peer runs rails: extra paths of a connection over other address pairs (see docs/extensions.md,
 * "Rails"). Only advertised with acknowledgements on, over a transport that carries rails (TCP).
 */
export const RDSSOCK_CAP_RAILS = 0x200;
/**
 * On the rail hello that opens a rail's TCP connection (and on its answer): u8 version (1), u8 kind
 * (RDSSOCK_RAIL_*), u8 rail path index, u8 refusal reason (RDSSOCK_RAIL_REFUSED_*, 0 otherwise).
 * The frame's payload names both nodes (see lib/wire/rail-hello.ts). Never sent to a kernel.
 */
export const RDSSOCK_EXTHDR_RAIL = 0x56;
/** No socket was bound to the destination port (the sender's confirmation rejects with ECONNREFUSED). */
export const RDSSOCK_REFUSED_NO_SOCK = 2;
/** The receiving socket was closed with the message unread (ECONNRESET). */
export const RDSSOCK_REFUSED_DISCARDED = 3;

// Connection (path) states, numbered as enum rds_conn_state
export const RDS_CONN_DOWN = 0;
export const RDS_CONN_CONNECTING = 1;
export const RDS_CONN_DISCONNECTING = 2;
export const RDS_CONN_UP = 3;
export const RDS_CONN_RESETTING = 4;
export const RDS_CONN_ERROR = 5;

// Linux defaults that shape socket buffers: net.core.wmem_default / rmem_default.
export const WMEM_DEFAULT = 212992;
export const RMEM_DEFAULT = 212992;
/** SOCK_MIN_SNDBUF / SOCK_MIN_RCVBUF on x86-64 (2 * (2048 + sizeof(struct sk_buff))), rounded as Linux reports. */
export const SOCK_MIN_SNDBUF = 4608;
export const SOCK_MIN_RCVBUF = 2304;
