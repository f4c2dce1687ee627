// Linux uapi values (include/uapi/linux/rds.h, asm-generic socket.h, poll.h).
// Kept numerically identical so code ported from C keeps its option numbers.

/** Address family of RDS sockets (21); rds-socket sockets are `new RdsSocket()`. */
export const AF_RDS = 21;
/** Protocol family of RDS sockets, the same value as AF_RDS. */
export const PF_RDS = 21;
/** setsockopt/getsockopt level of the RDS options (276). */
export const SOL_RDS = 276;
/** setsockopt/getsockopt level of the generic socket options (1). */
export const SOL_SOCKET = 1;

// SOL_SOCKET options (asm-generic)
/** Send budget in bytes: messages sent and not yet acknowledged, all destinations together; reads back as twice the value set, as on Linux. */
export const SO_SNDBUF = 7;
/** Receive buffer in bytes: a port with more unread is congested (senders get ENOBUFS) until it drains below half. */
export const SO_RCVBUF = 8;
/** Stamp each received message with its arrival time (`RdsMessage.timestamp`). */
export const SO_TIMESTAMP = 29;
/** The kernel's old number of SO_TIMESTAMP (29), accepted as SO_TIMESTAMP. */
export const SO_TIMESTAMP_OLD = 29;
/** The kernel's y2038-safe number of SO_TIMESTAMP (63), accepted as SO_TIMESTAMP. */
export const SO_TIMESTAMP_NEW = 63;
/** Allow MSG_ZEROCOPY sends on this socket (TCP only). */
export const SO_ZEROCOPY = 60;
/**
 * Send timeout (asm-generic SO_SNDTIMEO_OLD 21, SO_SNDTIMEO_NEW 67). rds-socket takes it in
 * milliseconds, not a struct timeval: messages unacknowledged that long are given up (ETIMEDOUT).
 */
export const SO_SNDTIMEO = 21;
/** The kernel's old number of SO_SNDTIMEO (21). */
export const SO_SNDTIMEO_OLD = 21;
/** The kernel's y2038-safe number of SO_SNDTIMEO (67), accepted as SO_SNDTIMEO. */
export const SO_SNDTIMEO_NEW = 67;

/**
 * Receive timeout (asm-generic SO_RCVTIMEO_OLD 20, SO_RCVTIMEO_NEW 66). rds-socket takes it in
 * milliseconds, not a struct timeval: a blocking recv() waits at most that long, then rejects
 * with ETIMEDOUT (as rds_recvmsg returns -ETIMEDOUT). 0 = wait forever (the default).
 */
export const SO_RCVTIMEO = 20;
/** The kernel's old number of SO_RCVTIMEO (20). */
export const SO_RCVTIMEO_OLD = 20;
/** The kernel's y2038-safe number of SO_RCVTIMEO (66), accepted as SO_RCVTIMEO. */
export const SO_RCVTIMEO_NEW = 66;

// recvmsg(2) flags (recvmsg({ flags }), recv({ flags })) and msg_flags (RdsMessage.flags)
/** recvmsg flag (out-of-band data): RDS has none; refused with EOPNOTSUPP (the kernel returns 0). */
export const MSG_OOB = 0x1;
/** recvmsg flag: return the next message and leave it queued; the next recvmsg returns it again. */
export const MSG_PEEK = 0x2;
/** msg_flags: control data did not fit (never set: control data are RdsMessage fields, never cut). */
export const MSG_CTRUNC = 0x8;
/**
 * msg_flags: the message was longer than recvmsg's `buffer` and the rest was dropped. As a
 * recvmsg flag: return the message's full length (RdsMessage.length) even when truncated.
 */
export const MSG_TRUNC = 0x20;
/** recvmsg flag: wait for the whole request; accepted and ignored (a datagram comes whole). */
export const MSG_WAITALL = 0x100;
/** recvmsg flag: read the socket's error queue; refused with EOPNOTSUPP (RDS queues no errors there). */
export const MSG_ERRQUEUE = 0x2000;

// sendmsg(2) flags RDS accepts (anything else is EOPNOTSUPP)
/**
 * sendmsg/recvmsg flag: do not block (what `sendmsg()` and `recvmsg()` always do; `send()` and
 * `recv()` are the blocking forms: `recv({ flags: MSG_DONTWAIT })` rejects with EAGAIN when nothing is queued).
 */
