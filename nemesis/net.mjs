// The nemesis cluster's network: one namespace per node, each joined by a veth pair to a bridge
// in a namespace of its own, plus (for the rail pair) a second veth straight between two nodes.
// Faults are made with the host's own tools (its kernel has no netem): nftables drop rules in
// each node's namespace (partitions, random loss), `ip link set down` (link flaps, rail cuts),
// `ss -K` (TCP resets) and `tc tbf` (a slow link). Every name starts with the run's prefix, so
// cleanup() removes exactly what this run made.
import { execFile, execFileSync, spawnSync } from 'node:child_process';

/** Runs a command; throws with its stderr when it fails. */
export function sh(cmd, args, input) {
  const r = spawnSync(cmd, args, { input, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${(r.stderr || r.stdout || '').trim()}`);
  return r.stdout;
}

/** The same, without blocking the event loop (faults must not delay each other's timers). */
export function run(cmd, args, input) {
  return new Promise((resolve, reject) => {
    const c = execFile(cmd, args, { encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')}: ${(stderr || err.message).trim()}`));
      else resolve(stdout);
    });
    if (input !== undefined) c.stdin.end(input);
  });
}

/** Why a cluster cannot be built here, or null. */
export function netUnavailable() {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces)';
  for (const tool of ['ip', 'nft', 'ss', 'tc']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0)
      return `${tool} is missing (apt-get install -y nftables iproute2)`;
  }
  return null;
}

export class Net {
  /**
   * @param {string} prefix name prefix of every namespace and link (e.g. 'nm')
   * @param {number} n nodes
   * @param {{ rails?: [number, number] | null }} opts
   */
  constructor(prefix, n, opts = {}) {
    this.prefix = prefix;
    /** The kernel peer's node (--kernel): its address is the guest's, behind a bridge in its namespace. */
    this.kernel = opts.kernel ?? null;
    /**
     * Where the kernel's address sits among the others (--kernel-order): 'high' (the default,
     * the largest: every other node connects to it), 'low' (the smallest: it connects to every
     * other node) or 'middle' (both orders in one run). Only the last octet moves; the kernel
     * stays the last node index, so topologies and schedules are the same in every order.
     */
    this.kernelOrder = opts.kernelOrder ?? 'high';
    if (!['high', 'low', 'middle'].includes(this.kernelOrder))
      throw new Error(`--kernel-order takes high, low or middle, got ${this.kernelOrder}`);
    this.n = n;
    this.rails = opts.rails ?? null;
    this.bridgeNs = `${prefix}-br`;
    /** Per node: the nft rule sets of the faults active on it, by fault id. */
    this.rules = Array.from({ length: n }, () => new Map());
    /** Per node: the nft run waiting to start, and the end of the last one (see applyRules). */
    this.nft = Array.from({ length: n }, () => ({ queued: null, tail: Promise.resolve() }));
  }

  ns(i) {
    return `${this.prefix}-n${i}`;
  }
  /** The node's link to the bridge (inside its namespace). */
  dev(i) {
    return `${this.prefix}v${i}`;
  }
  railDev(i) {
    return `${this.prefix}r${i}`;
  }
  /** Node i's RDS address; group 1 is the TLS pair's second address, group 2 the rail link. */
  addr(i, group = 0) {
    return `10.77.${group}.${this.octet(i)}`;
  }

  /** Node i's last octet: i + 1, unless a kernel peer's order puts it below some nodes (kernelOrder). */
  octet(i) {
    if (this.kernel === null || this.kernelOrder === 'high') return i + 1;
    // The other nodes are 0 .. n-2 (the kernel is the last index); `below` of them stay under it.
    const below = this.kernelOrder === 'low' ? 0 : Math.floor((this.n - 1) / 2);
    if (i === this.kernel) return below + 1;
    return i < below ? i + 1 : i + 2;
  }

