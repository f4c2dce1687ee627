/**
 * The wire formats of rds-tools' rds-stress (2.0.7), written from the protocol description in
 * the project's reference material: the options struct that crosses the TCP control connection
 * and the 63-byte header every RDS message of a run starts with. Pure encoding and checking, so
 * the command (rds-stress.ts) and its tests share one definition.
 */
import { isIPv4 } from 'node:net';

/** The version string a full options struct starts with; the passive compares it with its own. */
export const STRESS_VERSION = '2.0.7';
/** The legacy struct (options_2_0_6): what the active sends unless -Q or --async is given. */
export const OPTIONS_LEGACY_BYTES = 59;
/** version[16] + the legacy struct + tos + async. */
export const OPTIONS_FULL_BYTES = 77;
const VERSION_BYTES = 16;
/** Every message starts with this header; it is also the smallest message. */
export const STRESS_HEADER_BYTES = 63;
/** seq, from_addr, to_addr, from_port, to_port, index, op: the part a receiver compares. */
export const BASIC_HEADER_BYTES = 19;
export const OP_REQ = 1;
export const OP_ACK = 2;

export interface StressOptions {
  reqDepth: number;
  reqSize: number;
  ackSize: number;
  rdmaSize: number;
  /** IPv4 the sender of these options sends to, and its own address. */
  sendAddr: string;
  receiveAddr: string;
  startingPort: number;
  nrTasks: number;
  /** Seconds; 0 = until interrupted. */
  runTime: number;
  summaryOnly: number;
  rtprio: number;
  tracing: number;
  verify: number;
  showParams: number;
  showPerfdata: number;
  useCongMonitor: number;
  rdmaUseOnce: number;
  rdmaUseGetMr: number;
  rdmaUseFence: number;
  rdmaCacheMrs: number;
  rdmaKeyOMeter: number;
  suppressWarnings: number;
  simplex: number;
  rwMode: number;
  rdmaVector: number;
  rdmaAlignment: number;
  connectRetries: number;
  /** Only in the full (77-byte) form. */
  tos: number;
  async: number;
}

/** The options as rds-tools' main() sets them before parsing flags. */
export function defaultStressOptions(): StressOptions {
  return {
    reqDepth: 1,
    reqSize: 1024,
    ackSize: STRESS_HEADER_BYTES,
    rdmaSize: 0,
    sendAddr: '0.0.0.0',
    receiveAddr: '0.0.0.0',
    startingPort: 4000,
    nrTasks: 1,
    runTime: 0,
    summaryOnly: 0,
    rtprio: 0,
    tracing: 0,
    verify: 0,
    showParams: 0,
    showPerfdata: 0,
    useCongMonitor: 1,
    rdmaUseOnce: 0,
    rdmaUseGetMr: 0,
    rdmaUseFence: 1,
    rdmaCacheMrs: 0,
    rdmaKeyOMeter: 0,
    // main() never sets it, and the struct was filled with 0xff first: that is what crosses the wire.
    suppressWarnings: 0xff,
    simplex: 0,
    rwMode: 0,
    rdmaVector: 1,
    rdmaAlignment: 0,
    connectRetries: 0,
    tos: 0,
    async: 0,
  };
}

/** The single-byte fields at offsets 32..46, in wire order. */
const FLAG_FIELDS = [
  'summaryOnly',
  'rtprio',
  'tracing',
  'verify',
  'showParams',
  'showPerfdata',
  'useCongMonitor',
  'rdmaUseOnce',
  'rdmaUseGetMr',
  'rdmaUseFence',
  'rdmaCacheMrs',
  'rdmaKeyOMeter',
  'suppressWarnings',
  'simplex',
  'rwMode',
] as const satisfies readonly (keyof StressOptions)[];

function ipv4ToU32(a: string): number {
  if (!isIPv4(a)) throw new Error(`rds-stress carries IPv4 addresses only, got ${a}`);
  return a.split('.').reduce((acc, o) => acc * 256 + Number(o), 0) >>> 0;
}

function u32ToIpv4(v: number): string {
  return [v >>> 24, (v >>> 16) & 0xff, (v >>> 8) & 0xff, v & 0xff].join('.');
}

