// sendmsg()'s argument checks, made once for every kind of socket (rds_sendmsg's order): flags
// and the zero-copy cookie, the data, the destination, the bound address, RDMA control messages,
// the address family and the sizes. What passes is a CheckedSend for the socket's backend.
import { isIPv4 } from 'node:net';
import { RDS_MAX_MSG_SIZE } from '../constants.js';
import { RdsError } from '../errors.js';
import { checkedAddress, parseEndpoint, validatePort, type RdsAddress } from './address.js';
import { checkSendLink, socketZone } from './scope.js';
import { checkAtomicArgs, refuseMaskedAtomic, refuseRdmaControl } from './rdma.js';
import { zeroCopyRequested } from './send-flags.js';
import type { CheckedSend, SocketBackend } from './socket-backend.js';
import type { RdsData, SendmsgOptions } from './socket-types.js';

/** The checks of one socket, with what they remember between calls. @internal */
export class SendChecks {
  /** The last destination address exactly as the caller gave it, and its canonical form. */
  private lastDestGiven: string | null = null;
  private lastDestCanon = '';
  private lastDestZone: string | null = null;
  /** An address already known to be of the bound address's family. */
  private sameFamilyAs = '';
  /**
   * The zone the socket holds (socketZone: the kernel's rs_bound_scope_id), derived when bind()
   * set the bound address or connect() the peer (each a new object) and kept: a send compares two
   * references instead of scanning both addresses for a zone.
   */
  private zone: string | null = null;
  private zoneBound: RdsAddress | null = null;
  private zonePeer: RdsAddress | null = null;
  /** Reused for every send (see CheckedSend). */
  private readonly out: CheckedSend = {
    payload: EMPTY,
    len: 0,
    address: '',
    port: 0,
    flags: 0,
    zcopy: false,
    zcopyCookie: undefined,
    rdma: null,
    confirm: false,
    tos: 0,
    wire: null,
  };

  constructor(private readonly backend: SocketBackend) {}