  up() {
    this.cleanup();
    const { prefix } = this;
    sh('ip', ['netns', 'add', this.bridgeNs]);
    sh('ip', ['-n', this.bridgeNs, 'link', 'add', `${prefix}br0`, 'type', 'bridge']);
    sh('ip', ['-n', this.bridgeNs, 'link', 'set', `${prefix}br0`, 'up']);
    for (let i = 0; i < this.n; i++) {
      const ns = this.ns(i);
      sh('ip', ['netns', 'add', ns]);
      sh('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
      sh('ip', [
        'link',
        'add',
        this.dev(i),
        'netns',
        ns,
        'type',
        'veth',
        'peer',
        'name',
        `${prefix}b${i}`,
        'netns',
        this.bridgeNs,
      ]);
      sh('ip', ['-n', this.bridgeNs, 'link', 'set', `${prefix}b${i}`, 'master', `${prefix}br0`, 'up']);
      if (i === this.kernel) {
        sh('ip', ['-n', ns, 'link', 'set', this.dev(i), 'up']);
        continue; // kernel-node.mjs bridges the guest's tap to this veth
      }
      sh('ip', ['-n', ns, 'addr', 'add', `${this.addr(i)}/24`, 'dev', this.dev(i)]);
      sh('ip', ['-n', ns, 'addr', 'add', `${this.addr(i, 1)}/24`, 'dev', this.dev(i)]);
      sh('ip', ['-n', ns, 'link', 'set', this.dev(i), 'up']);
      sh('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], this.nftScript(i));
    }
    if (this.rails) {
      const [a, b] = this.rails;
      sh('ip', [
        'link',
        'add',
        this.railDev(a),
        'netns',
        this.ns(a),
        'type',
        'veth',
        'peer',
        'name',
        this.railDev(b),
        'netns',
        this.ns(b),
      ]);
      for (const i of [a, b]) {
        sh('ip', ['-n', this.ns(i), 'addr', 'add', `${this.addr(i, 2)}/24`, 'dev', this.railDev(i)]);
        sh('ip', ['-n', this.ns(i), 'link', 'set', this.railDev(i), 'up']);
      }
    }
  }

  /** Removes every namespace of this prefix (their links and rules go with them). */
  cleanup() {
    let list = '';
    try {
      list = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
    } catch {
      return;
    }
    for (const line of list.split('\n')) {
      const name = line.split(' ')[0];
      if (name === this.bridgeNs || new RegExp(`^${this.prefix}-n\\d+$`).test(name)) {
        spawnSync('ip', ['netns', 'del', name]);
      }
    }
  }

  /**
   * Node i's firewall, rebuilt whole from the active faults' rules (one atomic nft run). Runs of
   * one node never overlap; calls made while one waits share it (it reads the rules when it
   * starts), so a burst of changes costs one or two runs, not one each.
   */
  applyRules(i) {
    // The kernel peer's traffic is bridged, not routed, in its namespace: the inet rules would
    // not see it. A partition is made by the other side's rules alone (block() sets both sides);
    // loss and reorder are not drawn for it (schedule.mjs).
    if (i === this.kernel) return Promise.resolve();
    const st = this.nft[i];
    if (st.queued) return st.queued;
    st.queued = st.tail.then(() => {
      st.queued = null;
      return run('ip', ['netns', 'exec', this.ns(i), 'nft', '-f', '-'], this.nftScript(i));
    });
    st.tail = st.queued.catch(() => {});
    return st.queued;
  }

  nftScript(i) {
    const input = [];
    const output = [];
    for (const r of this.rules[i].values()) {
      input.push(...r.input);
      output.push(...r.output);
    }
    const t = `${this.prefix}f`;
    const script = [
      `table inet ${t}`,
      `delete table inet ${t}`,
      `table inet ${t} {`,
      '  chain input { type filter hook input priority 0; policy accept;',
      ...input.map((x) => `    ${x}`),
      '  }',
      '  chain output { type filter hook output priority 0; policy accept;',
      ...output.map((x) => `    ${x}`),
      '  }',
      '}',
      '',
    ].join('\n');
    return script;
  }

  /** Every address of node j (main, TLS, rail): a partition cuts them all. */
  addrsOf(j) {
    return `{ ${this.addr(j)}, ${this.addr(j, 1)}, ${this.addr(j, 2)} }`;
  }

  /** Traffic from `from` to `to` (node lists) is dropped from now on (until heal(id)). */
  block(id, from, to) {
    const touched = new Set();
    for (const a of from) {
      const out = to.map((b) => `ip daddr ${this.addrsOf(b)} drop`);
      this.rules[a].set(`${id}:o`, { input: [], output: out });
      touched.add(a);
    }
    for (const b of to) {
      const inp = from.map((a) => `ip saddr ${this.addrsOf(a)} drop`);
      this.rules[b].set(`${id}:i`, { input: inp, output: [] });
      touched.add(b);
    }
    return Promise.all([...touched].map((i) => this.applyRules(i)));
  }
  heal(id) {
    const touched = [];
    for (let i = 0; i < this.n; i++) {
      let hit = false;
      for (const k of [`${id}:o`, `${id}:i`, id]) hit = this.rules[i].delete(k) || hit;
      if (hit) touched.push(this.applyRules(i));
    }
    return Promise.all(touched);
  }
  /** Every rule of every fault gone. */
  healAll() {
    for (const r of this.rules) r.clear();
    return Promise.all(this.rules.map((_, i) => this.applyRules(i)));
  }
  /** Random loss of `pct` percent of node i's packets from and to other nodes (not on the rail link). */
  loss(id, i, pct) {
    const m = `ip saddr 10.77.0.0/23 numgen random mod 100 < ${pct} drop`;
    const o = `ip daddr 10.77.0.0/23 numgen random mod 100 < ${pct} drop`;
    this.rules[i].set(id, { input: [m], output: [o] });
    return this.applyRules(i);
  }

  link(i, up) {
    return run('ip', ['-n', this.ns(i), 'link', 'set', this.dev(i), up ? 'up' : 'down']);
  }
  railLink(i, up) {
    return run('ip', ['-n', this.ns(i), 'link', 'set', this.railDev(i), up ? 'up' : 'down']);
  }
  /** Kills node i's established RDS/TCP connections (both TCP ports of the run); how many. */
  async resetTcp(i, ports) {
    const filter = ports.map((p) => `sport = :${p} or dport = :${p}`).join(' or ');
    const out = await run('ip', [
      'netns',
      'exec',
      this.ns(i),
      'ss',
      '-K',
      '-t',
      'state',
      'established',
      `( ${filter} )`,
    ]);
    return Math.max(0, out.trim().split('\n').length - 1);
  }
  /**
   * Duplicates `pct` percent of node i's packets to the other nodes (nft `dup to` the veth itself
   * in its egress hook; netem, which would do it otherwise, is not in this kernel), or stops (0).
   * TCP discards the copies: what RDS sees is the receiver's duplicate ACKs and DSACKs.
   */
  dup(i, pct) {
    const t = `${this.prefix}dup`;
    const lines = [`table netdev ${t}`, `delete table netdev ${t}`];
    if (pct > 0)
      lines.push(
        `table netdev ${t} {`,
        `  chain egress { type filter hook egress device ${this.dev(i)} priority 0; policy accept;`,
        `    ip daddr 10.77.0.0/23 numgen random mod 100 < ${pct} dup to ${this.dev(i)}`,
        '  }',
        '}',
      );
    return run('ip', ['netns', 'exec', this.ns(i), 'nft', '-f', '-'], `${lines.join('\n')}\n`);
  }
  /**
   * Reorders and delays `pct` percent of node i's packets to the other nodes: nft sets their
   * priority to an htb class limited to 4 Mbit/s, so they queue behind the rest, which leave at
   * once (netem's reordering, with the means this kernel has). Off: the rule and the qdisc go.
   */
  async reorder(id, i, pct) {
    const tc = (...args) => run('ip', ['netns', 'exec', this.ns(i), 'tc', ...args]);
    const dev = this.dev(i);
    if (pct > 0) {
      await tc('qdisc', 'replace', 'dev', dev, 'root', 'handle', '1:', 'htb', 'default', '1', 'r2q', '100000');
      await tc('class', 'replace', 'dev', dev, 'parent', '1:', 'classid', '1:1', 'htb', 'rate', '10gbit');
      await tc(
        'class',
        'replace',
        'dev',
        dev,
        'parent',
        '1:',
        'classid',
        '1:2',
        'htb',
        'rate',
        '4mbit',
        'ceil',
        '4mbit',
      );
      this.rules[i].set(id, {
        input: [],
        output: [`ip daddr 10.77.0.0/23 numgen random mod 100 < ${pct} meta priority set 1:2`],
      });
      return this.applyRules(i);
    }
    this.rules[i].delete(id);
    await this.applyRules(i);
    return tc('qdisc', 'del', 'dev', dev, 'root');
  }
  /** A slow link (tbf) on node i's egress, or back to normal. */
  slow(i, on) {
    const args = on
      ? ['qdisc', 'replace', 'dev', this.dev(i), 'root', 'tbf', 'rate', '2mbit', 'burst', '32kb', 'latency', '300ms']
      : ['qdisc', 'del', 'dev', this.dev(i), 'root'];
    return run('ip', ['netns', 'exec', this.ns(i), 'tc', ...args]);
  }
}
