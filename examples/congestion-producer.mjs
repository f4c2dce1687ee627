// A producer that respects congestion. sendmsg() never blocks: it throws EAGAIN when this socket's
// send budget (SO_SNDBUF) is full and ENOBUFS when the destination port is congested (its receiver
// has more than SO_RCVBUF unread). This producer waits for 'writable' on EAGAIN, and on ENOBUFS
// waits for the congestion notification RDS_CONG_MONITOR delivers once the port clears (a message
// with empty data and `congestionUpdate` set), instead of spinning or queueing without bound.
// The consumer (another node, 127.60.6.1, SO_RCVBUF 16 KiB) reads nothing until the producer has
// met ENOBUFS, then reads everything.
//   node examples/congestion-producer.mjs
// Needs `npm run build` first in a checkout. Prints what the producer met and "congestion: ... OK".
import { RdsSocket, RdsStack, constants } from 'rds-socket';

const MESSAGES = 3000;
const consumerNode = new RdsStack();
const consumer = new RdsSocket({ stack: consumerNode });
await consumer.bind({ address: '127.60.6.1', port: 6000 });
consumer.setsockopt(constants.SOL_SOCKET, constants.SO_RCVBUF, 16384);

const producerNode = new RdsStack();
const producer = new RdsSocket({ stack: producerNode });
await producer.bind({ address: '127.60.6.2', port: 6000 });
producer.setsockopt(constants.SOL_SOCKET, constants.SO_SNDBUF, 4 << 20);
producer.setsockopt(constants.SOL_RDS, constants.RDS_CONG_MONITOR, 1);

let metCongestion;
const congested = new Promise((resolve) => (metCongestion = resolve));
const seen = { ENOBUFS: 0, EAGAIN: 0 };

async function produce() {
  const dest = consumer.address();
  const payload = Buffer.alloc(1024);
  for (let n = 0; n < MESSAGES; ) {
    payload.writeUInt32BE(n, 0);
    try {
      producer.sendmsg(payload, dest);
      n++;
      if (n % 32 === 0) await new Promise((r) => setImmediate(r)); // let replies and maps in
    } catch (e) {
      if (e.code === 'EAGAIN') {
        seen.EAGAIN++;
        await new Promise((resolve) => producer.once('writable', () => resolve(undefined))); // the peer acknowledged enough
      } else if (e.code === 'ENOBUFS') {
        seen.ENOBUFS++;
        metCongestion();
        // The notification: a message with no data whose congestionUpdate has the port's bit.
        const bit = 1n << BigInt(dest.port % 64);
        for (;;) {
          const note = await producer.recv({ timeout: 30000 });
          if (note.congestionUpdate !== undefined && (note.congestionUpdate & bit) !== 0n) break;
        }
      } else throw e;
    }
  }
  metCongestion(); // (never met: the consumer starts anyway, and the last line says FAILED)
}

async function consume() {
  await congested; // a slow consumer: nothing read until the producer met congestion
  let expect = 0;
  for await (const m of consumer) {
    if (m.data.readUInt32BE(0) !== expect) throw new Error(`got ${m.data.readUInt32BE(0)}, expected ${expect}`);
    if (++expect === MESSAGES) break;
  }
  return expect;
}

const [, got] = await Promise.all([produce(), consume()]);
console.log(`producer: met ENOBUFS ${seen.ENOBUFS > 0 ? 'yes' : 'no'}, waited for the port to clear each time`);
console.log(`consumer: ${got} of ${MESSAGES} messages, in order`);
console.log(`congestion: ${got === MESSAGES && seen.ENOBUFS > 0 ? 'OK' : 'FAILED'}`);
await Promise.all([producerNode.close(), consumerNode.close()]);
