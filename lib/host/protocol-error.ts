// The host protocol's one error type: what a malformed or out-of-order frame, or a limit passed,
// throws on either side of the control socket; the connection is dropped and counted.
import { RdsProtocolError } from '../wire/frame-reader.js';

/** The other side broke the attach protocol: that connection is dropped (one type with the wire's, and its code). */
export class ProtocolError extends RdsProtocolError {
  readonly code = 'EPROTO';
  constructor(message: string) {
    super(message);
    this.name = 'ProtocolError';
  }
}
