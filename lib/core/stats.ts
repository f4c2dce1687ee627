/**
 * Counters named as net/rds/stats.c names them, so rds-info output and dashboards read the same.
 * Ours (not in the kernel) follow the same style and are listed after.
 */
export const RDS_COUNTER_NAMES = [
  'conn_reset',
  'recv_drop_bad_checksum',
  'recv_drop_old_seq',
  'recv_drop_no_sock',
  'recv_drop_dead_sock',
  'recv_deliver_raced',
  'recv_delivered',
  'recv_queued',
  'recv_immediate_retry',
  'recv_delayed_retry',
  'recv_ack_required',
  'recv_rdma_bytes',
  'recv_ping',
  'send_queue_empty',
  'send_queue_full',
  'send_lock_contention',
  'send_lock_queue_raced',
  'send_immediate_retry',
  'send_delayed_retry',
  'send_drop_acked',
  'send_ack_required',
  'send_queued',
  'send_rdma',
  'send_rdma_bytes',
  'send_pong',
  'page_remainder_hit',
  'page_remainder_miss',
  'copy_to_user',
  'copy_from_user',
  'cong_update_queued',
  'cong_update_received',
  'cong_send_error',
  'cong_send_blocked',
  'recv_bytes_added_to_sock',
  'recv_bytes_freed_fromsock',
  'send_stuck_rm',
  // transport counters (tcp)
  'tcp_data_ready_calls',
  'tcp_write_space_calls',
  'tcp_sndbuf_full',
  'tcp_connect_raced',
  'tcp_listen_closed_stale',
  // rds-socket's own
  'recv_drop_protocol_error',
  'recv_drop_bad_cong_map',
  'conn_refused_local_peer',
  'conn_poke_sent',
  'conn_poke_received',
  // our poke was still in flight when the peer's own connection reached us (it was connecting anyway)
  'conn_poke_superseded',
  'send_retransmitted',
  'send_cancelled',
  'send_ack_frames',
  'recv_ack_frames',
  'heartbeat_sent',
  'heartbeat_timeout',
  'handshake_sent',
  'handshake_received',
  'handshake_timeout',
  'peer_restarted',
  // a peer restart seen first on a lane we dialled: every path dropped, path 0 first again (handshake.ts)
  'lane_restart_dropped',
  'mprds_fanout',
  'failover_moved',
  'recv_drop_moved_dup',
  'ib_connect_raced',
  'ib_listen_closed_stale',
  'ib_connect_refused',
  'tcp_accept_no_free_path',
  'conn_refused_allowlist',
  'conn_refused_limit',
  'conn_refused_tls',
  'recv_drop_header_timeout',
  'recv_drop_ping_budget',
  'recv_pause_queue_limit',
  'recv_pause_partial_limit',
  'recv_drop_frame_timeout',
  // an rds-socket peer reported a message we sent dropped: no socket bound to its port (the
  // receiver counts recv_drop_no_sock), or its socket closed with it unread
  'send_refused_no_sock',
  'send_discarded_unread',
  // confirmations rejected because the peer restarted, or its report of what it read was lost
  'send_confirm_reset',
  'conn_reclaimed',
  // a path was asked to move from a state it was not in (RdsConnPath.transition): refused
  'conn_transition_refused',
  // rails (several links to one peer): a rail hello refused (by either end), a rail removed, a
  // path that reached maxReconnectAttempts and stopped trying (ERROR)
  'rail_refused',
  'rail_removed',
  'conn_reconnect_exhausted',
  // a multipath probe not sent to a kernel's RDS/IB (6.1 hangs on one; see transports/ib-send.ts)
  'ib_probe_withheld',
  // a frame in progress that made no progress while another waited for room in
  // maxPartialFrameBytes: its connection was dropped to make that room (transports/partial-frames.ts)
  'recv_drop_frame_stalled',
  // a TCP connect (or poke) with no answer within its bound was abandoned for a fresh attempt
  // (transports/tcp-connect.ts): a SYN lost to a partition is otherwise retried only after seconds
  'tcp_connect_timeout',
  // the handshake wait ran out on a peer that had already sent what no kernel sends (an RDS ack
  // over TCP, a read report): not taken for a kernel, its answer awaited (handshake.ts)
  'handshake_wait_rds_socket',
  // an accepted carrier whose peer encodes lanes in source ports (SPORT_IDX) and whose port names
  // another lane than the path that took it (a lane that came before the peer's path 0 to a node
  // that just started): its path 0 numbering rolled back, the carrier moved to that lane
  // (accept_lane_moved) or, when the lane had a carrier, dropped (lane-pairing.ts)
  'accept_lane_misplaced',
  // a connection accepted for a path while the peer's pairing by source port was not known, that
  // waited behind that path's old carrier: when its turn came the pairing, learnt meanwhile, named
  // another path, and it went there instead (tcp-listen.ts)
  'accept_moved_by_port',
  // a message cancelled while in a carrier that then died left a withdrawn record in its place,
  // and one such record arrived (not delivered; its numbers count as arrived): ext/withdrawn.ts
  'send_withdrawn',
  'recv_withdrawn',
  // an accept_lane_misplaced carrier moved, unclosed, to the lane its source port names, which
  // took the frame that showed it and everything after it (lane-pairing.ts, tcp-listen.ts)
  'accept_lane_moved',
  // a kernel peer answered a liveness ping of a silent TCP path (its pong to KERNEL_PING_PORT);
  // the pings are counted in heartbeat_sent, a carrier dropped for a ping unanswered in
  // heartbeat_timeout (ext/heartbeat.ts)
  'heartbeat_pong',
] as const;

/** A counter's name, as the kernel names its RDS counters (`stack.counters.get(name)`). */
export type RdsCounterName = (typeof RDS_COUNTER_NAMES)[number];

/**
 * Each counter's slot, so code that counts per message pays an array index rather than a lookup
 * by name (measured ~30 ns each; a receive path bumps several per message).
 */
export const RDS_CTR: { readonly [K in RdsCounterName]: number } = Object.freeze(
  Object.fromEntries(RDS_COUNTER_NAMES.map((n, i) => [n, i])) as Record<RdsCounterName, number>,
);

export class RdsStats {
  private readonly values = new Float64Array(RDS_COUNTER_NAMES.length);

  /** Counts `by` on the counter in `slot`: counters.add(RDS_CTR.recv_delivered). */
  add(slot: number, by = 1): void {
    this.values[slot]! += by;
  }

  get(name: RdsCounterName): number {
    return this.values[RDS_CTR[name]]!;
  }

  /** Sets every counter back to zero (stack.resetStats()). */
  reset(): void {
    this.values.fill(0);
  }

  /** A plain snapshot { name: value }, cheap enough to take every second. */
  snapshot(): Record<RdsCounterName, number> {
    const out = {} as Record<RdsCounterName, number>;
    RDS_COUNTER_NAMES.forEach((n, i) => (out[n] = this.values[i]!));
    return out;
  }
}
