import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { RdsSocket, type RdsStack, constants } from '../lib/index.js';
import { CONFORMANCE_KINDS, counter, makePair, type Pair, TEST_TCP_PORT, timeout, until } from './helpers.js';

// Part of the conformance suite (run over the same socket kinds as conformance.test.ts; over IB
// by test/ib/run.sh): send({ confirm: true }) means the receiving application took the message,
// whatever carries it. Every test sends to b twice: from a (b's peer: another node, or the same
// stack over loopback) and from c, a socket of b's own stack (for attached kinds, two sockets of
// one host node, which the node carries over its loopback transport).
const HOLDER = fileURLToPath(new URL('./fixtures/attached-holder.mjs', import.meta.url));
const LAZY = fileURLToPath(new URL('./fixtures/lazy-receiver.mjs', import.meta.url));
const NET = 29;

/** A send's outcome as it settles: 'pending' until then, 'ok' or the error's code after. */
interface Watched {
  state: string;
  done: Promise<void>;
}

function watch(p: Promise<unknown>, events: string[], name: string): Watched {
  const w: Watched = { state: 'pending', done: Promise.resolve() };
  w.done = p.then(
    () => {
      w.state = 'ok';
      events.push(`confirmed ${name}`);
    },
    (e: { code?: string }) => {
      w.state = e.code ?? String(e);
      events.push(`rejected ${name}`);
    },
  );
  return w;
}

/**
 * Both senders' messages are acknowledged (flush), and a turn of the event loop has passed for
 * anything that acknowledgement settles: a confirmation taken from "acknowledged" or "handed to
 * the receiving socket" rather than "read" has resolved by now.
 */
async function acknowledged(...senders: RdsSocket[]): Promise<void> {
  for (const s of senders) await s.flush({ signal: timeout(20000) });
  await new Promise((r) => setImmediate(r));
}

/** A socket on b's side (b's stack, b's address, any port): co-located with b. */
async function colocated(p: Pair): Promise<RdsSocket> {
  const c = new RdsSocket({ stack: p.stackB });
  await c.bind({ address: p.b.address().address, port: 0 });
  return c;
}

const data = (s: string): Buffer => Buffer.from(s);

