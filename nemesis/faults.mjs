// Carries out a schedule (schedule.mjs) against a running cluster: each fault starts at its offset
// and ends (heals) `dur` later; both moments are appended to faults.jsonl with the real times.
import { openSync, writeSync } from 'node:fs';
import { TCP_PORT, TLS_PORT } from './cluster.mjs';

/**
 * What a fault holds and the next fault on it must wait for: the process it acts on, or the
 * node's root qdisc (slow and reorder replace it). The schedule never overlaps them, but under
 * load a heal runs late, and the next one's start must not meet it.
 */
function procOf(f) {
  if (f.kind === 'kill-app' || f.kind === 'pause' || f.kind === 'kernel-reload') return f.proc;
  if (f.kind === 'kill-host') return `d${f.node}`;
  if (f.kind.startsWith('kill-embedded')) return `e${f.node}`;
  if (f.kind === 'slow' || f.kind === 'reorder') return `qdisc${f.node}`;
  return null;
}

export class Nemesis {
  constructor(net, cluster, dir) {
    Object.assign(this, { net, cluster });
    this.fd = openSync(`${dir}/faults.jsonl`, 'a');
    this.timers = [];
    this.active = new Map();
    this.errors = [];
    /** Per process (or qdisc): the heal of the last fault on it (a late restart must not meet the next kill). */
    this.procTurn = new Map();
  }
  log(rec) {
    writeSync(this.fd, `${JSON.stringify({ t: Date.now(), ...rec })}\n`);
  }

  /** Runs `faults` from now; resolves once the last one has healed. */
  run(faults) {
    const t0 = Date.now();
    const all = faults.map(
      (f) =>
        new Promise((done) => {
          this.timers.push(
            setTimeout(async () => {
              const proc = procOf(f);
              let healed = () => {};
              if (proc) {
                const before = this.procTurn.get(proc) ?? Promise.resolve();
                this.procTurn.set(proc, new Promise((r) => (healed = r)));
                await before;
              }
              // Logged first: the fault is active from the moment it starts being made.
              this.log({ ev: 'start', ...f, t0 });
              try {
                await this.begin(f);
              } catch (e) {
                this.errors.push(`${f.id} ${f.kind}: ${e.message}`);
                this.log({ ev: 'end', id: f.id, kind: f.kind, failed: e.message });
                healed();
                return done();
              }
              this.timers.push(
                setTimeout(async () => {
                  try {
                    await this.end(f);
                  } catch (e) {
                    this.errors.push(`${f.id} ${f.kind} (heal): ${e.message}`);
                  }
                  this.log({ ev: 'end', id: f.id, kind: f.kind });
                  healed();
                  done();
                }, f.dur),
              );
            }, f.at),
          );
        }),
    );
    return Promise.all(all);
  }

  async begin(f) {
    const { net, cluster } = this;
    this.active.set(f.id, f);
    switch (f.kind) {
      case 'kill-app':
        return cluster.get(f.proc).kill();
      case 'kill-host':
        return cluster.get(`d${f.node}`).kill();
      case 'kill-embedded-low':
      case 'kill-embedded-high':
        return cluster.get(`e${f.node}`).kill();
      case 'pause':
        return cluster.get(f.proc).signal('SIGSTOP');
      case 'partition-sym':
      case 'halves':
        return Promise.all([net.block(`${f.id}a`, f.from, f.to), net.block(`${f.id}b`, f.to, f.from)]);
      case 'partition-asym':
        return net.block(f.id, f.from, f.to);
      case 'isolate': {
        const rest = Array.from({ length: net.n }, (_, i) => i).filter((i) => i !== f.node);
        return Promise.all([net.block(`${f.id}a`, [f.node], rest), net.block(`${f.id}b`, rest, [f.node])]);
      }
      case 'link-flap':
        return net.link(f.node, false);
      case 'loss':
        return net.loss(f.id, f.node, f.pct);
      case 'reset':
        f.killed =
          f.node === net.kernel
            ? cluster.kernelNode.resetTcp(TCP_PORT).catch((e) => e.message)
            : net.resetTcp(f.node, [TCP_PORT, TLS_PORT]);
        return;
      case 'kernel-reload':
        await cluster.get(f.proc).kill();
        return cluster.kernelNode.reloadRdsTcp();
      case 'slow':
        return net.slow(f.node, true);
      case 'dup':
        return net.dup(f.node, f.pct);
      case 'reorder':
        return net.reorder(f.id, f.node, f.pct);
      case 'rail-cut':
        return net.railLink(f.node, false);
    }
  }

  async end(f) {
    const { net, cluster } = this;
    this.active.delete(f.id);
    switch (f.kind) {
      case 'kill-app':
        return cluster.start(f.proc);
      case 'kill-host':
        return cluster.start(`d${f.node}`);
      case 'kill-embedded-low':
      case 'kill-embedded-high':
        return cluster.start(`e${f.node}`);
      case 'pause':
        return cluster.get(f.proc).signal('SIGCONT');
      case 'partition-sym':
      case 'halves':
      case 'isolate':
        return Promise.all([net.heal(`${f.id}a`), net.heal(`${f.id}b`)]);
      case 'partition-asym':
      case 'loss':
        return net.heal(f.id);
      case 'link-flap':
        return net.link(f.node, true);
      case 'slow':
        return net.slow(f.node, false);
      case 'dup':
        return net.dup(f.node, 0);
      case 'reorder':
        return net.reorder(f.id, f.node, 0);
      case 'rail-cut':
        return net.railLink(f.node, true);
      case 'kernel-reload':
        return cluster.start(f.proc);
    }
  }

  stop() {
    for (const t of this.timers) clearTimeout(t);
  }
}