export const MSG_DONTWAIT = 0x40;
/** The kernel's 32-bit compat flag; listed for completeness, refused by sendmsg. */
export const MSG_CMSG_COMPAT = 0x80000000;
/** sendmsg flag: keep a reference to the caller's buffers instead of copying them; completions come back in `zcopyCompletions`. */
export const MSG_ZEROCOPY = 0x4000000;
/** Completions one recvmsg() reports at most (RDS_MAX_ZCOOKIES). */
export const RDS_MAX_ZCOOKIES = 8;

// SOL_RDS options
/** SOL_RDS option: remove every queued message of this socket to a destination (value `{ address, port }`). */
export const RDS_CANCEL_SENT_TO = 1;
/** SOL_RDS option: register a memory region for RDMA (also `sock.getMr()`); InfiniBand only. */
export const RDS_GET_MR = 2;
/** SOL_RDS option: release a registered memory region (also `sock.freeMr()`). */
export const RDS_FREE_MR = 3;
/** SOL_RDS option: report failed RDMA operations through recvmsg even without RDS_RDMA_NOTIFY_ME. */
export const RDS_RECVERR = 5;
/** SOL_RDS option: deliver a notification (`congestionUpdate`) when a destination port that gave ENOBUFS clears. */
export const RDS_CONG_MONITOR = 6;
/** SOL_RDS option: RDS_GET_MR for the connection to one destination. */
export const RDS_GET_MR_FOR_DEST = 7;
/** SOL_RDS option: the socket's transport (RDS_TRANS_TCP or RDS_TRANS_IB), settable before bind(). */
export const SO_RDS_TRANSPORT = 8;
/** SOL_RDS option of the kernel (receive-path latency trace); not implemented: ENOPROTOOPT. */
export const SO_RDS_MSG_RXPATH_LATENCY = 10;

// Transports (SO_RDS_TRANSPORT values)
/** SO_RDS_TRANSPORT value: InfiniBand / RoCE. */
export const RDS_TRANS_IB = 0;
/** SO_RDS_TRANSPORT value the kernel leaves unused (1). */
export const RDS_TRANS_GAP = 1;
/** SO_RDS_TRANSPORT value of the kernel's removed iWARP transport (1); not available. */
export const RDS_TRANS_IWARP = 1;
/** SO_RDS_TRANSPORT value: TCP. */
export const RDS_TRANS_TCP = 2;
/** Number of transport values the kernel defines. */
export const RDS_TRANS_COUNT = 3;
/** SO_RDS_TRANSPORT value of a socket whose transport is not chosen yet. */
export const RDS_TRANS_NONE = 0xffffffff;
/** Kernel-internal loopback transport; reported by getsockopt for sockets that only talk locally. */
export const RDS_TRANS_LOOP = 3;

// Control-message types
/** Control message of an RDMA READ/WRITE with a send (`sendmsg` option `rdma`). */
export const RDS_CMSG_RDMA_ARGS = 1;
/** Control message naming a registered region to the peer (`sendmsg` option `rdmaDest`, `RdsMessage.rdmaDest`). */
export const RDS_CMSG_RDMA_DEST = 2;
/** Control message registering a region and naming it in one send (`sendmsg` option `rdmaMap`). */
export const RDS_CMSG_RDMA_MAP = 3;
/** Control message reporting an RDMA op's completion (`RdsMessage.rdmaStatus`). */
export const RDS_CMSG_RDMA_STATUS = 4;
/** Control message of a congestion notification (`RdsMessage.congestionUpdate`, with RDS_CONG_MONITOR). */
export const RDS_CMSG_CONG_UPDATE = 5;
/** Control message of a 64-bit remote fetch-and-add (`sendmsg` option `atomic`, op `fadd`). */
export const RDS_CMSG_ATOMIC_FADD = 6;
/** Control message of a 64-bit remote compare-and-swap (`sendmsg` option `atomic`, op `cswp`). */
export const RDS_CMSG_ATOMIC_CSWP = 7;
/** Control message of a masked fetch-and-add; refused with EOPNOTSUPP. */
export const RDS_CMSG_MASKED_ATOMIC_FADD = 8;
/** Control message of a masked compare-and-swap; refused with EOPNOTSUPP. */
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
/** rds_get_mr_args flag of the kernel (do not wait for a free MR); not taken here (`getMr` refuses it with EINVAL). */
export const RDS_RDMA_DONTWAIT = 0x0010;
/** rds_rdma_args: report the op's completion with RDS_CMSG_RDMA_STATUS. */
export const RDS_RDMA_NOTIFY_ME = 0x0020;
/** rds_rdma_args: no RDS message reaches the peer's socket, only the RDMA op. */
export const RDS_RDMA_SILENT = 0x0040;

