import { RDS_CONN_UP, RDS_MPATH_WORKERS, RDSSOCK_CAP_RAILS } from '../../constants.js';
import { RdsError } from '../../errors.js';
import {
  decodeRailHello,
  encodeRailHello,
  RAIL_ACCEPT,
  RAIL_HELLO,
  RAIL_REFUSE,
  RAIL_REFUSED_BAD_INDEX,
  RAIL_REFUSED_DISABLED,
  RAIL_REFUSED_GENERATION,
  RAIL_REFUSED_HELD,
  RAIL_REFUSED_NOT_DECLARED,
  RAIL_REFUSED_OTHER_NODE,
  RAIL_REFUSED_VERSION,
  railRefusalText,
} from '../../wire/rail-hello.js';
import { canonicalAddress } from '../address.js';
import type { RdsConnection } from '../connection.js';
import type { RdsConnPath } from '../path.js';
import { corePath, type TransportPath } from '../transport-path.js';
import type { RdsStack } from '../stack.js';
import { RDS_CTR } from '../stats.js';
import type { RdsTransport } from '../transport.js';

/**
 * A rail: the peer `peer` (its RDS address, the connection's identity) is also reachable from our
 * address `local` to its address `remote`. Declared on both nodes (each from its own side).
 */
export interface RailSpec {
  peer: string;
  local: string;
  remote: string;
}

/** Path indexes 0..7 are the lanes (mprds); rails take 8..15, one path each. */
export const RAIL_FIRST_INDEX = RDS_MPATH_WORKERS;
export const RAIL_MAX = 8;

/** A rail slot of one connection: the path and the rail it currently serves. */
interface RailBinding {
  spec: RailSpec;
  /** False once the rail was removed: the path is retired (never connects) until reused. */
  live: boolean;
}

const bindings = new WeakMap<RdsConnPath, RailBinding>();

/** The rail a path serves, if it is a live rail path. */
export function railOf(cp: TransportPath): RailSpec | null {
  const b = bindings.get(corePath(cp));
  return b?.live ? b.spec : null;
}

/** A path in a rail slot (index 8 or more), live or retired. */
export function isRailSlot(cp: RdsConnPath): boolean {
  return cp.index >= RAIL_FIRST_INDEX;
}

/** The peer runs rails and we may use them with it: an rds-socket peer with acknowledgements on. */
export function peerRunsRails(conn: RdsConnection): boolean {
  return conn.transport.rails === true && (conn.handshake.caps & RDSSOCK_CAP_RAILS) !== 0 && conn.handshake.ackMode;
}

/** Rail paths of the connection that serve a declared rail. */
export function liveRailPaths(conn: RdsConnection): RdsConnPath[] {
  const out: RdsConnPath[] = [];
  for (let i = RAIL_FIRST_INDEX; i < conn.pathSlots; i++) {
    const p = conn.pathIf(i);
    if (p !== undefined && railOf(p) !== null) out.push(p);
  }
  return out;
}

/** Whether the connection has any rail slot (live or retired): the policies then keep per-socket order. */
export function hasRailSlots(conn: RdsConnection): boolean {
  return conn.pathSlots > RAIL_FIRST_INDEX;
}

/**
 * The paths failover moves messages between: the lanes in use and every rail slot (a retired
 * rail's sockets stay redirected to where its messages went).
 */
export function failoverPaths(conn: RdsConnection): RdsConnPath[] {
  // Paths not made yet have nothing to move or redirect (their holds: ConnFailover.unmade).
  const out: RdsConnPath[] = [];
  for (let i = 0; i < Math.max(1, conn.npaths); i++) pushMade(out, conn, i);
  for (let i = RAIL_FIRST_INDEX; i < conn.pathSlots; i++) pushMade(out, conn, i);
  return out;
}

function pushMade(out: RdsConnPath[], conn: RdsConnection, index: number): void {
  const p = conn.pathIf(index);
  if (p !== undefined) out.push(p);
}

/** More than one path can carry the connection's messages (lanes or rails): failover applies. */
export function multiPath(conn: RdsConnection): boolean {
  return conn.npaths > 1 || liveRailPaths(conn).length > 0;
}

/** A rail path may open its carrier: it serves a live rail, we dial, and the peer runs rails. */
export function railMayConnect(cp: RdsConnPath): boolean {
  return railOf(cp) !== null && cp.conn.transport.initiates(cp) && peerRunsRails(cp.conn);
}

