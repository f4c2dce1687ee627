// What the node checks of a SEND frame whose data is the message in the RDS wire format (protocol
// 4, F_WIRE): the client wrote the data header, the node puts those bytes on the wire, so a header
// that is not exactly what the node itself would have written drops the client (a ProtocolError,
// counted as malformed) before a byte of it can reach a peer.
import { RDS_HEADER_SIZE } from '../constants.js';
import { OFF_DPORT, OFF_FLAGS, OFF_LEN, OFF_SPORT } from '../wire/header.js';
import { ProtocolError } from './protocol.js';

/**
 * Checks the header at the start of `data`: its length field is the payload that follows, its
 * destination port is the frame's `port`, its source port the socket's bound port (`boundPort`,
 * null while unbound: then the real socket refuses the send, as for any unbound socket), and
 * every field the node sets (sequence, ack, flags, credit, checksum, extensions) is zero.
 * Returns the payload, a view of `data` after the header.
 */
export function checkWireHeader(data: Buffer, port: number, boundPort: number | null): Buffer {
  if (data.length < RDS_HEADER_SIZE)
    throw new ProtocolError(`SEND data of ${data.length} bytes is shorter than an RDS header`);
  const len = data.readUInt32BE(OFF_LEN);
  if (len !== data.length - RDS_HEADER_SIZE)
    throw new ProtocolError(`SEND header length ${len} is not its payload's ${data.length - RDS_HEADER_SIZE} bytes`);
  const dport = data.readUInt16BE(OFF_DPORT);
  if (dport !== port) throw new ProtocolError(`SEND header destination port ${dport} is not the frame's ${port}`);
  const sport = data.readUInt16BE(OFF_SPORT);
  if (boundPort !== null && sport !== boundPort)
    throw new ProtocolError(`SEND header source port ${sport} is not the socket's bound port ${boundPort}`);
  // Sequence and ack (bytes 0-15), then flags through the extension area (24-47): all the node's.
  let nz = 0;
  for (let i = 0; i < OFF_LEN; i++) nz |= data[i]!;
  for (let i = OFF_FLAGS; i < RDS_HEADER_SIZE; i++) nz |= data[i]!;
  if (nz !== 0)
    throw new ProtocolError(
      'SEND header sets fields only the node may set (sequence, ack, flags, checksum, extensions)',
    );
  return data.subarray(RDS_HEADER_SIZE);
}