/** The options as the active sends them: the legacy 59 bytes, or the full 77 with -Q / --async. */
export function encodeStressOptions(o: StressOptions, full: boolean): Buffer {
  const b = Buffer.alloc(full ? OPTIONS_FULL_BYTES : OPTIONS_LEGACY_BYTES, 0xff);
  let off = 0;
  if (full) {
    b.fill(0, 0, VERSION_BYTES);
    b.write(STRESS_VERSION, 0, 'latin1');
    // The rest of the version field keeps the 0xff of the memset, past the string's NUL.
    b.fill(0xff, STRESS_VERSION.length + 1, VERSION_BYTES);
    off = VERSION_BYTES;
  }
  b.writeUInt32BE(o.reqDepth, off);
  b.writeUInt32BE(o.reqSize, off + 4);
  b.writeUInt32BE(o.ackSize, off + 8);
  b.writeUInt32BE(o.rdmaSize, off + 12);
  b.writeUInt32BE(ipv4ToU32(o.sendAddr), off + 16);
  b.writeUInt32BE(ipv4ToU32(o.receiveAddr), off + 20);
  b.writeUInt16BE(o.startingPort, off + 24);
  b.writeUInt16BE(o.nrTasks, off + 26);
  b.writeUInt32BE(o.runTime, off + 28);
  FLAG_FIELDS.forEach((f, i) => b.writeUInt8(o[f] & 0xff, off + 32 + i));
  b.writeUInt32BE(o.rdmaVector, off + 47);
  b.writeUInt32BE(o.rdmaAlignment, off + 51);
  b.writeUInt32BE(o.connectRetries, off + 55);
  if (full) {
    b.writeUInt8(o.tos & 0xff, off + 59);
    b.writeUInt8(o.async & 0xff, off + 60);
  }
  return b;
}

/**
 * How many bytes the options struct takes, judged as the passive does from its first 16: the full
 * form if they hold our version string (compared as C strings, up to the NUL), else the legacy one.
 * null until 16 bytes are there.
 */
export function stressOptionsLength(first: Buffer): number | null {
  if (first.length < VERSION_BYTES) return null;
  const nul = first.indexOf(0);
  const str = first.subarray(0, nul >= 0 && nul < VERSION_BYTES ? nul : VERSION_BYTES).toString('latin1');
  return nul >= 0 && nul < VERSION_BYTES && str === STRESS_VERSION ? OPTIONS_FULL_BYTES : OPTIONS_LEGACY_BYTES;
}

export function decodeStressOptions(b: Buffer): { options: StressOptions; full: boolean } {
  const full = b.length === OPTIONS_FULL_BYTES;
  if (!full && b.length !== OPTIONS_LEGACY_BYTES)
    throw new Error(`an options struct is ${OPTIONS_LEGACY_BYTES} or ${OPTIONS_FULL_BYTES} bytes, got ${b.length}`);
  const off = full ? VERSION_BYTES : 0;
  const o = defaultStressOptions();
  o.reqDepth = b.readUInt32BE(off);
  o.reqSize = b.readUInt32BE(off + 4);
  o.ackSize = b.readUInt32BE(off + 8);
  o.rdmaSize = b.readUInt32BE(off + 12);
  o.sendAddr = u32ToIpv4(b.readUInt32BE(off + 16));
  o.receiveAddr = u32ToIpv4(b.readUInt32BE(off + 20));
  o.startingPort = b.readUInt16BE(off + 24);
  o.nrTasks = b.readUInt16BE(off + 26);
  o.runTime = b.readUInt32BE(off + 28);
  FLAG_FIELDS.forEach((f, i) => (o[f] = b.readUInt8(off + 32 + i)));
  o.rdmaVector = b.readUInt32BE(off + 47);
  o.rdmaAlignment = b.readUInt32BE(off + 51);
  o.connectRetries = b.readUInt32BE(off + 55);
  if (full) {
    o.tos = b.readUInt8(off + 59);
    o.async = b.readUInt8(off + 60);
  }
  return { options: o, full };
}

/** Bounds on what a peer may ask of us (rds-tools trusts every value; we do not). */
export const STRESS_LIMITS = {
  maxTasks: 256,
  maxDepth: 4096,
  maxMessage: 1 << 20,
  /** -D x -I: one op moves at most RDS_MAX_MSG_SIZE. */
  maxRdmaOp: 1 << 20,
  /** -I: rds-tools' own limit. */
  maxRdmaVector: 512,
  /** Every RDMA buffer of a run (tasks^2 x depth x 2 x op size): the memory a peer can make us hold. */
  maxRdmaBytes: 256 << 20,
} as const;

