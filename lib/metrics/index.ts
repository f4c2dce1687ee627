// rds-socket/metrics: a stack's counters and per-path figures for Prometheus, through prom-client.
//
// prom-client is an optional peer dependency and this file never imports it: each metric is an
// object with the shape prom-client's Registry asks of a metric (name, help, type, async get()),
// computed from `await stack.report()` at scrape time (one report per stack per scrape; an attached
// stack's comes from its host node). Nothing is counted twice and nothing runs between
// scrapes, and the histogram can be exported as the stack already keeps it (pre-bucketed), which
// prom-client's own Histogram class (observe() only) cannot take.
import { RdsError } from '../errors.js';
import { RDS_COUNTER_NAMES } from '../core/stats.js';
import type { RdsStack } from '../core/stack.js';
import type { ConnState } from '../core/path.js';
import type { StackReport } from '../core/types.js';

/** What registerMetrics needs of a prom-client Registry (prom-client 15's Registry has it). */
export interface MetricsRegistry {
  /** Adds one metric (prom-client: `Registry.registerMetric`). */
  registerMetric(metric: never): void;
  /** Removes one metric by name (prom-client: `Registry.removeSingleMetric`). */
  removeSingleMetric(name: string): void;
}

type Labels = Record<string, string | number>;
interface Sample {
  value: number;
  labels: Labels;
  metricName?: string;
}
interface MetricValue {
  name: string;
  help: string;
  type: 'counter' | 'gauge' | 'histogram';
  values: Sample[];
  aggregator: 'sum';
}
interface CollectedMetric {
  name: string;
  help: string;
  type: 'counter' | 'gauge' | 'histogram';
  aggregator: 'sum';
  get(): Promise<MetricValue>;
  reset(): void;
}

/** The options of registerMetrics(). */
export interface RegisterMetricsOptions {
  /** Labels added to every sample of this stack, e.g. { node: 'a' }: needed to tell two stacks on one registry apart. */
  labels?: Record<string, string>;
}

const STATES: readonly ConnState[] = ['DOWN', 'CONNECTING', 'DISCONNECTING', 'UP', 'RESETTING', 'ERROR'];

/**
 * Upper bounds (seconds) of the stack's acknowledgement-latency buckets: bucket 0 is < 1 ms,
 * bucket b < 2^b ms, the last (b = 16) unbounded.
 */
export const ACK_LATENCY_BUCKETS_SECONDS: readonly number[] = Array.from({ length: 16 }, (_, b) => 2 ** b / 1000);

interface Registered {
  stack: RdsStack;
  labels: Labels;
}

/** Per registry: the stacks exported through it and the metrics registered for them. */
const byRegistry = new WeakMap<object, { stacks: Registered[]; names: string[] }>();

/**
 * Exports `stack`'s figures through `registry` (a prom-client Registry, e.g. prom-client's
 * `register`), read at scrape time:
 *
 * - `rds_<counter>_total` for every stack counter (`rds_conn_reset_total`, `rds_send_queued_total`, ...),
 *   named as the kernel's counters (rds-info -c);
 * - per path, labelled `local`, `peer`, `transport`, `path`: `rds_path_state` (1 for the current
 *   state, label `state`), `rds_path_sent_messages_total`, `rds_path_sent_bytes_total`,
 *   `rds_path_received_messages_total`, `rds_path_received_bytes_total`, `rds_path_up_total`,
 *   `rds_path_reconnects_total`, `rds_path_connect_failures_total`, `rds_path_failover_moved_total`,
 *   `rds_path_send_queue_messages`, `rds_path_retransmit_queue_messages`, and the histogram
 *   `rds_path_ack_latency_seconds` (send to acknowledgement, power-of-two buckets 1 ms .. 32.768 s).
 *
 * Several stacks may share a registry (give each distinct `labels`). Returns a function that
 * stops exporting this stack.
 */
export function registerMetrics(
  stack: RdsStack,
  registry: MetricsRegistry,
  opts: RegisterMetricsOptions = {},
): () => void {
  if (stack === null || typeof stack !== 'object' || typeof (stack as RdsStack).report !== 'function') {
    throw new RdsError('EINVAL', 'registerMetrics(stack, registry): stack must be an RdsStack');
  }
  if (registry === null || typeof registry !== 'object' || typeof registry.registerMetric !== 'function') {
    throw new RdsError(
      'EINVAL',
      'registerMetrics(stack, registry): registry must be a prom-client Registry (new Registry() or register)',
    );
  }
  const labels: Labels = {};
  for (const [k, v] of Object.entries(opts.labels ?? {})) {
    if (
      !/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(k) ||
      k.startsWith('__') ||
      ['local', 'peer', 'transport', 'path', 'state', 'le'].includes(k)
    ) {
      throw new RdsError(
        'EINVAL',
        `label name ${JSON.stringify(k)} is not allowed: use [a-zA-Z_][a-zA-Z0-9_]*, not a label rds-socket sets`,
      );
    }
    labels[k] = String(v);
  }
  let entry = byRegistry.get(registry);
  if (entry === undefined) {
    entry = { stacks: [], names: [] };
    byRegistry.set(registry, entry);
    for (const m of buildMetrics(entry.stacks)) {
      registry.registerMetric(m as never);
      entry.names.push(m.name);
    }
  }
  if (entry.stacks.some((r) => r.stack === stack)) {
    throw new RdsError('EINVAL', 'this stack is already registered with this registry');
  }
  const mine: Registered = { stack, labels };
  entry.stacks.push(mine);
  const e = entry;
  return () => {
    const i = e.stacks.indexOf(mine);
    if (i < 0) return;
    e.stacks.splice(i, 1);
    if (e.stacks.length === 0) {
      for (const n of e.names) registry.removeSingleMetric(n);
      byRegistry.delete(registry);
    }
  };
}

