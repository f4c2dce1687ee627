#!/usr/bin/env python3
"""Kernel-side RDS peer for interop tests: AF_RDS sockets through python's socket module.

  rdspeer.py recv ADDR PORT N [READY_ADDR READY_PORT]
        print one JSON line per message: from, port, len, sha256; once bound, send b'ready' to READY
        (READY_ADDR "file": create /rdsinst/ready.PORT instead, so the host is not contacted first)
  rdspeer.py send ADDR PORTS DEST DPORT N MAXSIZE [SEED]
        from each port of the comma-separated PORTS in turn, send N pattern messages (blocking;
        with RDSPEER_NONBLOCK=1 MSG_DONTWAIT, a refused one printed with its errno); every socket
        stays open until the kernel holds none of their messages (up to 60 s); with
        RDSPEER_SENT_FILE=NAME, /rdsinst/NAME is created once all are sent
  rdspeer.py trickle ADDR PORTS DEST DPORT N SIZE PACE_MS
        N rounds, each one blocking send of [index u32][pattern] (SIZE bytes) from every port of
        PORTS, PACE_MS apart: a steady stream across a peer's restart. After 10 rounds creates
        /rdsinst/ready.FIRSTPORT; then waits (up to 60 s) until the kernel holds none of them
  rdspeer.py echo ADDR PORT N
        the kernel side of examples/kernel-peer.mjs (its C echo server): once bound, create
        /rdsinst/ready.PORT; send each of N messages back to its sender, print one JSON line each;
        exit once the kernel holds none of the replies (up to 30 s)
  rdspeer.py ping ADDR DEST              send a zero-length ping to DEST:0, wait for the pong
  rdspeer.py congest ADDR PORT RCVBUF HOLD_S READY_ADDR READY_PORT
        bind with a small SO_RCVBUF, say ready, read nothing for HOLD_S seconds, then drain
  rdspeer.py flood ADDR PORT DEST DPORT CTRLPORT
        send 2000-byte messages with MSG_DONTWAIT until ENOBUFS, tell DEST:CTRLPORT "enobufs",
        retry until a send succeeds again, tell DEST:CTRLPORT "resumed"
  rdspeer.py counters                    RDS_INFO_COUNTERS as JSON
  rdspeer.py conns                       one JSON line per RDS_INFO_CONNECTIONS record (laddr, faddr,
        transport, flags, tos), then per RDS_INFO_IB_CONNECTIONS record (ib, laddr, faddr, tos, sl)
  rdspeer.py mesh ADDR N MAXSIZE SEED PAIR...
        many sockets each way at once, each verifying exact once-only in-order delivery. A PAIR is
        rPORT@PEER:PPORT (kernel PORT receives N messages from PEER:PPORT) or sPORT@PEER:PPORT
        (kernel PORT sends N to PEER:PPORT). Messages are [index u32][body]; the body is
        pattern(index, size, SEED + sender port). Once every socket is bound, creates
        /rdsinst/ready.mesh; senders keep their sockets open (closing one drops what it has not
        delivered) until /rdsinst/mesh.done appears. One JSON line per pair: got, dups, gaps, bad.
With RDSPEER_TOS=N in the environment every socket sets TOS N (SIOCRDSSETTOS) after bind and
prints {"tos_set": N, "tos_kept": what SIOCRDSGETTOS reads back}.
Addresses may be IPv6 (recv, send, ping): python's socket module only takes IPv4 addresses for
AF_RDS, so those calls go to libc with a sockaddr_in6; a link-local one takes its zone after '%'
(an interface name or index: sin6_scope_id).
"""
import ctypes, hashlib, json, os, select, socket, struct, sys, threading, time

AF_RDS, SOL_RDS, RDS_INFO_COUNTERS = 21, 276, 10000
RDS_INFO_SEND_MESSAGES, RDS_INFO_RETRANS_MESSAGES = 10003, 10004
RDS6_INFO_SEND_MESSAGES, RDS6_INFO_RETRANS_MESSAGES = 10012, 10013
RDS_INFO_CONNECTIONS, RDS_INFO_IB_CONNECTIONS = 10001, 10008


