// The nemesis cluster's kernel peer (`--kernel 6.1|6.12|7`): a real Linux kernel under qemu
// (test/interop/kernel-vm.sh, the interop suite's guest) whose tap joins the cluster's bridge, with
// one application process inside (kernel-app.py: the guest kernel's own AF_RDS sockets). Node i's
// namespace holds a bridge joining the tap to node i's veth, so the guest's address is node i's
// and the other nodes' rules, links and qdiscs act on its traffic as on any node's.
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const VM = fileURLToPath(new URL('../test/interop/kernel-vm.sh', import.meta.url));
const APP = fileURLToPath(new URL('./kernel-app.py', import.meta.url));
/** The interop suite's kernel caches (kernel-vm.sh's defaults): the guest reuses their kernel. */
const SHARED_CACHE = {
  6.1: '/var/tmp/rds-socket-kernel',
  6.12: '/var/tmp/rds-socket-kernel-6.12',
  7: '/var/tmp/rds-socket-kernel-7',
};

const sh = (cmd, args, opts = {}) =>
  new Promise((resolve, reject) =>
    execFile(cmd, args, { maxBuffer: 1 << 24, ...opts }, (err, stdout, stderr) =>
      err ? reject(new Error(`${cmd} ${args.join(' ')}: ${stderr || err.message}`)) : resolve(stdout),
    ),
  );
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class KernelNode {
  /** @param {import('./net.mjs').Net} net @param {number} i the node's index @param {string} kernel */
  constructor(net, i, kernel) {
    if (!(kernel in SHARED_CACHE)) throw new Error(`--kernel takes 6.1, 6.12 or 7, got ${kernel}`);
    Object.assign(this, { net, i, kernel });
    this.env = {
      ...process.env,
      RDS_KERNEL: kernel,
      RDS_NETNS: net.ns(i),
      RDS_TAP: `${net.prefix}tap`,
      // One cache per prefix: two runs with different prefixes may each have a guest.
      RDS_KVM_CACHE: `/var/tmp/rds-nemesis-kvm-${net.prefix}-${kernel}`,
      RDS_KVM_KERNEL_FROM: SHARED_CACHE[kernel],
      RDS_KVM_GUEST_IP: `${net.addr(i)}/24`,
      RDS_KVM_EXEC_TIMEOUT: '60',
    };
    this.clock = null;
  }
  vm(...args) {
    return sh('bash', [VM, ...args], { env: this.env });
  }
  /** Boots the guest (setting its cache up first if needed) and puts its tap on node i's bridge. */
  async boot() {
    await this.vm('start');
    this.inst = `${(await this.vm('cache')).trim()}/instance`;
    const ns = this.net.ns(this.i);
    const tap = this.env.RDS_TAP;
    const br = `${this.net.prefix}kbr`;
    // kernel-vm.sh gives the tap the interop suite's host addresses; here the guest's neighbours
    // are the cluster's nodes, reached through the bridge, so the namespace keeps no address.
    await sh('ip', ['-n', ns, 'addr', 'flush', 'dev', tap]);
    await sh('ip', ['-n', ns, 'link', 'add', br, 'type', 'bridge']);
    await sh('ip', ['-n', ns, 'link', 'set', tap, 'master', br]);
    await sh('ip', ['-n', ns, 'link', 'set', this.net.dev(this.i), 'master', br]);
    await sh('ip', ['-n', ns, 'link', 'set', br, 'up']);
    // The guest's records are stamped with this clock (kernel-app.py), not with its own.
    const tick = () => {
      writeFileSync(`${this.inst}/hostclock.tmp`, String(Date.now()));
      renameSync(`${this.inst}/hostclock.tmp`, `${this.inst}/hostclock`);
    };
    tick();
    this.clock = setInterval(tick, 50);
    return (await this.exec('uname -r')).trim();
  }
  exec(cmd) {
    return this.vm('exec', cmd);
  }
  /** The guest's histories, copied into the run's directory (the checker reads them there). */
  collect(dir) {
    const from = `${this.inst}/hist`;
    if (!existsSync(from)) return;
    mkdirSync(`${dir}/hist`, { recursive: true });
    for (const f of readdirSync(from)) cpSync(`${from}/${f}`, `${dir}/hist/${f}`);
  }
  /** Kills the guest's application, unloads rds_tcp (waiting for its sockets to go) and loads it again. */
  async reloadRdsTcp() {
    return this.exec(
      'for i in $(seq 100); do rmmod rds_tcp 2>/dev/null && break; sleep 0.1; done; lsmod | grep -q "^rds_tcp" && { echo "rds_tcp still loaded" >&2; exit 1; }; modprobe rds_tcp && echo reloaded',
    );
  }
  /** Kills the guest's RDS/TCP connections (ss -K), as net.resetTcp does in a namespace. */
  async resetTcp(port) {
    return this.exec(
      `modprobe tcp_diag 2>/dev/null; ss -K -t state established '( sport = :${port} or dport = :${port} )' | tail -n +2 | wc -l`,
    );
  }
  /** Sends `sig` to the guest's qemu process (kernel-vm.sh keeps its pid beside the instance). */
  signalGuest(sig) {
    const pid = Number(readFileSync(`${dirname(this.inst)}/qemu.pid`, 'utf8').trim());
    if (Number.isInteger(pid) && pid > 0) process.kill(pid, sig);
  }
  async stop() {
    // A guest stopped by a pause cannot shut down.
    try {
      this.signalGuest('SIGCONT');
    } catch {
      // not running
    }
    if (this.clock) clearInterval(this.clock);
    this.clock = null;
    await this.vm('stop').catch(() => {});
  }
}