/** One stack's report for a scrape, with the labels of its samples. */
interface Read {
  labels: Labels;
  report: StackReport;
}

/**
 * Reads every registered stack once per scrape: prom-client asks all metrics at once, so their
 * get() calls share the reports in flight; the next scrape reads again.
 */
function reader(stacks: Registered[]): () => Promise<Read[]> {
  let pending: Promise<Read[]> | null = null;
  return () => {
    if (pending === null) {
      const p = Promise.all(stacks.map(async (s) => ({ labels: s.labels, report: await s.stack.report() })));
      pending = p;
      const clear = (): void => {
        if (pending === p) pending = null;
      };
      p.then(clear, clear);
    }
    return pending;
  };
}

function metric(
  name: string,
  help: string,
  type: CollectedMetric['type'],
  read: () => Promise<Read[]>,
  collect: (reads: Read[]) => Sample[],
): CollectedMetric {
  return {
    name,
    help,
    type,
    aggregator: 'sum',
    async get() {
      return { name, help, type, values: collect(await read()), aggregator: 'sum' };
    },
    reset() {
      /* values come from the stack; nothing is kept here */
    },
  };
}

type PathFigures = StackReport['connections'][number]['paths'][number];

/** Every path of every registered stack, with the labels that name it. */
function* eachPath(reads: Read[]): Generator<{ p: PathFigures; labels: Labels }> {
  for (const s of reads)
    for (const c of s.report.connections)
      for (const p of c.paths)
        yield {
          p,
          labels: { ...s.labels, local: c.localAddress, peer: c.peerAddress, transport: c.transport, path: p.index },
        };
}

function buildMetrics(stacks: Registered[]): CollectedMetric[] {
  const out: CollectedMetric[] = [];
  const read = reader(stacks);
  for (const c of RDS_COUNTER_NAMES) {
    out.push(
      metric(`rds_${c}_total`, `RDS counter ${c} (as rds-info -c names it)`, 'counter', read, (reads) =>
        reads.map((s) => ({ value: s.report.counters[c], labels: { ...s.labels } })),
      ),
    );
  }
  const perPath = (name: string, help: string, type: 'counter' | 'gauge', value: (p: PathFigures) => number) =>
    out.push(
      metric(name, help, type, read, (reads) =>
        [...eachPath(reads)].map(({ p, labels }) => ({ value: value(p), labels })),
      ),
    );
  out.push(
    metric(
      'rds_path_state',
      'State of each RDS path: 1 for the current state (label state), 0 for the others',
      'gauge',
      read,
      (reads) => {
        const values: Sample[] = [];
        for (const { p, labels } of eachPath(reads))
          for (const st of STATES) values.push({ value: p.state === st ? 1 : 0, labels: { ...labels, state: st } });
        return values;
      },
    ),
  );
  perPath('rds_path_sent_messages_total', 'Messages sent on the path', 'counter', (p) => p.sentMessages);
  perPath('rds_path_sent_bytes_total', 'Payload bytes sent on the path', 'counter', (p) => p.sentBytes);
  perPath('rds_path_received_messages_total', 'Messages received on the path', 'counter', (p) => p.recvMessages);
  perPath('rds_path_received_bytes_total', 'Payload bytes received on the path', 'counter', (p) => p.recvBytes);
  perPath('rds_path_up_total', 'Times the path came up', 'counter', (p) => p.upCount);
  perPath('rds_path_reconnects_total', 'Times the path came up again after its first connection', 'counter', (p) =>
    Math.max(0, p.upCount - 1),
  );
  perPath(
    'rds_path_connect_failures_total',
    'Connection attempts on the path that failed',
    'counter',
    (p) => p.connectFailures,
  );
  perPath(
    'rds_path_failover_moved_total',
    'Messages the path handed to a live path while it was down',
    'counter',
    (p) => p.movedByFailover,
  );
  perPath('rds_path_send_queue_messages', 'Messages queued on the path and not yet sent', 'gauge', (p) => p.sendQueue);
  perPath(
    'rds_path_retransmit_queue_messages',
    'Messages sent on the path and not yet acknowledged',
    'gauge',
    (p) => p.retransQueue,
  );
  const h = 'rds_path_ack_latency_seconds';
  out.push(
    metric(h, 'Time from sending a message to its acknowledgement', 'histogram', read, (reads) => {
      const values: Sample[] = [];
      for (const { p, labels: base } of eachPath(reads)) {
        let cum = 0;
        for (let b = 0; b < ACK_LATENCY_BUCKETS_SECONDS.length; b++) {
          cum += p.latencyHistogram[b] ?? 0;
          values.push({
            metricName: `${h}_bucket`,
            value: cum,
            labels: { ...base, le: ACK_LATENCY_BUCKETS_SECONDS[b]! },
          });
        }
        const count = p.latencyHistogram.reduce((a, v) => a + v, 0);
        values.push({ metricName: `${h}_bucket`, value: count, labels: { ...base, le: '+Inf' } });
        values.push({ metricName: `${h}_sum`, value: p.latencySumMs / 1000, labels: base });
        values.push({ metricName: `${h}_count`, value: count, labels: base });
      }
      return values;
    }),
  );
  return out;
}
