#!/usr/bin/env python3
"""The nemesis cluster's kernel peer: one application process inside a qemu guest, using the
guest kernel's own AF_RDS sockets (rds_tcp), doing what nemesis/app.mjs does for rds-socket's
nodes so the same checker reads its history.

  kernel-app.py CFG_JSON      (run by nemesis/kernel-node.mjs inside the guest)

CFG: proc, epoch, seed, addr, ports, slow (ports read slowly), dests ("addr:port" of every socket
of the group), dir (the guest's view of the instance directory, shared with the host).
Files under dir: hist/<proc>.<epoch>.jsonl (the history, one record per line, flushed at once, in
app.mjs's format), kout.<epoch> (lines for the orchestrator: ready, flushed, exit), kcmd.<epoch>
(the orchestrator's commands, one per line: probe | quiet | drain | end), kpid.<epoch>.
Times: the guest's clock is not the host's, so every record's t is the guest's monotonic clock
plus an offset learnt from dir/hostclock, which the orchestrator rewrites with its Date.now()
every 50 ms: the largest (host - guest) seen is at most the read's delay behind the truth.
The kernel has no send confirmation: every send is a non-blocking sendto (m "msg" or "probe"),
and an errno from it is the sender's error record, as a sendmsg() that threw is in app.mjs.
"""
import errno, hashlib, json, os, random, select, socket, struct, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test', 'interop', 'guest'))
from rdspeer import sock as rds_sock, unacked  # noqa: E402

SOL_RDS, RDS_CANCEL_SENT_TO = 276, 1

cfg = json.loads(sys.argv[1])
D = cfg['dir']
E = cfg['epoch']
os.makedirs(os.path.join(D, 'hist'), exist_ok=True)
hist = open(os.path.join(D, 'hist', '%s.%d.jsonl' % (cfg['proc'], E)), 'a', buffering=1)
kout = open(os.path.join(D, 'kout.%d' % E), 'a', buffering=1)
with open(os.path.join(D, 'kpid.%d' % E), 'w') as f:
    f.write(str(os.getpid()))
offset = None


def host_ms():
    """Host time (ms) from the guest's monotonic clock and the offset read from hostclock."""
    return int(time.monotonic() * 1000 + (offset or 0))


def learn_clock():
    global offset
    try:
        with open(os.path.join(D, 'hostclock')) as f:
            v = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return
    o = v - time.monotonic() * 1000
    if offset is None or o > offset:
        offset = o


def log(rec):
    rec = dict(rec)
    rec['t'] = host_ms()
    hist.write(json.dumps(rec, separators=(',', ':')) + '\n')


def say(ev):
    kout.write(json.dumps({'ev': ev, 'proc': cfg['proc']}, separators=(',', ':')) + '\n')


h = 2166136261
for ch in cfg['proc']:
    h = ((h ^ ord(ch)) * 16777619) & 0xFFFFFFFF
r = random.Random(cfg['seed'] * 7919 + E * 104729 + h)
FILL = bytes(r.getrandbits(8) for _ in range(1 << 16)) * 32  # 2 MiB of noise, as app.mjs's


def size():
    x = r.random()
    if x < 0.02:
        return 0
    if x < 0.62:
        return r.randint(32, 256)
    if x < 0.87:
        return r.randint(257, 8192)
    if x < 0.97:
        return r.randint(8193, 65536)
    if x < 0.995:
        return r.randint(65537, 512 << 10)
    return 1 << 20


def body(inc, q, n):
    """app.mjs's body: 'NM', the incarnation's length and name, q (u32 BE), then filler."""
    if n == 0:
        return b''
    head = b'NM' + bytes([len(inc)]) + inc.encode('latin1') + struct.pack('>I', q)
    start = (q * 7919) % (len(FILL) - n)
    return (head + FILL[start:start + n])[:n] if n >= len(head) else head[:n]


def body_hash(b):
    return hashlib.sha1(b).hexdigest()[:16]


def parse(b):
    if len(b) < 7 or b[0] != 0x4E or b[1] != 0x4D:
        return None
    ln = b[2]
    if len(b) < 7 + ln:
        return None
    return {'s': b[3:3 + ln].decode('latin1'), 'q': struct.unpack('>I', b[3 + ln:7 + ln])[0]}


def dest_of(d):
    a, p = d.rsplit(':', 1)
    return a, int(p)


# hostclock is rewritten every 50 ms and read over 9p, so one reading can be stale and stamp this
# life's `open` records early (the checker would then take a message that reached the kernel before
# the bind for one that vanished): the offset is the best of readings over three writer ticks.
for _ in range(4):
    learn_clock()
    time.sleep(0.05)
log({'ev': 'start', 'proc': cfg['proc'], 'epoch': E, 'pid': os.getpid(), 'kernel': os.uname().release})
socks = []
for k, port in enumerate(cfg['ports']):
    s = rds_sock(cfg['addr'], port, sndbuf=4 << 20, rcvbuf=None if port in cfg['slow'] else 4 << 20)
    s.setblocking(False)
    S = {'port': port, 'name': '%s:%d' % (cfg['addr'], port), 'sock': s, 'slow': port in cfg['slow'],
         's': '%s.%d.%d' % (cfg['proc'], E, k + 1), 'seq': {}, 'next_send': 0.0, 'next_read': 0.0}
    socks.append(S)
    log({'ev': 'open', 's': S['s'], 'sock': S['name']})