  /** The message as the backend takes it; throws what sendmsg(2) would. `peer`: connect()'s destination. */
  check(
    data: RdsData,
    dest: { address: string; port: number } | undefined | null,
    opts: SendmsgOptions | undefined | null,
    peer: RdsAddress | null,
    binding: boolean,
    confirm: boolean,
  ): CheckedSend {
    const b = this.backend;
    const hasOpts = opts !== undefined && opts !== null;
    // Masked atomics are answered before anything else: rds-socket never offers them.
    if (hasOpts && opts.atomic !== undefined) refuseMaskedAtomic(opts.atomic);
    const zcopy = hasOpts ? zeroCopyRequested(opts, b.options.zerocopy, b.nonTcpTransport) : false;
    const out = this.out;
    if (data instanceof Uint8Array) {
      out.payload = data;
      out.len = data.length;
    } else {
      // Zero-copy keeps the caller's buffers but not their array: like the kernel's copy of the
      // iovec, a copy made now, so reusing the array after the call cannot change the message.
      const parts = gather(data, out);
      out.payload = parts.length === 1 ? parts[0]! : zcopy ? parts.slice() : parts;
    }
    let address: string | null = null;
    let port = 0;
    if (dest !== undefined && dest !== null) {
      address = this.destinationAddress(dest, this.heldZone(b.bound, peer));
      port = validatePort((dest as { port?: unknown }).port, 'destination');
    }
    const bound = b.bound;
    if (bound === null) {
      // ENOTCONN, as for a socket never bound (the kernel's rds_sendmsg answer to an unbound
      // socket): until bind() resolves the socket has no address to send from.
      if (binding) throw new RdsError('ENOTCONN', 'bind() has not finished; await it before sending');
      throw new RdsError('ENOTCONN', 'socket is not bound; call bind() before sending (RDS has no auto-bind)');
    }
    out.rdma = null;
    if (
      hasOpts &&
      (opts.rdma !== undefined ||
        opts.rdmaDest !== undefined ||
        opts.atomic !== undefined ||
        opts.rdmaMap !== undefined)
    ) {
      if (!b.rdmaCapable) {
        if (
          opts.atomic !== undefined &&
          opts.rdma === undefined &&
          opts.rdmaDest === undefined &&
          opts.rdmaMap === undefined
        ) {
          checkAtomicArgs(opts.atomic);
          throw b.rdmaRefusal('sendmsg() with atomic (RDS_CMSG_ATOMIC_*)');
        }
        refuseRdmaControl(opts, (what) => b.rdmaRefusal(what));
      }
      out.rdma = b.rdmaControl(opts, bound.address);
    }
    if (address === null) {
      if (peer === null)
        throw new RdsError('ENOTCONN', 'no destination; pass { address, port } or call connect() first');
      ({ address, port } = peer);
    }
    if (address !== this.sameFamilyAs) {
      if (isIPv4(address) !== isIPv4(bound.address))
        throw new RdsError('EOPNOTSUPP', `cannot send from ${bound.address} to ${address}: address families differ`);
      checkSendLink(address, this.heldZone(bound, peer));
    }
    this.sameFamilyAs = address;
    const len = out.len;
    if (len > RDS_MAX_MSG_SIZE)
      throw new RdsError('EMSGSIZE', `message of ${len} bytes exceeds RDS_MAX_MSG_SIZE (${RDS_MAX_MSG_SIZE})`);
    const sndbuf = b.options.sndbuf;
    if (len > sndbuf)
      throw new RdsError(
        'EMSGSIZE',
        `message of ${len} bytes exceeds the send buffer (${sndbuf} bytes); raise SO_SNDBUF`,
      );
    out.address = address;
    out.port = port;
    out.flags = hasOpts ? (opts.flags ?? 0) : 0;
    out.zcopy = zcopy;
    out.zcopyCookie = zcopy ? opts!.zcopyCookie : undefined;
    out.confirm = confirm;
    return out;
  }

  /** The socket's zone for this bound address and peer (see `zone`). */
  private heldZone(bound: RdsAddress | null, peer: RdsAddress | null): string | null {
    if (bound !== this.zoneBound || peer !== this.zonePeer) {
      this.zone = socketZone(bound?.address, peer?.address);
      this.zoneBound = bound;
      this.zonePeer = peer;
    }
    return this.zone;
  }

  /**
   * The canonical form of a destination address, checked to be a unicast address. Senders repeat
   * the same destination: the last one given is remembered exactly as given, so the common case
   * is one string comparison.
   */
  private destinationAddress(dest: unknown, zone: string | null): string {
    const given = typeof dest === 'object' ? (dest as { address?: unknown }).address : undefined;
    if (given === this.lastDestGiven && this.lastDestGiven !== null && zone === this.lastDestZone)
      return this.lastDestCanon;
    const to = parseEndpoint(dest, 'destination', zone);
    const why = checkedAddress(to.address).nonUnicast;
    if (why !== null) throw new RdsError('EINVAL', `cannot send to ${to.address}: it ${why}`);
    this.lastDestGiven = given as string;
    // With the zone the socket lent (or not): a link-local address without one takes it.
    this.lastDestZone = zone;
    this.lastDestCanon = to.address;
    return to.address;
  }
}

const EMPTY = new Uint8Array(0);
/** The parts of an array of buffers, checked; their total length goes to `out.len`. */
function gather(data: RdsData, out: CheckedSend): readonly Uint8Array[] {
  if (Array.isArray(data)) {
    let len = 0;
    for (const p of data) {
      if (!(p instanceof Uint8Array))
        throw new RdsError('EINVAL', 'every element of a data array must be a Buffer or Uint8Array');
      len += p.length;
    }
    out.len = len;
    return data as Uint8Array[];
  }
  throw new RdsError('EINVAL', 'data must be a Buffer, a Uint8Array or an array of them');
}
