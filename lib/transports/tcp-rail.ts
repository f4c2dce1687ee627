import { connect, type Socket } from 'node:net';
import { RDS_HEADER_SIZE } from '../constants.js';
import type { TransportPath } from '../core/transport-path.js';
import type { RailSpec } from '../core/ext/rail.js';
import { RDS_CTR } from '../core/stats.js';
import { FrameReader } from '../wire/frame-reader.js';
import { RAIL_HELLO_MAX_PAYLOAD, railHelloPayloadLength } from '../wire/rail-hello.js';
import type { AdmissionSlot, TcpAdmission } from './tcp-admission.js';
import { tcpPath, type TcpShared } from './tcp-carrier.js';
import { refuse } from './tcp-socket.js';
import type { TcpReceiver } from './tcp-recv.js';
import { replaceCarrier, stillUsable } from './tcp-replace.js';

/** How long a refused rail's connection stays open for its answer to reach the dialler. */
const REFUSE_LINGER_MS = 1000;

/**
 * Rail carriers over TCP (issue #25): a rail path's connection goes from the rail's local address
 * to its remote one, on the RDS/TCP port. Before it carries RDS traffic, the dialling node sends
 * the rail hello and the accepting node answers (rail.ts checks both and picks the path); only
 * then does the path come UP on either side. Plain TCP only: a TLS stack refuses rails at addRail()
 * (TcpTransport.railsRefusal), so the tls check in connect() below is a guard that never fires.
 */
export class TcpRails {
  constructor(
    private readonly ctx: TcpShared,
    private readonly admission: TcpAdmission,
    private readonly receiver: TcpReceiver,
  ) {}

  /** connPathConnect for a rail path: dial, send the hello, come UP on an accepting answer. */
  connect(cp: TransportPath, rail: RailSpec): void {
    const host = this.ctx.host;
    if (this.ctx.topts.tls) {
      host.counters.add(RDS_CTR.rail_refused);
      cp.connectFailed();
      return;
    }
    const port = host.options.tcpPort;
    const target = this.ctx.topts.dial?.(rail.local, rail.remote, port) ?? { host: rail.remote, port };
    const sock = connect({ ...target, localAddress: rail.local });
    sock.setNoDelay(true);
    this.ctx.track(sock);
    const tp = tcpPath(cp);
    let state: 'hello' | 'up' | 'refused' = 'hello';
    const reader = new FrameReader((h, p) => {
      if (state === 'up') {
        host.recvIncoming(cp, h, p);
        return;
      }
      if (state === 'refused' || !tp.slot.is(sock)) return;
      if (host.rails.answerReceived(cp, h, p) !== null) {
        state = 'refused';
        sock.destroy(); // the close makes the attempt fail (backoff, maxReconnectAttempts)
        return;
      }
      state = 'up';
      clearTimeout(timer);
      cp.connectComplete();
    });
    this.receiver.attachCarrier(cp, sock, reader, false);
    sock.once('connect', () => {
      if (tp.slot.is(sock)) sock.write(host.rails.helloFor(cp));
    });
    // A node that never answers (a kernel, which drops the hello as an old frame) fails the attempt.
    const timer = setTimeout(() => {
      if (state === 'hello' && tp.slot.is(sock)) sock.destroy();
    }, host.options.headerTimeoutMs);
    timer.unref();
    sock.once('close', () => clearTimeout(timer));
  }

  /**
   * An admitted connection to a rail's local address from its remote one: read the hello (one
   * frame, nothing after it: the dialler waits for our answer), answer, and make it the carrier
   * of the rail path the hello names, or refuse it.
   */
  accept(raw: Socket, local: string, remote: string, slot: AdmissionSlot): void {
    const host = this.ctx.host;
    let buf: Buffer = Buffer.alloc(0);
    let done = false;
    const finish = (frame: Buffer | null): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      raw.off('data', onData);
      raw.pause();
      if (frame === null) {
        // Silent, oversized or not a single frame: not a rail hello.
        host.counters.add(RDS_CTR.rail_refused);
        this.admission.freeSlot(slot);
        refuse(raw);
        return;
      }
      const r = host.rails.helloReceived(
        this.ctx.transport,
        local,
        remote,
        frame.subarray(0, RDS_HEADER_SIZE),
        frame.subarray(RDS_HEADER_SIZE),
      );
      if (r.cp === null) {
        this.admission.freeSlot(slot);
        if (r.answer === null) {
          refuse(raw);
          return;
        }
        raw.end(r.answer);
        setTimeout(() => raw.destroy(), REFUSE_LINGER_MS).unref();
        return;
      }
      const cp = r.cp;
      raw.write(r.answer);
      this.admission.identifySlot(slot);
      // The dialler gave up the previous connection (its FIN may be late): the newest wins, once
      // the old one has been read to its end (tcp-replace.ts); this one waits paused until then.
      replaceCarrier(this.ctx, cp, () => {
        if (!stillUsable(this.ctx, raw)) {
          this.admission.freeSlot(slot);
          refuse(raw);
          return;
        }
        const reader = new FrameReader((h, p) => host.recvIncoming(cp, h, p));
        this.receiver.attachCarrier(cp, raw, reader, false, slot);
        if (!cp.readPaused) raw.resume();
        cp.connectComplete();
      });
    };
    const onData = (chunk: Buffer): void => {
      buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
      if (buf.length < RDS_HEADER_SIZE) return;
      const len = railHelloPayloadLength(buf);
      if (len > RAIL_HELLO_MAX_PAYLOAD || buf.length > RDS_HEADER_SIZE + len) {
        finish(null);
        return;
      }
      if (buf.length === RDS_HEADER_SIZE + len) finish(buf);
    };
    const timer = setTimeout(() => finish(null), host.options.headerTimeoutMs);
    timer.unref();
    raw.once('close', () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      this.admission.freeSlot(slot);
    });
    raw.on('data', onData);
    raw.resume();
  }
}