dests = cfg['dests']
phase, drain = 'run', False
probed = {S['s']: set() for S in socks}
say('ready')


def log_recv(S, data, frm):
    rec = {'ev': 'recv', 'r': S['s'], 'sock': S['name'], 'from': '%s:%d' % frm, 'h': body_hash(data), 'n': len(data)}
    p = parse(data)
    if p:
        rec.update(p)
    log(rec)


def read_some(S, limit=64):
    """Reads what is queued (up to `limit` messages; one on a slow port unless draining)."""
    for _ in range(limit if (drain or not S['slow']) else 1):
        try:
            data, frm = S['sock'].recvfrom((1 << 20) + 64)
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                return
            raise
        log_recv(S, data, frm)
        if S['slow'] and not drain:
            S['next_read'] = time.monotonic() + r.randint(20, 120) / 1000
            return


def send_one(S, d, kind):
    q = S['seq'].get(d, 0) + 1
    S['seq'][d] = q
    n = 64 if kind == 'probe' else size()
    b = body(S['s'], q, n)
    log({'ev': 'send', 's': S['s'], 'd': d, 'q': q, 'h': body_hash(b), 'n': n, 'm': 'probe' if kind == 'probe' else 'msg'})
    try:
        S['sock'].sendto(b, dest_of(d))
        return True
    except OSError as e:
        log({'ev': 'err', 's': S['s'], 'd': d, 'q': q, 'code': errno.errorcode.get(e.errno, str(e.errno))})
        return False


def cancel(S, d):
    a, p = dest_of(d)
    log({'ev': 'cancel', 's': S['s'], 'd': d})
    sin = struct.pack('=HH4s8x', socket.AF_INET, socket.htons(p), socket.inet_aton(a))
    S['sock'].setsockopt(SOL_RDS, RDS_CANCEL_SENT_TO, sin)


def command(c):
    global phase, drain
    if c == 'probe':
        phase, drain = 'probe', True
    elif c == 'quiet':
        # Sending stops; flushed once the kernel holds none of these sockets' messages (at most
        # 30 s), checked from the loop so reading goes on meanwhile.
        phase = 'quiet'
        flush['until'] = time.monotonic() + 30
    elif c == 'drain':
        drain = True
    elif c == 'end':
        for S in socks:
            for _ in range(100000):
                try:
                    data, frm = S['sock'].recvfrom((1 << 20) + 64)
                except (BlockingIOError, InterruptedError):
                    break
                log_recv(S, data, frm)
            log({'ev': 'end', 's': S['s']})
        say('exit')
        sys.exit(0)


flush = {'until': None}


def flush_check(now):
    left = unacked(socks[0]['sock'], [S['port'] for S in socks])
    if left and now < flush['until']:
        return
    for S in socks:
        log({'ev': 'flushed', 's': S['s'], 'ok': True} if not left else {'ev': 'flushed', 's': S['s'], 'ok': False, 'code': 'ETIMEDOUT'})
    flush['until'] = None
    say('flushed')


cmd_path = os.path.join(D, 'kcmd.%d' % E)
cmd_off = 0
next_stat = next_clock = next_cmd = 0.0
while True:
    now = time.monotonic()
    if now >= next_clock:
        learn_clock()
        next_clock = now + 0.2
    if now >= next_cmd:
        next_cmd = now + 0.1
        try:
            with open(cmd_path) as f:
                f.seek(cmd_off)
                new = f.read()
            if new.endswith('\n'):
                cmd_off += len(new.encode())
                for line in new.splitlines():
                    command(line.strip())
        except FileNotFoundError:
            pass
    if flush['until'] is not None and now >= flush.get('next', 0):
        flush['next'] = now + 0.1
        flush_check(now)
    if now >= next_stat:
        next_stat = now + 1
        with open('/proc/self/statm') as f:
            log({'ev': 'stat', 'rss': int(f.read().split()[1]) * 4096, 'lag': 0})
    for S in socks:
        if phase != 'quiet' and now >= S['next_send']:
            S['next_send'] = now + r.randint(40, 200) / 1000
            free = [d for d in dests if d != S['name']]
            if free:
                if r.random() < 0.003:
                    cancel(S, r.choice(free))
                else:
                    send_one(S, r.choice(free), 'msg')
        if phase == 'probe' and now >= S.get('next_probe', 0):
            S['next_probe'] = now + 0.3  # a refused probe is tried again, not in a tight loop
            for d in dests:
                if d != S['name'] and d not in probed[S['s']] and send_one(S, d, 'probe'):
                    probed[S['s']].add(d)
    ready = [S['sock'] for S in socks if drain or not S['slow'] or now >= S['next_read']]
    waits = [S['next_send'] for S in socks if phase != 'quiet'] + [next_clock, next_cmd, next_stat]
    waits += [S['next_read'] for S in socks if S['slow'] and not drain and S['next_read'] > now]
    timeout = max(0.0, min(waits) - time.monotonic())
    rd, _, _ = select.select(ready, [], [], timeout) if ready else ([], [], time.sleep(timeout))
    for S in socks:
        if S['sock'] in rd:
            read_some(S)