function specKey(s: RailSpec): string {
  return `${s.peer}|${s.local}|${s.remote}`;
}

/** The rail path in slot `index` of `conn`, made if new. */
function slot(conn: RdsConnection, index: number): RdsConnPath {
  return conn.railSlot(index);
}

/** What a transport needs to open and accept rails (TransportHost.rails). */
export interface RailHost {
  /** Some rail is declared from our `local` to the peer's `remote`: an incoming connection there is a rail. */
  declared(local: string, remote: string): boolean;
  /** The hello the dialling side sends first on rail path `cp`'s new carrier. */
  helloFor(cp: TransportPath): Buffer;
  /**
   * The dialling side got the answer: null if the rail is accepted and both ends agree who they
   * are; otherwise why not (already counted and reported).
   */
  answerReceived(cp: TransportPath, header: Buffer, payload: Buffer): string | null;
  /**
   * The accepting side got a hello on a connection from `remote` to our `local`: the path it
   * becomes the carrier of and the answer to send, or the refusal to send before closing.
   */
  helloReceived(
    transport: RdsTransport,
    local: string,
    remote: string,
    header: Buffer,
    payload: Buffer,
  ): RailHelloAnswer;
}

/** A hello's outcome on the accepting side: the path it carries and the answer, or the refusal to send (null: none) before closing. */
export type RailHelloAnswer = { cp: TransportPath; answer: Buffer } | { cp: null; answer: Buffer | null };

/**
 * The stack's rails (the RTRS add_path / remove_path of issue #25): which are declared, the rail
 * hello each end sends and checks, and the rail slots of each connection. Rails are paths of the
 * connection to the peer's RDS address with their own sequence spaces and carriers over another
 * address pair; only rds-socket peers that advertise RDSSOCK_CAP_RAILS ever see one.
 */
export class StackRails implements RailHost {
  private readonly specs = new Map<string, RailSpec>();
  /**
   * Address pairs of removed rails: a connection there is still read as a rail (and refused in
   * its hello), never taken for an RDS connection between the rail's addresses.
   */
  private readonly removedPairs = new Set<string>();

  constructor(
    private readonly stack: RdsStack,
    private readonly conns: () => Iterable<RdsConnection>,
  ) {}

  /** Declared rails. */
  list(): RailSpec[] {
    return [...this.specs.values()].map((s) => ({ ...s }));
  }

  /** Checks a rail spec from user code and returns it with canonical addresses. */
  static check(spec: unknown): RailSpec {
    if (spec === null || typeof spec !== 'object')
      throw new RdsError('EINVAL', 'a rail is { peer, local, remote }: three IP addresses');
    const s = spec as Record<string, unknown>;
    const out: Record<string, string> = {};
    for (const k of ['peer', 'local', 'remote'] as const) {
      const c = typeof s[k] === 'string' ? canonicalAddress(s[k]) : null;
      if (c === null) throw new RdsError('EINVAL', `rail ${k} must be an IP address, got ${JSON.stringify(s[k])}`);
      out[k] = c;
    }
    if (out.local === out.remote)
      throw new RdsError('EINVAL', `a rail's local and remote addresses must differ (${out.local})`);
    if (out.remote === out.peer)
      throw new RdsError(
        'EINVAL',
        `a rail's remote address ${out.remote} is the peer's own address: that is the connection itself, not a rail`,
      );
    return out as unknown as RailSpec;
  }

  /** The transport that carries this stack's rails; EOPNOTSUPP, saying why, when none does. @internal */
  railTransport(): RdsTransport {
    const all = this.stack.transports.selectable();
    const t = all.find((x) => x.rails === true);
    if (t !== undefined) return t;
    const why = all.find((x) => x.railsRefusal !== undefined)?.railsRefusal;
    throw new RdsError(
      'EOPNOTSUPP',
      `cannot declare a rail: ${why ?? 'no transport of this stack carries rails (only TCP does)'}`,
    );
  }