// RDMA completion status (struct rds_rdma_notify.status)
/** RDMA op status: done. */
export const RDS_RDMA_SUCCESS = 0;
/** RDMA op status: the peer's device refused the access (freed, used-up or read-only region). */
export const RDS_RDMA_REMOTE_ERROR = 1;
/** RDMA op status: its message was cancelled. */
export const RDS_RDMA_CANCELED = 2;
/** RDMA op status: the connection went down with the op outstanding (never retransmitted). */
export const RDS_RDMA_DROPPED = 3;
/** RDMA op status: any other failure. */
export const RDS_RDMA_OTHER_ERROR = 4;
/** RDS_RDMA_BYTES extension flags (u8). */
export const RDS_FLAG_RDMA_WR_BYTES = 0x01;
/** RDS_RDMA_BYTES extension flag: the bytes were READ. */
export const RDS_FLAG_RDMA_RD_BYTES = 0x02;
/** Control message of the kernel's receive-path latency trace; not produced. */
export const RDS_CMSG_RXPATH_LATENCY = 11;
/** Control message carrying a MSG_ZEROCOPY cookie (`sendmsg` option `zcopyCookie`). */
export const RDS_CMSG_ZCOPY_COOKIE = 12;
/** Control message of MSG_ZEROCOPY completions (`RdsMessage.zcopyCompletions`). */
export const RDS_CMSG_ZCOPY_COMPLETION = 13;

// getsockopt(SOL_RDS, RDS_INFO_*)
/** The first RDS_INFO_* number the kernel defines. */
export const RDS_INFO_FIRST = 10000;
/** getsockopt(SOL_RDS) info request of the kernel (counters (`stack.stats().counters`)); records into a buffer: `sock.getsockopt(SOL_RDS, RDS_INFO_..., buffer)`. */
export const RDS_INFO_COUNTERS = 10000;
/** getsockopt(SOL_RDS) info request of the kernel (connections (`stack.connections()`)); records into a buffer: `sock.getsockopt(SOL_RDS, RDS_INFO_..., buffer)`. */
export const RDS_INFO_CONNECTIONS = 10001;
/** getsockopt(SOL_RDS) info request of the kernel (messages queued to send); records into a buffer: `sock.getsockopt(SOL_RDS, RDS_INFO_..., buffer)`. */
export const RDS_INFO_SEND_MESSAGES = 10003;
/** getsockopt(SOL_RDS) info request of the kernel (messages waiting for acknowledgement); records into a buffer: `sock.getsockopt(SOL_RDS, RDS_INFO_..., buffer)`. */
export const RDS_INFO_RETRANS_MESSAGES = 10004;
/** getsockopt(SOL_RDS) info request of the kernel (messages waiting to be read); records into a buffer: `sock.getsockopt(SOL_RDS, RDS_INFO_..., buffer)`. */
export const RDS_INFO_RECV_MESSAGES = 10005;
/** getsockopt(SOL_RDS) info request of the kernel (sockets); records into a buffer: `sock.getsockopt(SOL_RDS, RDS_INFO_..., buffer)`. */
export const RDS_INFO_SOCKETS = 10006;
/** getsockopt(SOL_RDS) info request of the kernel (TCP connections); records into a buffer: `sock.getsockopt(SOL_RDS, RDS_INFO_..., buffer)`. */
export const RDS_INFO_TCP_SOCKETS = 10007;
/** getsockopt(SOL_RDS) info request of the kernel (InfiniBand connections); records into a buffer: `sock.getsockopt(SOL_RDS, RDS_INFO_..., buffer)`. */
export const RDS_INFO_IB_CONNECTIONS = 10008;
/** Deprecated by the kernel (no handler): ENOPROTOOPT. */
export const RDS_INFO_FLOWS = 10002;
/** Defined by the kernel without a handler: ENOPROTOOPT. */
export const RDS_INFO_CONNECTION_STATS = 10009;
/** Defined by the kernel without a handler (iWARP is gone): ENOPROTOOPT. */
export const RDS_INFO_IWARP_CONNECTIONS = 10010;
/** getsockopt(SOL_RDS) info request: connections, IPv4 and IPv6 (rds6_info_connection records). */
export const RDS6_INFO_CONNECTIONS = 10011;
/** getsockopt(SOL_RDS) info request: messages queued to send, IPv4 and IPv6 (rds6_info_message). */
export const RDS6_INFO_SEND_MESSAGES = 10012;
/** getsockopt(SOL_RDS) info request: messages waiting for acknowledgement, IPv4 and IPv6. */
export const RDS6_INFO_RETRANS_MESSAGES = 10013;
/** getsockopt(SOL_RDS) info request: messages waiting to be read, IPv4 and IPv6. */
export const RDS6_INFO_RECV_MESSAGES = 10014;
/** getsockopt(SOL_RDS) info request: bound sockets, IPv4 and IPv6 (rds6_info_socket). */
export const RDS6_INFO_SOCKETS = 10015;
/** getsockopt(SOL_RDS) info request: TCP paths, IPv4 and IPv6 (rds6_info_tcp_socket). */
export const RDS6_INFO_TCP_SOCKETS = 10016;
/** getsockopt(SOL_RDS) info request: InfiniBand connections, IPv4 and IPv6 (rds6_info_rdma_connection). */
export const RDS6_INFO_IB_CONNECTIONS = 10017;
/** The last RDS_INFO_* number the kernel defines. */
export const RDS_INFO_LAST = 10017;