describe.each(CONFORMANCE_KINDS)('read confirmations over %s', (kind) => {
  let pair: Pair | null = null;
  let child: ChildProcess | null = null;
  let host = kind === 'tcp' ? 0 : kind === 'attached' ? 64 : kind === 'attached-process' ? 96 : 128;
  const open = async (): Promise<Pair> => (pair = await makePair(kind, NET, ++host));
  afterEach(async () => {
    if (child !== null && child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((r) => child!.once('exit', r));
      child.kill('SIGKILL');
      await gone;
    }
    child = null;
    await pair?.close();
    pair = null;
  });

  it('a confirmation resolves only once the receiving application has read the message', async () => {
    const p = await open();
    const { a, b } = p;
    const c = await colocated(p);
    const events: string[] = [];
    const fromA = watch(a.send(data('a'), b.address(), { confirm: true, signal: timeout(20000) }), events, 'a');
    const fromC = watch(c.send(data('c'), b.address(), { confirm: true, signal: timeout(20000) }), events, 'c');
    await acknowledged(a, c);
    // At b, unread: nothing is confirmed.
    expect([fromA.state, fromC.state]).toEqual(['pending', 'pending']);
    expect(events).toEqual([]);
    // b reads them one at a time (recvmsg: the read is recorded in the same turn it happens).
    for (let n = 0; n < 2; n++) {
      await until(() => (b.poll() & constants.POLLIN) !== 0, 'a message at b', 20000);
      const m = b.recvmsg();
      expect(m).not.toBeNull();
      events.push(`read ${m!.data.toString()}`);
    }
    await Promise.all([fromA.done, fromC.done]);
    expect([fromA.state, fromC.state]).toEqual(['ok', 'ok']);
    for (const who of ['a', 'c'])
      expect(events.indexOf(`confirmed ${who}`), events.join(', ')).toBeGreaterThan(events.indexOf(`read ${who}`));
  });

  it('without a signal or timeout: resolves with the length once read, and the sender closing first rejects it (ECANCELED)', async () => {
    const p = await open();
    const { a, b } = p;
    const c = await colocated(p);
    const events: string[] = [];
    // No signal and no timeout: the form that answers with the confirmation's own promise.
    const lenA = a.send(data('abc'), b.address(), { confirm: true });
    const lenC = c.send(data('cd'), b.address(), { confirm: true });
    const fromA = watch(lenA, events, 'a');
    const fromC = watch(lenC, events, 'c');
    await acknowledged(a, c);
    expect([fromA.state, fromC.state]).toEqual(['pending', 'pending']);
    for (let n = 0; n < 2; n++) {
      await until(() => (b.poll() & constants.POLLIN) !== 0, 'a message at b', 20000);
      events.push(`read ${b.recvmsg()!.data.toString()}`);
    }
    expect(await lenA).toBe(3);
    expect(await lenC).toBe(2);
    for (const who of ['a', 'c'])
      expect(events.indexOf(`confirmed ${who}`)).toBeGreaterThan(events.findIndex((e) => e.startsWith(`read ${who}`)));
    // Unread at b, then the senders close: their waits end with ECANCELED, not a confirmation.
    const late = [a.send(data('x'), b.address(), { confirm: true }), c.send(data('y'), b.address(), { confirm: true })];
    const lateW = late.map((w, i) => watch(w, events, `late ${i}`));
    await acknowledged(a, c);
    expect(lateW.map((w) => w.state)).toEqual(['pending', 'pending']);
    await a.close();
    await c.close();
    await Promise.all(lateW.map((w) => w.done));
    expect(lateW.map((w) => w.state)).toEqual(['ECANCELED', 'ECANCELED']);
  });

  it('a confirmation rejects with ECONNRESET when the receiving socket closes with the message unread', async () => {
    const p = await open();
    const { a, b, stackB } = p;
    const c = await colocated(p);
    const discardedB = await counter(stackB, 'send_discarded_unread');
    const events: string[] = [];
    const fromA = watch(a.send(data('a'), b.address(), { confirm: true, signal: timeout(20000) }), events, 'a');
    const fromC = watch(c.send(data('c'), b.address(), { confirm: true, signal: timeout(20000) }), events, 'c');
    await acknowledged(a, c);
    expect([fromA.state, fromC.state]).toEqual(['pending', 'pending']);
    await b.close();
    await Promise.all([fromA.done, fromC.done]);
    expect([fromA.state, fromC.state]).toEqual(['ECONNRESET', 'ECONNRESET']);
    // c's node counts the discard it was told of (a's node too; over loopback they are one).
    expect(await counter(stackB, 'send_discarded_unread')).toBeGreaterThanOrEqual(discardedB + 1);
  });

  // The receiving application is a process attached to b's node; it is SIGKILLed with both
  // messages handed to it and unread. Only attached kinds have a node that outlives its application.
  it.runIf(kind === 'attached' || kind === 'attached-process')(
    'a confirmation rejects with ECONNRESET when the receiving process is killed with the message unread (from another node, and co-located on its own node)',
    async () => {
      const p = await open();
      const { a } = p;
      const c = await colocated(p);
      const address = p.b.address().address;
      const nodePath = (p.stackB as RdsStack & { nodePath: string }).nodePath;
      const proc = spawn(process.execPath, [HOLDER, '--attach', nodePath, '--bind', address, '--ports', '4101,4102'], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      child = proc;
      const seen = new Set<string>();
      createInterface({ input: proc.stdout! }).on('line', (l) => {
        const ev = JSON.parse(l) as { ev: string; port?: number };
        seen.add(ev.port === undefined ? ev.ev : `${ev.ev} ${ev.port}`);
      });
      await until(() => seen.has('ready'), 'the receiving process to bind', 20000);
      const events: string[] = [];
      const fromA = watch(
        a.send(data('a'), { address, port: 4101 }, { confirm: true, signal: timeout(20000) }),
        events,
        'a',
      );
      const fromC = watch(
        c.send(data('c'), { address, port: 4102 }, { confirm: true, signal: timeout(20000) }),
        events,
        'c',
      );
      // Both messages reached the receiving process, which does not read them.
      await until(
        () => seen.has('readable 4101') && seen.has('readable 4102'),
        'both messages in the receiving process',
        20000,
      );
      await acknowledged(a, c);
      expect([fromA.state, fromC.state]).toEqual(['pending', 'pending']);
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGKILL');
      await gone;
      await Promise.all([fromA.done, fromC.done]);
      expect([fromA.state, fromC.state]).toEqual(['ECONNRESET', 'ECONNRESET']);
    },
  );

  // An embedded receiver is its own node: nothing outlives it to say what it had read. Killed, it
  // is heard of when it comes back (a new generation): its unread message rejects then, and until
  // then the confirmation waits (the send's timeout bounds that); it never resolves.
  it.runIf(kind === 'tcp')(
    'a confirmation rejects with ECONNRESET when the receiving process, its own node, is killed with the message unread and comes back',
    async () => {
      const { a } = await open();
      const address = a.address().address.replace(/\.1$/, '.3'); // larger than a's: a dials it again
      const life = (): Promise<ChildProcess> => {
        const proc = spawn(
          process.execPath,
          [LAZY, '--bind', address, '--read', '0', '--tcp-port', `${TEST_TCP_PORT}`],
          {
            stdio: ['ignore', 'pipe', 'inherit'],
          },
        );
        child = proc;
        return new Promise((resolve, reject) => {
          createInterface({ input: proc.stdout! }).on('line', (l) => {
            if ((JSON.parse(l) as { ev: string }).ev === 'ready') resolve(proc);
          });
          proc.once('exit', () => reject(new Error('the receiver exited before it was ready')));
        });
      };
      const first = await life();
      const events: string[] = [];
      const w = watch(
        a.send(data('a'), { address, port: 4000 }, { confirm: true, signal: timeout(30000) }),
        events,
        'a',
      );
      await acknowledged(a); // acknowledged as queued (after the receiver's ackDelayMaxMs): it is there, unread
      expect(w.state).toBe('pending');
      const gone = new Promise((r) => first.once('exit', r));
      first.kill('SIGKILL');
      await gone;
      expect(w.state).toBe('pending');
      await life();
      await w.done;
      expect(w.state).toBe('ECONNRESET');
    },
  );
});