/** Why these options cannot be run, or null: the passive's check of what the active sent. */
export function stressOptionsProblem(o: StressOptions): string | null {
  if (o.nrTasks < 1 || o.nrTasks > STRESS_LIMITS.maxTasks)
    return `nr_tasks ${o.nrTasks} is outside 1..${STRESS_LIMITS.maxTasks}`;
  if (o.reqDepth < 1 || o.reqDepth > STRESS_LIMITS.maxDepth)
    return `req_depth ${o.reqDepth} is outside 1..${STRESS_LIMITS.maxDepth}`;
  for (const [name, v] of [
    ['req_size', o.reqSize],
    ['ack_size', o.ackSize],
  ] as const) {
    if (v < STRESS_HEADER_BYTES || v > STRESS_LIMITS.maxMessage)
      return `${name} ${v} is outside ${STRESS_HEADER_BYTES}..${STRESS_LIMITS.maxMessage}`;
  }
  if (o.rdmaSize !== 0) {
    if (o.rdmaVector < 1 || o.rdmaVector > STRESS_LIMITS.maxRdmaVector)
      return `rdma_vector ${o.rdmaVector} is outside 1..${STRESS_LIMITS.maxRdmaVector}`;
    const op = o.rdmaSize * o.rdmaVector;
    if (op > STRESS_LIMITS.maxRdmaOp)
      return `an RDMA op of ${o.rdmaSize} x ${o.rdmaVector} bytes is more than ${STRESS_LIMITS.maxRdmaOp} (RDS_MAX_MSG_SIZE)`;
    if (o.rwMode > 2) return `rw_mode ${o.rwMode} is not 0, 1 or 2`;
    const all = o.nrTasks * o.nrTasks * o.reqDepth * 2 * op;
    if (all > STRESS_LIMITS.maxRdmaBytes)
      return `the RDMA buffers (tasks^2 x depth x 2 x ${op} = ${all} bytes) would be more than ${STRESS_LIMITS.maxRdmaBytes}`;
  }
  if (o.startingPort + o.nrTasks > 65535)
    return `ports ${o.startingPort + 1}..${o.startingPort + o.nrTasks} do not fit`;
  return null;
}

/** The header fields a receiver checks. Addresses are dotted IPv4, ports host numbers. */
export interface StressHeader {
  seq: number;
  fromAddr: string;
  toAddr: string;
  fromPort: number;
  toPort: number;
  index: number;
  op: number;
}

/** Writes the 63-byte header at the start of `msg` (RDMA fields and the rest zero). */
export function encodeStressHeader(msg: Buffer, h: StressHeader): void {
  msg.fill(0, 0, STRESS_HEADER_BYTES);
  msg.writeUInt32BE(h.seq >>> 0, 0);
  msg.writeUInt32BE(ipv4ToU32(h.fromAddr), 4);
  msg.writeUInt32BE(ipv4ToU32(h.toAddr), 8);
  msg.writeUInt16BE(h.fromPort, 12);
  msg.writeUInt16BE(h.toPort, 14);
  msg.writeUInt16BE(h.index, 16);
  msg.writeUInt8(h.op, 18);
}

export function decodeStressHeader(msg: Buffer): StressHeader {
  return {
    seq: msg.readUInt32BE(0),
    fromAddr: u32ToIpv4(msg.readUInt32BE(4)),
    toAddr: u32ToIpv4(msg.readUInt32BE(8)),
    fromPort: msg.readUInt16BE(12),
    toPort: msg.readUInt16BE(14),
    index: msg.readUInt16BE(16),
    op: msg.readUInt8(18),
  };
}

/**
 * The verify pattern for the bytes after the header: k starts at 11, byte i is k's low byte, and
 * k = 41 * (k + 3) + (i >> 8) for the next one (the added term shifts every 256-byte block, so
 * swapped blocks show).
 */
export function stressPattern(size: number): Buffer {
  const p = Buffer.allocUnsafe(size);
  let k = 11;
  for (let i = 0; i < size; ) {
    p[i] = k & 0xff;
    i++;
    k = (Math.imul(41, (k + 3) >>> 0) + (i >>> 8)) >>> 0;
  }
  return p;
}

/**
 * Compares a received message with what the receiver expected. Returns null if it matches, else
 * the report rds-tools prints (an expected / got table, or the corrupted-payload line).
 */
export function stressMismatch(msg: Buffer, expected: StressHeader, pattern: Buffer | null): string | null {
  const got = decodeStressHeader(msg);
  const rows: [string, string | number, string | number][] = [
    ['seq', expected.seq, got.seq],
    ['from_addr', expected.fromAddr, got.fromAddr],
    ['from_port', expected.fromPort, got.fromPort],
    ['to_addr', expected.toAddr, got.toAddr],
    ['to_port', expected.toPort, got.toPort],
    ['index', expected.index, got.index],
    ['op', expected.op, got.op],
  ];
  if (rows.some(([, e, g]) => e !== g)) {
    return (
      "An incoming message had a header which\ndidn't contain the fields we expected:\n" +
      '    member        expected eq             got\n' +
      rows
        .map(
          ([n, e, g]) =>
            `${n.padStart(10)} ${String(e).padStart(15)} ${e === g ? ' =' : '!='} ${String(g).padStart(15)}`,
        )
        .join('\n')
    );
  }
  if (pattern !== null) {
    const body = msg.subarray(STRESS_HEADER_BYTES);
    if (body.compare(pattern, 0, body.length) !== 0) {
      let first = -1;
      let count = 0;
      for (let i = 0; i < body.length; i++) {
        if (body[i] !== pattern[i]) {
          if (first < 0) first = i;
          count++;
        }
      }
      return `An incoming message has a corrupted payload at offset ${first}; ${count} out of ${body.length} bytes corrupted`;
    }
  }
  return null;
}
