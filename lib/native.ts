import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

/** One rdma_cm event channel and the connections made through it (src-native/ib_endpoint.h). */
export interface IbEndpointBinding {
  /** rdma_listen on address:port; returns the listener's id. */
  listen(address: string, port: number): number;
  /**
   * rdma_resolve_addr then _route; returns the new id; ROUTE_RESOLVED (or an error event) follows.
   * `tos`: the id's type of service (rdma_set_option RDMA_OPTION_ID_TOS), set before either.
   */
  connect(src: string, dst: string, port: number, timeoutMs: number, tos?: number): number;
  /** PD, completion channel, CQ, RC QP, and one registered buffer of (sendSlots + recvSlots) slots. */
  setupQp(id: number, sendSlots: number, recvSlots: number, slotSize: number): Buffer;
  rdmaConnect(id: number, privateData: Buffer): void;
  accept(id: number, privateData: Buffer): void;
  /** Refuses a connection request and destroys its id. */
  reject(id: number, privateData?: Buffer): void;
  /** Posts SENDs: [slot, length, flags(1 = solicited, 2 = fence)] triples; 0 or an errno. */
  postSend(id: number, wrs: Int32Array): number;
  /** Posts receives into the given slots; 0 or an errno. */
  postRecv(id: number, slots: Int32Array): number;
  /**
   * Registers application memory zero-based as the kernel's RDS does (I/O virtual address 0 = the
   * start of its first page; its first byte at `offset`, its offset in that page) in the PD of the
   * device owning `address`, shared by every connection on it: remote read, and remote write with
   * `readWrite`. Returns [handle, rkey, offset]; the memory stays referenced until deregMr. Throws
   * (errno EOPNOTSUPP) when libibverbs lacks ibv_reg_mr_iova (rdma-core < 25).
   */
  regMr?(address: string, mem: Uint8Array, readWrite: boolean): [number, number, number];
  /** Releases a registration of regMr; false if the handle names none. */
  deregMr?(handle: number): boolean;
  /**
   * Posts an RDMA WRITE (write) or READ on connection `id` at the peer's (remoteAddr, rkey), the
   * local side being `local` (registered for the op's duration). Its completion comes in a batch
   * as [tag, ibv_wc_status, bytes] (tag >= 2^30 tells it from ring slots). 0, or an errno: EAGAIN
   * when the send queue has no room for its work requests now.
   */
  postRdma?(
    id: number,
    tag: number,
    /** true/false: RDMA WRITE/READ; or 0 WRITE, 1 READ, 2 atomic fetch-and-add, 3 atomic compare-and-swap. */
    kind: boolean | number,
    remoteAddr: bigint,
    rkey: number,
    local: readonly Uint8Array[],
    /** Atomics: the addend (FADD) or the compare value (CSWP). */
    compareAdd?: bigint,
    /** CSWP: the value swapped in. */
    swap?: bigint,
  ): number;
  /** Before destroy: the RDMA op completions already in the CQ, [tag, status, bytes]*; the rest is discarded. */
  pollOps?(id: number): Int32Array;
  disconnect(id: number): void;
  /** Destroys the QP, CQ, registration and id; idempotent. */
  destroy(id: number): void;
  close(): void;
  ref(): void;
  unref(): void;
}

/** What the prebuilt addon (src-native/) provides. */
export interface NativeBinding {
  /** null when rdma-core's libibverbs and librdmacm load (dlopen), else why not. */
  ibLoad(): string | null;
  /** The RDMA device an IPv4 address belongs to, or null. */
  ibDeviceFor(address: string): string | null;
  /** Whether the RDMA device owning the address does 64-bit atomics (absent from older prebuilds). */
  ibAtomics?(address: string): boolean;
  IbEndpoint: new (
    onCmEvent: (
      id: number,
      event: string,
      status: number,
      privateData: Buffer | undefined,
      info: Record<string, unknown>,
    ) => void,
    onCompletions: (id: number, batch: Int32Array) => void,
  ) => IbEndpointBinding;
  /** ioctl(SIOCOUTQ): bytes in a TCP socket's send queue not yet acknowledged by the peer. */
  tcpOutq(fd: number): number;
  /** SO_KEEPALIVE with TCP_KEEPIDLE / TCP_KEEPINTVL / TCP_KEEPCNT (seconds, seconds, probes). */
  tcpKeepalive(fd: number, idle: number, interval: number, probes: number): void;
  /** getsockopt(SO_PEERCRED) of a connected Unix socket (absent from prebuilds older than the host node's). */
  peerCred?(fd: number): { pid: number; uid: number; gid: number };
  /** setsockopt(SO_SNDBUF); returns the size the kernel then reports (twice what it granted). */
  setSendBuffer?(fd: number, bytes: number): number;
}

let cached: NativeBinding | null | undefined;
let loadError: Error | null = null;

/**
 * The addon, loaded on first use from prebuilds/ (committed, so installing needs no compiler).
 * Returns null where it cannot load (another platform); callers fall back and say so.
 */
export function native(): NativeBinding | null {
  if (cached !== undefined) return cached;
  try {
    const require = createRequire(import.meta.url);
    const load = require('node-gyp-build') as (dir: string) => NativeBinding;
    cached = load(fileURLToPath(new URL('..', import.meta.url)));
  } catch (e) {
    loadError = e as Error;
    cached = null;
    warnWeaker(loadError);
  }
  return cached;
}

/**
 * Says once per process, when the addon is first needed and cannot load, which guarantees are
 * weaker without it (docs/reliability.md), so a deployment on an unsupported platform knows.
 */
function warnWeaker(err: Error): void {
  process.emitWarning(
    `rds-socket's native addon did not load on ${process.platform}-${process.arch} (${err.message.split('\n')[0]}). ` +
      'Messages to Linux kernel peers now leave the retransmit queue once handed to the local TCP, not once TCP ' +
      'acknowledged them (bytes in the local TCP buffer are lost with a reset connection); TCP keepalive uses ' +
      "Node's probe timings; InfiniBand is unavailable. Between rds-socket nodes delivery is unaffected (RDS acknowledgements).",
    { type: 'RdsNativeWarning', code: 'RDS_SOCKET_NO_NATIVE' },
  );
}

export function nativeLoadError(): Error | null {
  native();
  return loadError;
}