// ioctl(2) requests (uapi linux/rds.h; SIOCPROTOPRIVATE is 0x89e0)
/** ioctl: set the socket's type of service (`sock.ioctl(SIOCRDSSETTOS, tos)`); once, before the first send. */
export const SIOCRDSSETTOS = 0x89e0;
/** ioctl: read the socket's type of service (`sock.ioctl(SIOCRDSGETTOS)`). */
export const SIOCRDSGETTOS = 0x89e1;

// Congestion monitor helpers
/** Number of bits of the RDS_CONG_MONITOR mask (64): ports map to bit `port % 64`. */
export const RDS_CONG_MONITOR_SIZE = 64;
/** The bit of RDS_CONG_MONITOR's mask for a port (`port % 64`). */
export const RDS_CONG_MONITOR_BIT = (port: number): number => port % RDS_CONG_MONITOR_SIZE;
/** The RDS_CONG_MONITOR mask of a port, to test `congestionUpdate` with. */
export const RDS_CONG_MONITOR_MASK = (port: number): bigint => 1n << BigInt(port % RDS_CONG_MONITOR_SIZE);

// poll(2) bits (asm-generic/poll.h)
/** poll(): a message (or a notification) can be read. */
export const POLLIN = 0x0001;
/** poll() bit of the kernel; RDS never reports it. */
export const POLLPRI = 0x0002;
/** poll(): the send budget has room. */
export const POLLOUT = 0x0004;
/** poll() bit of the kernel; RDS never reports it. */
export const POLLERR = 0x0008;
/** poll() bit of the kernel; RDS never reports it. */
export const POLLHUP = 0x0010;
/** poll(): the socket is closed. */
export const POLLNVAL = 0x0020;
/** poll(): reported with POLLIN. */
export const POLLRDNORM = 0x0040;
/** poll() bit of the kernel; RDS never reports it. */
export const POLLRDBAND = 0x0080;
/** poll(): reported with POLLOUT. */
export const POLLWRNORM = 0x0100;
/** poll(): a peer's congestion map arrived since the last poll (without RDS_CONG_MONITOR). */
export const POLLWRBAND = 0x0200;

// Wire constants (net/rds/rds.h)
/** Size of the RDS header on the wire (48 bytes). */
export const RDS_HEADER_SIZE = 48;
/** Largest RDS message (1 MiB); larger sends are EMSGSIZE. */
export const RDS_MAX_MSG_SIZE = 1 << 20;
/** Size of a congestion map (8 KiB: one bit per port). */
export const RDS_CONG_MAP_BYTES = 8192;
/** TCP port of RDS/TCP (16385), the kernel's. */
export const RDS_TCP_PORT = 16385;
/** rdma_cm port of RDS/IB (18634), the kernel's. */
export const RDS_PORT = 18634;
/** Header flag: the payload is a congestion map. */
export const RDS_FLAG_CONG_BITMAP = 0x01;
/** Header flag: the sender asks for an acknowledgement soon. */
export const RDS_FLAG_ACK_REQUIRED = 0x02;
/** Header flag: the message is sent again after a reconnect. */
export const RDS_FLAG_RETRANSMITTED = 0x04;
/** Port of the multipath probe and pong (port 1 to port 0). */
export const RDS_FLAG_PROBE_PORT = 1;
/**
 * Header flag 0x20 (UEK, and mainline 7.0+ on IB): the extension area holds an RDMA_BYTES record.
 * Receivers find the record by walking the area anyway; the flag is informational.
 */