def pattern(i, size, seed=0):
    tile = bytes(((i * 131 + k * 7 + seed) & 0xFF) for k in range(256))
    return (tile * (size // 256 + 1))[:size]


def sizes(n, maxsize):
    out, x = [], 12345
    for i in range(n):
        if i == 0:
            out.append(0)
        elif i == n - 1:
            out.append(maxsize)
        else:
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            out.append(min(maxsize, int(2 ** ((x / 0x7FFFFFFF) * (maxsize.bit_length())))) - 1)
    return out


def mesh_body(i, size, seed):
    return struct.pack('>I', i) + pattern(i, max(0, size - 4), seed)


def mesh(addr, n, maxsize, seed, pairs):
    """See the module doc. Receivers record, not raise, so the test sees every pair's outcome."""
    socks, threads, results, lock = [], [], [], threading.Lock()
    idle = float(os.environ.get('MESH_IDLE_S', '90'))

    def receiver(s, kport, peer):
        st = {'kport': kport, 'peer': '%s:%d' % peer, 'dir': 'to-kernel', 'got': 0, 'dups': 0, 'gaps': 0, 'bad': 0, 'strangers': 0}
        nxt = 0
        s.settimeout(idle)
        try:
            while nxt < n:
                data, src = s.recvfrom(1 << 21)
                if src != peer:
                    st['strangers'] += 1
                    continue
                i = struct.unpack_from('>I', data)[0] if len(data) >= 4 else -1
                if i < nxt:
                    st['dups'] += 1
                    continue
                if i > nxt:
                    st['gaps'] += i - nxt
                    st.setdefault('first_gap', [nxt, i])
                if data != mesh_body(i, len(data), seed + peer[1]):
                    st['bad'] += 1
                st['got'] += 1
                nxt = i + 1
        except socket.timeout:
            st['timeout'] = True
        st['next'] = nxt
        with lock:
            results.append(st)

    def sender(s, kport, peer):
        st = {'kport': kport, 'peer': '%s:%d' % peer, 'dir': 'from-kernel', 'sent': 0}
        x = (kport * 2654435761) & 0x7FFFFFFF
        for i in range(n):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            data = mesh_body(i, 4 + x % (maxsize - 3), seed + kport)
            while True:
                try:
                    s.sendto(data, peer)
                    break
                except OSError as e:
                    if e.errno not in (105, 11):  # ENOBUFS, EAGAIN: the receiver is congested
                        raise
                    time.sleep(0.01)
            st['sent'] += 1
        with lock:
            results.append(st)

    for p in pairs:
        kind, rest = p[0], p[1:]
        kport, peer = rest.split('@')
        pa, pp = peer.rsplit(':', 1)
        s = sock(addr, int(kport))
        socks.append(s)
        threads.append(threading.Thread(target=receiver if kind == 'r' else sender, args=(s, int(kport), (pa, int(pp)))))
    open('/rdsinst/ready.mesh', 'w').close()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        print(json.dumps(r), flush=True)
    deadline = time.time() + idle
    while not os.path.exists('/rdsinst/mesh.done') and time.time() < deadline:
        time.sleep(0.1)
    for s in socks:
        s.close()


class Rds6:
    """An AF_RDS socket on IPv6 addresses: bind, sendto and recvfrom through libc."""

    libc = ctypes.CDLL(None, use_errno=True)

    def __init__(self, s):
        self.s, self.timeout = s, None

    @staticmethod
    def sa(addr, port):
        # A link-local address may carry its zone (fe80::2%eth0): sin6_scope_id, as the kernel needs.
        addr, _, zone = addr.partition('%')
        scope = (int(zone) if zone.isdigit() else socket.if_nametoindex(zone)) if zone else 0
        return ctypes.create_string_buffer(struct.pack('=HHI16sI', socket.AF_INET6, socket.htons(port), 0,
                                                       socket.inet_pton(socket.AF_INET6, addr), scope), 28)

    def check(self, r, what):
        if r < 0:
            e = ctypes.get_errno()
            raise OSError(e, '%s: %s' % (what, __import__('os').strerror(e)))
        return r

    def bind(self, ap):
        b = self.sa(*ap)
        self.check(self.libc.bind(self.s.fileno(), b, 28), 'bind')

    def settimeout(self, t):
        self.timeout = t

    def sendto(self, data, *args):
        # As socket.sendto: (data, address) or (data, flags, address).
        flags, ap = (0, args[0]) if len(args) == 1 else args
        b = self.sa(*ap)
        self.check(self.libc.sendto(self.s.fileno(), data, len(data), flags, b, 28), 'sendto')

    def recvfrom(self, n):
        if self.timeout is not None and not select.select([self.s], [], [], self.timeout)[0]:
            raise socket.timeout('timed out')
        buf = ctypes.create_string_buffer(n)
        sa = ctypes.create_string_buffer(28)
        ln = ctypes.c_uint32(28)
        r = self.check(self.libc.recvfrom(self.s.fileno(), buf, n, 0, sa, ctypes.byref(ln)), 'recvfrom')
        fam, port, _, a, _ = struct.unpack('=HHI16sI', sa.raw)
        return buf.raw[:r], (socket.inet_ntop(socket.AF_INET6, a), socket.ntohs(port))


def info(s, opt):
    """One RDS_INFO_* snapshot: (item size, raw bytes); grows the buffer while the kernel says ENOSPC."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(size)
        ln = ctypes.c_uint32(size)
        r = libc.getsockopt(s.fileno(), SOL_RDS, opt, buf, ctypes.byref(ln))
        if r >= 0:
            return r, buf.raw[:ln.value]
        if ctypes.get_errno() != 28 or size >= 1 << 26:
            raise OSError(ctypes.get_errno(), 'getsockopt RDS_INFO %d' % opt)
        size = max(size * 2, ln.value)


def unacked(s, ports):
    """Messages from `ports` still queued or unacknowledged on any connection (IPv4 and IPv6)."""
    n = 0
    # (option, offset of lport in struct rds_info_message / rds6_info_message)
    for opt, lport_off in ((RDS_INFO_SEND_MESSAGES, 20), (RDS_INFO_RETRANS_MESSAGES, 20),
                           (RDS6_INFO_SEND_MESSAGES, 44), (RDS6_INFO_RETRANS_MESSAGES, 44)):
        item, raw = info(s, opt)
        for off in range(0, len(raw) - item + 1 if item else 0, item or 1):
            if struct.unpack_from('>H', raw, off + lport_off)[0] in ports:
                n += 1
    return n


def wait_unacked(s, ports, limit_s):
    """Waits (up to limit_s) until the kernel holds no message from `ports`; returns whether it got there."""
    end = time.time() + limit_s
    while unacked(s, ports):
        if time.time() > end:
            return False
        time.sleep(0.05)
    return True


def sock(addr, port, sndbuf=8 << 20, rcvbuf=None):
    s = socket.socket(AF_RDS, socket.SOCK_SEQPACKET, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if ':' in addr:
        s = Rds6(s)
    s.bind((addr, port))
    if os.environ.get('RDSPEER_TOS'):
        import fcntl
        tos = int(os.environ['RDSPEER_TOS'])
        fd = getattr(s, 's', s).fileno()
        fcntl.ioctl(fd, 0x89E0, struct.pack('B', tos))  # SIOCRDSSETTOS
        kept = struct.unpack('B', fcntl.ioctl(fd, 0x89E1, b'\0'))[0]  # SIOCRDSGETTOS
        print(json.dumps({'tos_set': tos, 'tos_kept': kept}), flush=True)
    return s


def main(argv):
    cmd = argv[0]
    if cmd == 'recv':
        s = sock(argv[1], int(argv[2]))
        s.settimeout(120)
        if len(argv) > 4 and argv[4] == 'file':
            open('/rdsinst/ready.%s' % argv[2], 'w').close()
        elif len(argv) > 5:
            s.sendto(b'ready', (argv[4], int(argv[5])))
        for _ in range(int(argv[3])):
            data, (a, p) = s.recvfrom(1 << 21)
            print(json.dumps({'from': a, 'port': p, 'len': len(data), 'sha256': hashlib.sha256(data).hexdigest()}), flush=True)
    elif cmd == 'send':
        dest = (argv[3], int(argv[4]))
        n, maxsize = int(argv[5]), int(argv[6])
        seed = int(argv[7]) if len(argv) > 7 else 0
        # Every socket stays open until the kernel has let go of its messages: closing an RDS
        # socket discards what it has queued and not yet had acknowledged (rds_send_drop_to), so
        # a sender that closed each port's socket as it moved on lost those messages whenever
        # the connection was not up yet (after the peer restarted, for one).
        socks, ports = [], [int(p) for p in argv[2].split(',')]
        flags = socket.MSG_DONTWAIT if os.environ.get('RDSPEER_NONBLOCK') else 0
        for port in ports:
            s = sock(argv[1], port)
            socks.append(s)
            for i, size in enumerate(sizes(n, maxsize)):
                data = pattern(i, size, seed)
                try:
                    s.sendto(data, flags, dest)
                except OSError as e:  # without blocking (EAGAIN, ENOBUFS): the message was not taken
                    if not flags:
                        raise
                    print(json.dumps({'port': port, 'i': i, 'errno': e.errno}), flush=True)
                    continue
                print(json.dumps({'port': port, 'i': i, 'len': size, 'sha256': hashlib.sha256(data).hexdigest()}), flush=True)
        if os.environ.get('RDSPEER_SENT_FILE'):
            open('/rdsinst/%s' % os.environ['RDSPEER_SENT_FILE'], 'w').close()
        probe = socket.socket(AF_RDS, socket.SOCK_SEQPACKET, 0)  # RDS_INFO works on any RDS socket
        # DRAIN_S: how long to wait for the peer's acks. Over IB a kernel peer (and rds-socket,
        # which acks as it does) acknowledges only messages that ask for it (one in
        # net.rds.max_unacked_packets) or on its own next send: the last few may wait for good.
        drained = wait_unacked(probe, set(ports), float(os.environ.get('DRAIN_S', '60')))
        print(json.dumps({"sent": n, "drained": drained}), flush=True)
    elif cmd == 'trickle':
        dest, n, size, pace = (argv[3], int(argv[4])), int(argv[5]), int(argv[6]), float(argv[7]) / 1000
        ports = [int(p) for p in argv[2].split(',')]
        socks = [sock(argv[1], port) for port in ports]
        for i in range(n):
            if i == 10:
                open('/rdsinst/ready.%d' % ports[0], 'w').close()
            for port, s in zip(ports, socks):
                s.sendto(mesh_body(i, size, port), dest)
            time.sleep(pace)
        probe = socket.socket(AF_RDS, socket.SOCK_SEQPACKET, 0)
        print(json.dumps({"sent": n, "drained": wait_unacked(probe, set(ports), 60)}), flush=True)
    elif cmd == 'echo':
        s = sock(argv[1], int(argv[2]))
        s.settimeout(120)
        open('/rdsinst/ready.%s' % argv[2], 'w').close()
        for _ in range(int(argv[3])):
            data, (a, p) = s.recvfrom(65536)
            s.sendto(data, (a, p))
            print(json.dumps({'from': a, 'port': p, 'data': data.decode('utf-8', 'replace')}), flush=True)
        # Closing discards replies the kernel has not had acknowledged (see 'send'): wait first.
        probe = socket.socket(AF_RDS, socket.SOCK_SEQPACKET, 0)
        print(json.dumps({'echoed': int(argv[3]), 'drained': wait_unacked(probe, {int(argv[2])}, 30)}), flush=True)
    elif cmd == 'ping':
        s = sock(argv[1], 0)
        s.settimeout(20)
        t0 = time.time()
        s.sendto(b'', (argv[2], 0))
        data, (a, p) = s.recvfrom(100)
        print(json.dumps({'from': a, 'port': p, 'len': len(data), 'usec': int((time.time() - t0) * 1e6)}), flush=True)
    elif cmd == 'congest':
        s = sock(argv[1], int(argv[2]), rcvbuf=int(argv[3]))
        s.sendto(b'ready', (argv[5], int(argv[6])))
        print(json.dumps({'bound': True}), flush=True)
        time.sleep(float(argv[4]))
        s.settimeout(5)
        n = 0
        try:
            while True:
                s.recvfrom(1 << 21)
                n += 1
        except socket.timeout:
            pass
        print(json.dumps({'drained': n}), flush=True)
    elif cmd == 'flood':
        import errno
        s = sock(argv[1], int(argv[2]))
        dest, ctrl = (argv[3], int(argv[4])), (argv[3], int(argv[5]))
        sent, deadline = 0, time.time() + 60
        while time.time() < deadline:
            try:
                s.sendto(b'x' * 2000, socket.MSG_DONTWAIT, dest)
                sent += 1
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    break
                if e.errno == errno.EAGAIN:
                    time.sleep(0.01)
                    continue
                raise
        else:
            print(json.dumps({'error': 'never congested', 'sent': sent}), flush=True)
            return 1
        print(json.dumps({'enobufs': True, 'sent': sent}), flush=True)
        s.sendto(b'enobufs', ctrl)
        while time.time() < deadline:
            try:
                s.sendto(b'y', socket.MSG_DONTWAIT, dest)
                break
            except OSError as e:
                if e.errno not in (errno.ENOBUFS, errno.EAGAIN):
                    raise
                time.sleep(0.05)
        else:
            print(json.dumps({'error': 'never resumed'}), flush=True)
            return 1
        print(json.dumps({'resumed': True}), flush=True)
        s.sendto(b'resumed', ctrl)
    elif cmd == 'mesh':
        mesh(argv[1], int(argv[2]), int(argv[3]), int(argv[4]), argv[5:])
    elif cmd == 'counters':
        libc = ctypes.CDLL(None, use_errno=True)
        s = socket.socket(AF_RDS, socket.SOCK_SEQPACKET, 0)
        buf = ctypes.create_string_buffer(1 << 16)
        ln = ctypes.c_uint32(len(buf))
        r = libc.getsockopt(s.fileno(), SOL_RDS, RDS_INFO_COUNTERS, buf, ctypes.byref(ln))
        if r < 0:
            raise OSError(ctypes.get_errno(), 'getsockopt RDS_INFO_COUNTERS')
        out = {}
        for off in range(0, ln.value, r):
            name, value = struct.unpack_from('32sQ', buf.raw, off)
            out[name.rstrip(b'\0').decode()] = value
        print(json.dumps(out), flush=True)
    elif cmd == 'conns':
        s = socket.socket(AF_RDS, socket.SOCK_SEQPACKET, 0)
        item, raw = info(s, RDS_INFO_CONNECTIONS)
        # struct rds_info_connection: next_tx_seq, next_rx_seq, laddr, faddr, transport[16], flags, tos
        for off in range(0, len(raw) - item + 1 if item else 0, item or 1):
            tx, rx, la, fa, tr, flags, tos = struct.unpack_from('<QQ4s4s16sBB', raw, off)
            print(json.dumps({'laddr': socket.inet_ntoa(la), 'faddr': socket.inet_ntoa(fa),
                              'transport': tr.rstrip(b'\0').decode(), 'flags': flags, 'tos': tos,
                              'next_tx_seq': tx, 'next_rx_seq': rx}), flush=True)
        item, raw = info(s, RDS_INFO_IB_CONNECTIONS)
        # struct rds_info_rdma_connection: src, dst, two GIDs, five u32, then tos and sl
        for off in range(0, len(raw) - item + 1 if item else 0, item or 1):
            la, fa = struct.unpack_from('4s4s', raw, off)
            tos, sl = struct.unpack_from('BB', raw, off + 60)
            print(json.dumps({'ib': True, 'laddr': socket.inet_ntoa(la), 'faddr': socket.inet_ntoa(fa),
                              'tos': tos, 'sl': sl}), flush=True)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
