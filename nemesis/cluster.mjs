// The nemesis cluster's shape and processes: which node is embedded or a host node, which
// application processes and sockets each has, the TLS pair and the rail pair; starting, killing,
// pausing and restarting them, and sampling their RSS and (host nodes) paths.
import { spawn } from 'node:child_process';
import { existsSync, openSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { controlRequest } from '../dist/cli/control-client.js';
import { KernelChild } from './kernel-node.mjs';

const APP = fileURLToPath(new URL('./app.mjs', import.meta.url));
const DAEMON = fileURLToPath(new URL('../dist/cli/rds-socketd.js', import.meta.url));
export const TCP_PORT = 16385;
export const TLS_PORT = 16386;

/**
 * Nodes 0 and 1 are embedded (the rail pair), then host nodes and embedded nodes alternate
 * (2, 3: hosts; 4: embedded; 5: host ...). The first host node has 3 application processes (the
 * first with a worker thread), the others 2; each process 2 sockets, each embedded node 3. The
 * TLS pair is a second embedded stack on node 0 and on the first host node's namespace, on the
 * nodes' second addresses (10.77.1.x), sending only to each other.
 */
export function topology(net, { tls = true, rails = true, kernel = null } = {}) {
  const n = net.n;
  const nodes = [];
  const procs = [];
  const main = [];
  for (let i = 0; i < n; i++) {
    if (i === kernel) {
      // The kernel peer (--kernel): one application in a qemu guest, the kernel's own sockets.
      nodes.push({ i, kind: 'kernel' });
      procs.push({
        proc: `k${i}`,
        node: i,
        mode: 'kernel',
        addr: net.addr(i),
        ports: [7000, 7001, 7002],
        slow: [7000],
      });
      continue;
    }
    const kind = i < 2 || (i >= 4 && i % 2 === 0) ? 'embedded' : 'host';
    nodes.push({ i, kind });
    if (kind === 'embedded') {
      procs.push({
        proc: `e${i}`,
        node: i,
        mode: 'embedded',
        addr: net.addr(i),
        ports: [4000, 4001, 4002],
        slow: [4000],
      });
    } else {
      const first = !nodes.some((x) => x.kind === 'host' && x.i < i);
      for (let x = 0; x < (first ? 3 : 2); x++) {
        const p = {
          proc: `a${i}${x}`,
          node: i,
          mode: 'attached',
          addr: net.addr(i),
          ports: [5000 + 10 * x, 5001 + 10 * x],
          slow: x === 1 ? [5010] : [],
        };
        if (first && x === 0)
          p.worker = {
            proc: `a${i}${x}w`,
            node: i,
            mode: 'attached',
            addr: net.addr(i),
            ports: [5100, 5101],
            slow: [],
          };
        procs.push(p);
      }
    }
  }
  const hosts = nodes.filter((x) => x.kind === 'host').map((x) => x.i);
  const embedded = nodes.filter((x) => x.kind === 'embedded').map((x) => x.i);
  const railPair = rails && embedded.length >= 2 ? [embedded[0], embedded[1]] : null;
  if (railPair) {
    const [a, b] = railPair;
    procs.find((p) => p.proc === `e${a}`).rails = [
      { peer: net.addr(b), local: net.addr(a, 2), remote: net.addr(b, 2) },
    ];
    procs.find((p) => p.proc === `e${b}`).rails = [
      { peer: net.addr(a), local: net.addr(b, 2), remote: net.addr(a, 2) },
    ];
  }
  for (const p of procs)
    main.push(...[p, p.worker].filter(Boolean).flatMap((q) => q.ports.map((port) => `${q.addr}:${port}`)));
  const tlsNodes = tls && hosts.length > 0 ? [embedded[0], hosts[0]] : null;
  const tlsDests = [];
  if (tlsNodes) {
    for (const i of tlsNodes) {
      procs.push({
        proc: `t${i}`,
        node: i,
        mode: 'embedded',
        addr: net.addr(i, 1),
        ports: [6000, 6001],
        slow: [],
        tlsGroup: true,
      });
      tlsDests.push(`${net.addr(i, 1)}:6000`, `${net.addr(i, 1)}:6001`);
    }
  }
  for (const p of procs) p.dests = p.tlsGroup ? tlsDests : main;
  for (const p of procs) if (p.worker) p.worker.dests = main;
  return {
    n,
    nodes,
    procs,
    hosts,
    embedded,
    rails: railPair,
    tlsNodes,
    kernel,
    apps: procs.filter((p) => p.mode === 'attached').map((p) => p.proc),
    pausable: [
      ...procs.filter((p) => p.mode === 'embedded').map((p) => ({ proc: p.proc, node: p.node })),
      ...hosts.map((i) => ({ proc: `d${i}`, node: i })),
      // The kernel peer's whole guest (qemu stopped and continued: its kernel and application).
      ...procs.filter((p) => p.mode === 'kernel').map((p) => ({ proc: p.proc, node: p.node })),
    ],
  };
}

/** A child process in a node's namespace, restartable (each life a new epoch). */
export class Child {
  /** `outFd`: where stdout goes (a node's log); without it stdout is read for readiness. */
  constructor(name, ns, argv, logFd, env, outFd = null) {
    Object.assign(this, { name, ns, argv, logFd, env, outFd });
    this.epoch = -1;
    this.p = null;
    this.exited = null;
  }
  start(extraArgv = () => []) {
    this.epoch++;
    const p = spawn('ip', ['netns', 'exec', this.ns, process.execPath, ...this.argv, ...extraArgv(this.epoch)], {
      stdio: ['pipe', this.outFd ?? 'pipe', this.logFd],
      env: this.env,
    });
    p.stdin.on('error', () => {});
    this.p = p;
    this.out = '';
    this.waiters = [];
    p.stdout?.on('data', (d) => {
      this.out += d;
      for (const w of this.waiters) w();
    });
    this.ready = this.saying('"ev":"ready"');
    this.exited = new Promise((res) => p.on('exit', (code, sig) => res({ code, sig })));
    this.alive = true;
    p.on('exit', () => {
      this.alive = false;
    });
    return this;
  }
  /** Resolves true once the process printed `what`, false if it exits first. */
  saying(what) {
    return new Promise((res) => {
      const look = () => this.out.includes(what) && res(true);
      this.waiters.push(look);
      this.p.on('exit', () => res(false));
      look();
    });
  }
  send(line) {
    if (this.alive) this.p.stdin.write(`${line}\n`);
  }
  signal(sig) {
    if (this.alive) process.kill(this.p.pid, sig);
  }
  async kill() {
    if (!this.alive) return;
    this.signal('SIGCONT');
    this.signal('SIGKILL');
    await this.exited;
  }
}

/** Starts and restarts every process of the cluster; all of them are ended by stopAll(). */
export class Cluster {
  constructor(net, topo, dir, { seed, env, kernelNode = null }) {
    Object.assign(this, { net, topo, dir, seed, kernelNode });
    this.children = new Map();
    const logFd = openSync(`${dir}/processes.log`, 'a');
    for (const i of topo.hosts) {
      const path = `${dir}/n${i}.sock`;
      const c = new Child(
        `d${i}`,
        net.ns(i),
        // Its log (paths up and down, failovers, clients) is kept per node: what explains an
        // anomaly at an attached socket (docs/nemesis.md).
        [DAEMON, '--path', path, '--address', net.addr(i), '--tcp-port', String(TCP_PORT)],
        logFd,
        env,
        openSync(`${dir}/d${i}.log`, 'a'),
      );
      c.path = path;
      this.children.set(c.name, c);
    }
    for (const p of topo.procs) {
      const cfg = { ...p, dir, seed, tcpPort: p.tlsGroup ? TLS_PORT : TCP_PORT };
      if (p.mode === 'attached') {
        cfg.path = `${dir}/n${p.node}.sock`;
        if (cfg.worker) cfg.worker = { ...cfg.worker, path: cfg.path };
      }
      const c =
        p.mode === 'kernel'
          ? new KernelChild(p.proc, kernelNode, cfg)
          : new Child(p.proc, net.ns(p.node), [APP], logFd, env);
      c.cfg = cfg;
      this.children.set(c.name, c);
    }
  }
  setTls(material) {
    for (const c of this.children.values()) if (c.cfg?.tlsGroup) c.cfg.tls = material;
  }
  get(name) {
    return this.children.get(name);
  }
  /** Starts (or restarts) a process and waits until it serves (daemon) or is ready (app). */
  async start(name) {
    const c = this.children.get(name);
    if (c instanceof KernelChild) return c.start().ready;
    if (c.cfg) {
      c.start((epoch) => [JSON.stringify({ ...c.cfg, epoch })]);
      if (c.cfg.mode === 'embedded') return c.ready;
      return true; // an attached app waits for its node by itself
    }
    c.start();
    // Up to 60 s: a node process starts in well under a second on a quiet machine, in tens of
    // seconds on a 2-core one shared with a dozen others.
    for (let k = 0; k < 3000 && c.alive; k++) {
      try {
        if (existsSync(`${c.path}.pid`) && readFileSync(`${c.path}.pid`, 'utf8').trim() === String(c.p.pid))
          return true;
      } catch {
        // being written
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`${name} did not start serving`);
  }
  async startAll() {
    for (const i of this.topo.hosts) await this.start(`d${i}`);
    await Promise.all(this.topo.procs.map((p) => this.start(p.proc)));
    await Promise.all(this.topo.procs.map((p) => this.children.get(p.proc).ready));
  }
  apps() {
    return this.topo.procs.map((p) => this.children.get(p.proc));
  }
  tell(cmd) {
    for (const c of this.apps()) c.send(cmd);
  }
  /** RSS of every live process, from /proc (the daemons' too). */
  rss() {
    const out = [];
    for (const c of this.children.values()) {
      if (!c.alive || !c.p) continue; // the kernel peer's application records its own RSS
      try {
        const pages = Number(readFileSync(`/proc/${c.p.pid}/statm`, 'utf8').split(' ')[1]);
        out.push({ proc: c.name, epoch: c.epoch, rss: pages * 4096 });
      } catch {
        // exited meanwhile
      }
    }
    return out;
  }
  /** Paths UP per peer of each host node (its control socket), skipping nodes that do not answer. */
  async hostPaths() {
    const out = [];
    await Promise.all(
      this.topo.hosts.map(async (i) => {
        const c = this.children.get(`d${i}`);
        if (!c.alive) return;
        const info = await Promise.race([
          controlRequest(c.path, 'info').catch(() => null),
          new Promise((r) => setTimeout(() => r(null), 800)),
        ]);
        if (!info) return;
        out.push({
          node: i,
          paths: info.connections.map((x) => [x.peerAddress, x.paths.filter((p) => p.state === 'UP').length]),
        });
      }),
    );
    return out;
  }
  async stopAll() {
    await Promise.all([...this.children.values()].map((c) => c.kill()));
  }
}