  /** addRail: declares the rail, listens on its local address, and starts it on connections to the peer. */
  async add(spec: unknown): Promise<void> {
    const s = StackRails.check(spec);
    if (this.stack.closing) throw new RdsError('EBADF', 'the stack is closed');
    const key = specKey(s);
    if (this.specs.has(key))
      throw new RdsError('EEXIST', `rail ${s.local} -> ${s.remote} to ${s.peer} is already declared`);
    let n = 0;
    for (const o of this.specs.values()) if (o.peer === s.peer) n++;
    if (n >= RAIL_MAX) throw new RdsError('ENOSPC', `at most ${RAIL_MAX} rails per peer (${s.peer} has ${n})`);
    const t = this.railTransport();
    // The accepting end needs a listener on the rail's local address; the dialling end binds to it.
    await t.laddrCheck(s.local);
    if (this.specs.has(key)) return;
    this.specs.set(key, s);
    this.removedPairs.delete(`${s.local}|${s.remote}`);
    for (const c of this.conns()) if (c.faddr === s.peer && c.transport === t) this.start(c);
  }

  /**
   * removeRail: forgets the rail; its paths close, their messages move at once to a live path of
   * the connection (without loss or duplication), and they never reconnect. True if it was declared.
   */
  remove(spec: unknown): boolean {
    const s = StackRails.check(spec);
    const key = specKey(s);
    if (!this.specs.delete(key)) return false;
    this.removedPairs.add(`${s.local}|${s.remote}`);
    for (const c of this.conns()) {
      for (let i = RAIL_FIRST_INDEX; i < c.pathSlots; i++) {
        const cp = c.pathIf(i);
        const b = cp === undefined ? undefined : bindings.get(cp);
        if (b === undefined || !b.live || specKey(b.spec) !== key) continue;
        this.retire(cp!, b, 'rail removed');
      }
    }
    return true;
  }

  private retire(cp: RdsConnPath, b: RailBinding, reason: string): void {
    b.live = false;
    cp.control.disconnect(reason);
    // Its messages go now, not after the grace period: the rail is not coming back.
    cp.conn.failover.evacuate(cp);
    this.stack.counters.add(RDS_CTR.rail_removed);
  }

  /** The handshake on path 0 settled what the peer is: the dialling side opens declared rails. */
  settled(conn: RdsConnection): void {
    this.start(conn);
  }

  /** Binds every declared rail to the peer to a slot of `conn` (dialling side) and connects it. */
  private start(conn: RdsConnection): void {
    if (!conn.isInitiator || !peerRunsRails(conn) || conn.transport.rails !== true) return;
    for (const s of this.specs.values()) {
      if (s.peer !== conn.faddr) continue;
      const cp = this.bind(conn, s);
      if (cp !== null) cp.connectIfDown();
    }
  }

  /**
   * The slot rail `s` uses on `conn` (dialling side): the one it had, else the lowest free or
   * retired one (a slot keeps its sequence spaces, so the peer's view of it stays consistent).
   */
  private bind(conn: RdsConnection, s: RailSpec): RdsConnPath | null {
    const key = specKey(s);
    let free = -1;
    for (let i = RAIL_FIRST_INDEX; i < RAIL_FIRST_INDEX + RAIL_MAX; i++) {
      const cp = conn.pathIf(i);
      const b = cp === undefined ? undefined : bindings.get(cp);
      if (b !== undefined && specKey(b.spec) === key) {
        if (!b.live) {
          b.live = true;
          cp!.control.allowConnect();
        }
        return cp!;
      }
      if (free < 0 && (b === undefined || !b.live)) free = i;
    }
    if (free < 0) return null;
    const cp = slot(conn, free);
    bindings.set(cp, { spec: s, live: true });
    cp.control.allowConnect();
    return cp;
  }

  // ---- the rail hello (wire form in docs/extensions.md, "Rails") ----

  declared(local: string, remote: string): boolean {
    for (const s of this.specs.values()) if (s.local === local && s.remote === remote) return true;
    return this.removedPairs.has(`${local}|${remote}`);
  }

  helloFor(cp: TransportPath): Buffer {
    return encodeRailHello({
      kind: RAIL_HELLO,
      index: cp.index,
      reason: 0,
      src: cp.conn.laddr,
      dst: cp.conn.faddr,
      genNum: this.stack.genNum,
    });
  }