/** The guest's application process, with the surface of cluster.mjs's Child (one life per start). */
export class KernelChild {
  constructor(name, node, cfg) {
    Object.assign(this, { name, node, cfg });
    this.epoch = -1;
    this.alive = false;
    this.exited = Promise.resolve({ code: 0 });
  }
  get guestCfg() {
    return { ...this.cfg, epoch: this.epoch, dir: '/rdsinst' };
  }
  start() {
    this.epoch++;
    const e = this.epoch;
    const b64 = Buffer.from(JSON.stringify(this.guestCfg)).toString('base64');
    this.alive = true;
    const started = this.node.exec(
      `mkdir -p /rdsinst/hist; nohup python3 ${APP} "$(echo ${b64} | base64 -d)" > /rdsinst/kapp.${e}.log 2>&1 & echo started`,
    );
    this.ready = started.then(() => this.saying('"ev":"ready"'));
    this.exited = this.saying('"ev":"exit"').then(
      () => ({ code: 0 }),
      () => ({ code: 1 }),
    );
    return this;
  }
  /** Resolves true once this life printed `what` in its kout file, false once it is killed or dies. */
  async saying(what) {
    const e = this.epoch;
    const file = () => `${this.node.inst}/kout.${e}`;
    for (;;) {
      if (this.epoch !== e || !this.alive) return false;
      try {
        if (readFileSync(file(), 'utf8').includes(what)) return true;
      } catch {
        // not written yet
      }
      const log = `${this.node.inst}/kapp.${e}.log`;
      if (existsSync(log) && /Traceback|Error/.test(readFileSync(log, 'utf8'))) {
        this.alive = false;
        throw new Error(`${this.name} (kernel app) failed: ${readFileSync(log, 'utf8').slice(-800)}`);
      }
      await sleep(100);
    }
  }
  send(line) {
    if (!this.alive) return;
    writeFileSync(`${this.node.inst}/kcmd.${this.epoch}`, `${line}\n`, { flag: 'a' });
  }
  /**
   * A pause of the kernel peer stops the whole guest: SIGSTOP/SIGCONT to qemu, so its kernel
   * (timers, TCP, RDS) freezes with its application, as a host that hangs.
   */
  signal(sig) {
    this.node.signalGuest(sig);
  }
  async kill() {
    if (!this.alive) return;
    this.alive = false;
    await this.node.exec(`kill -9 $(cat /rdsinst/kpid.${this.epoch}) 2>/dev/null; echo killed`).catch(() => {});
  }
}