export const RDS_FLAG_EXTHDR_EXTENSION = 0x20;
/** Most paths (lanes) per connection (8), as the kernel's RDS_MPATH_WORKERS. */
export const RDS_MPATH_WORKERS = 8;
/** Most credits one RDS/IB header can grant (255). */
export const RDS_MAX_ADV_CREDIT = 255;

/** Extension record type: end of records. */
export const RDS_EXTHDR_NONE = 0;
/** Extension record type: protocol version. */
export const RDS_EXTHDR_VERSION = 1;
/** Extension record type: the RDMA op a message carries (the remote key). */
export const RDS_EXTHDR_RDMA = 2;
/** Extension record type: a region named to the peer (RDS_CMSG_RDMA_DEST). */
export const RDS_EXTHDR_RDMA_DEST = 3;
/** Extension record type: bytes moved by an RDMA op (7.x; read, not sent). */
export const RDS_EXTHDR_RDMA_BYTES = 4;
/** Extension record type: how many paths the sender runs. */
export const RDS_EXTHDR_NPATHS = 5;
/** Extension record type: the sender's generation number. */
export const RDS_EXTHDR_GEN_NUM = 6;
/** Extension record type: capability bits (7.x). */
export const RDS_EXTHDR_CAP_BITS = 7;
/** Extension record type: paths paired by TCP source port (7.x). */
export const RDS_EXTHDR_SPORT_IDX = 8;
/** Extension record type: a checksum (UEK). */
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
/**
 * A message whose sender cancelled it (a send() timeout, RDS_CANCEL_SENT_TO) after it went out
 * on a carrier that then died: a copy may still come out of that carrier, so it keeps its place
 * in sequence as a withdrawn record, never delivered (docs/extensions.md §8, "Withdrawn records").
 * The peer takes it: it counts the message's numbers as arrived (a late copy is a duplicate) and
 * delivers nothing.
 */
export const RDSSOCK_CAP_WITHDRAWN = 0x800;
/**
 * The withdrawn marker (no data), at byte 10 of the extension area, after the MOVED record that
 * a withdrawn message always carries (naming the path and number it was first given). The frame
 * has no payload. Only ever sent to peers that advertised RDSSOCK_CAP_WITHDRAWN.
 */
export const RDSSOCK_EXTHDR_WITHDRAWN = 0x57;
/** No socket was bound to the destination port (the sender's confirmation rejects with ECONNREFUSED). */
export const RDSSOCK_REFUSED_NO_SOCK = 2;
/** The receiving socket was closed with the message unread (ECONNRESET). */
export const RDSSOCK_REFUSED_DISCARDED = 3;

// Connection (path) states, numbered as enum rds_conn_state
/** Path state DOWN (enum rds_conn_state). */
export const RDS_CONN_DOWN = 0;
/** Path state CONNECTING (enum rds_conn_state). */
export const RDS_CONN_CONNECTING = 1;
/** Path state DISCONNECTING (enum rds_conn_state). */
export const RDS_CONN_DISCONNECTING = 2;
/** Path state UP (enum rds_conn_state). */
export const RDS_CONN_UP = 3;
/** Path state RESETTING (enum rds_conn_state). */
export const RDS_CONN_RESETTING = 4;
/** Path state ERROR (enum rds_conn_state). */
export const RDS_CONN_ERROR = 5;

// Linux defaults that shape socket buffers: net.core.wmem_default / rmem_default.
/** Linux's net.core.wmem_default, which the default SO_SNDBUF is derived from. */
export const WMEM_DEFAULT = 212992;
/** Linux's net.core.rmem_default, which the default SO_RCVBUF is derived from. */
export const RMEM_DEFAULT = 212992;
/** SOCK_MIN_SNDBUF / SOCK_MIN_RCVBUF on x86-64 (2 * (2048 + sizeof(struct sk_buff))), rounded as Linux reports. */
export const SOCK_MIN_SNDBUF = 4608;
/** Smallest SO_RCVBUF Linux reports on x86-64 (SOCK_MIN_RCVBUF). */
export const SOCK_MIN_RCVBUF = 2304;