  answerReceived(view: TransportPath, header: Buffer, payload: Buffer): string | null {
    const cp = corePath(view);
    const conn = cp.conn;
    const a = decodeRailHello(header, payload);
    const spec = railOf(cp);
    let why: string | null = null;
    let by: 'local' | 'peer' = 'local';
    if (spec === null) why = 'the rail was removed while it connected';
    else if (a === null || (a.kind !== RAIL_ACCEPT && a.kind !== RAIL_REFUSE)) why = 'malformed rail answer';
    else if (a.kind === RAIL_REFUSE) {
      why = railRefusalText(a.reason);
      by = 'peer';
    } else if (a.index !== cp.index) why = railRefusalText(RAIL_REFUSED_BAD_INDEX);
    else if (a.src !== conn.faddr || a.dst !== conn.laddr)
      why = `${railRefusalText(RAIL_REFUSED_OTHER_NODE)} (${a.src}, expected ${conn.faddr})`;
    else if (conn.handshake.peerGenNum !== 0 && a.genNum !== conn.handshake.peerGenNum)
      why = railRefusalText(RAIL_REFUSED_GENERATION);
    if (why !== null) this.refused(conn.laddr, conn.faddr, spec?.local ?? '', spec?.remote ?? '', cp.index, why, by);
    return why;
  }

  // Typed by RailHost (its parameters are written once, there).
  readonly helloReceived: RailHost['helloReceived'] = (transport, local, remote, header, payload) => {
    const h = decodeRailHello(header, payload);
    if (h === null) {
      this.refused('', '', local, remote, -1, 'malformed rail hello', 'local');
      return { cp: null, answer: null };
    }
    const src = canonicalAddress(h.src);
    const dst = canonicalAddress(h.dst);
    const refuse = (reason: number): { cp: null; answer: Buffer } => {
      this.refused(dst ?? h.dst, src ?? h.src, local, remote, h.index, railRefusalText(reason), 'local');
      const answer = encodeRailHello({
        kind: RAIL_REFUSE,
        index: h.index,
        reason,
        src: dst ?? '',
        dst: src ?? '',
        genNum: this.stack.genNum,
      });
      return { cp: null, answer };
    };
    if (h.kind !== RAIL_HELLO) return refuse(RAIL_REFUSED_VERSION);
    if (src === null || dst === null) return refuse(RAIL_REFUSED_OTHER_NODE);
    if (!this.specs.has(specKey({ peer: src, local, remote }))) return refuse(RAIL_REFUSED_NOT_DECLARED);
    if (!this.stack.binds.hasAddress(dst)) return refuse(RAIL_REFUSED_OTHER_NODE);
    if (h.index < RAIL_FIRST_INDEX || h.index >= RAIL_FIRST_INDEX + RAIL_MAX) return refuse(RAIL_REFUSED_BAD_INDEX);
    if (!this.stack.options.rdsAcks) return refuse(RAIL_REFUSED_DISABLED);
    const conn = this.stack.connFor(dst, src, transport);
    // The dialler is the connection's initiator (the smaller RDS address) on both ends.
    if (conn.isInitiator) return refuse(RAIL_REFUSED_OTHER_NODE);
    if (conn.handshake.peerGenNum !== 0 && conn.handshake.peerGenNum !== h.genNum)
      return refuse(RAIL_REFUSED_GENERATION);
    const cp = slot(conn, h.index);
    const b = bindings.get(cp);
    if (b?.live && specKey(b.spec) === specKey({ peer: src, local, remote })) {
      // The same rail again (a reconnect): an operator's hold on it stands.
      if (cp.control.held) return refuse(RAIL_REFUSED_HELD);
    } else {
      bindings.set(cp, { spec: { peer: src, local, remote }, live: true });
      cp.control.allowConnect();
    }
    const answer = encodeRailHello({
      kind: RAIL_ACCEPT,
      index: h.index,
      reason: 0,
      src: dst,
      dst: src,
      genNum: this.stack.genNum,
    });
    return { cp, answer };
  };

  private refused(
    localAddress: string,
    peerAddress: string,
    local: string,
    remote: string,
    path: number,
    reason: string,
    by: 'local' | 'peer',
  ): void {
    this.stack.counters.add(RDS_CTR.rail_refused);
    this.stack.emit('rail-refused', { localAddress, peerAddress, local, remote, path, reason, by });
  }
}

/** A rail path's addresses for rds-info: the rail's, or the connection's for a lane. */
export function pathEndpoints(cp: RdsConnPath): { source: string; destination: string; rail: boolean } {
  const r = railOf(cp);
  if (r !== null) return { source: r.local, destination: r.remote, rail: true };
  const b = bindings.get(cp);
  if (b !== undefined) return { source: b.spec.local, destination: b.spec.remote, rail: true };
  return { source: cp.conn.laddr, destination: cp.conn.faddr, rail: false };
}

/** Rail paths that are UP. */
export function upRailPaths(conn: RdsConnection): RdsConnPath[] {
  return liveRailPaths(conn).filter((p) => p.state === RDS_CONN_UP);
}
