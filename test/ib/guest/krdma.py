#!/usr/bin/env python3
"""A kernel program using the kernel's RDS RDMA API, for test/ib/kernel-rdma.test.ts (npm run test:ib).

  krdma.py ADDR PORT

Binds an AF_RDS socket at ADDR:PORT (an address of the kernel guest's RDMA device, so the socket's
transport is the kernel's RDS/IB) and serves commands that arrive as RDS messages, answering each
to its sender with one message: a JSON line, a newline, then bytes where the command returns some.
Every command and answer is also printed as a JSON line on stdout and in /rdsinst/krdma-ADDR.log
(which the test reads when a scenario fails, while the program may still be waiting).

  map SIZE FLAGS SEED   allocate SIZE bytes filled with pattern(SEED), register them with
                        RDS_CMSG_RDMA_MAP on the answer (so the answer carries the RDMA_DEST
                        extension and the cookie); answers {"cookie"}. FLAGS as rds_get_mr_args.
                        (RDS_GET_MR without a connection answers EOPNOTSUPP on FRWR devices such as
                        rxe: the kernel registers through a connection's queue pair, so MAP it is.)
  dump COOKIE OFF LEN   answers the bytes of that region at OFF
  free COOKIE FLAGS     RDS_FREE_MR; answers {"rc"}
  read OFF LEN TOKEN [fence]   the command message carries RDS_CMSG_RDMA_DEST (the peer's cookie): post an
                        RDMA READ of LEN bytes at OFF of the peer's region (RDS_CMSG_RDMA_ARGS with
                        RDS_RDMA_NOTIFY_ME) on a message "rdma-read TOKEN", wait for its
                        RDS_CMSG_RDMA_STATUS, answer {"token", "status"} and the bytes read
                        (above 256 KiB, their "sha256" instead);
                        with "fence", RDS_RDMA_FENCE: the message goes only once the READ is done
  write OFF LEN TOKEN SEED [COOKIE]   the same with an RDMA WRITE of pattern(SEED); COOKIE, if
                        given, instead of the message's RDMA_DEST (a cookie the peer released)
  gotten                answers {"got": [...]}: the payloads (first 32 bytes) of every other message
  bye                   answers {"bye": true} and exits
SIGUSR1 frees every region (RDS_FREE_MR with RDS_RDMA_INVALIDATE), as an application does when its
peer went away: the kernel does not finish shutting a connection down while registrations made
through it are still valid, and only an invalidating free (or enough other frees) makes it flush
them at once.

Test-only: it runs on a private guest link and trusts its peer.
"""
import ctypes, hashlib, json, signal, socket, struct, sys

AF_RDS, SOL_RDS = 21, 276
RDS_FREE_MR = 3
RDS_CMSG_RDMA_ARGS, RDS_CMSG_RDMA_DEST, RDS_CMSG_RDMA_MAP, RDS_CMSG_RDMA_STATUS = 1, 2, 3, 4
RDS_RDMA_READWRITE, RDS_RDMA_FENCE, RDS_RDMA_INVALIDATE, RDS_RDMA_NOTIFY_ME = 0x1, 0x2, 0x4, 0x20


def pattern(size, seed):
    tile = bytes(((k * 7 + seed) & 0xFF) for k in range(256))
    return (tile * (size // 256 + 1))[:size]


LOG = None


def log(obj):
    line = json.dumps(obj)
    print(line, flush=True)
    if LOG is not None:
        LOG.write(line + '\n')
        LOG.flush()


class Server:
    def __init__(self, addr, port):
        self.s = socket.socket(AF_RDS, socket.SOCK_SEQPACKET, 0)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.s.bind((addr, port))
        self.s.settimeout(150)
        self.regions = {}  # cookie -> ctypes buffer (kept alive while registered)
        self.got = []

    def free_all(self, *_):
        for cookie in list(self.regions):
            try:
                self.s.setsockopt(SOL_RDS, RDS_FREE_MR, struct.pack('=QQ', cookie, RDS_RDMA_INVALIDATE))
                log({'freed': cookie})
            except OSError as e:
                log({'freed': cookie, 'errno': e.errno})
            del self.regions[cookie]

    def answer(self, to, meta, data=b'', cmsgs=()):
        log({'answer': meta, 'to': list(to), 'len': len(data)})
        self.s.sendmsg([json.dumps(meta).encode() + b'\n' + data], list(cmsgs), 0, to)

    def recv(self):
        data, anc, _flags, src = self.s.recvmsg(1 << 21, 4096)
        dest = status = None
        for level, kind, d in anc:
            if level == SOL_RDS and kind == RDS_CMSG_RDMA_DEST:
                dest = struct.unpack('=Q', d[:8])[0]
            elif level == SOL_RDS and kind == RDS_CMSG_RDMA_STATUS:
                status = struct.unpack('=Qi', d[:12])
        return data, src, dest, status

    def rdma(self, to, cookie, off, length, token, write, seed, fence=False):
        local = ctypes.create_string_buffer(pattern(length, seed) if write else b'', length)
        iov = (ctypes.c_uint64 * 2)(ctypes.addressof(local), length)
        flags = RDS_RDMA_NOTIFY_ME | (RDS_RDMA_READWRITE if write else 0) | (RDS_RDMA_FENCE if fence else 0)
        args = struct.pack('=QQQQQQQ', cookie, off, length, ctypes.addressof(iov), 1, flags, token)
        name = b'rdma-write %d' % token if write else b'rdma-read %d' % token
        self.s.sendmsg([name], [(SOL_RDS, RDS_CMSG_RDMA_ARGS, args)], 0, to)
        # The status comes through recvmsg as a 0-byte read with RDS_CMSG_RDMA_STATUS, ahead of any
        # message; messages that arrive meanwhile are recorded.
        while True:
            data, src, _dest, status = self.recv()
            if status is not None:
                break
            self.got.append(data[:32].decode(errors='replace'))
            log({'meanwhile': data[:32].decode(errors='replace'), 'from': list(src)})
        meta = {'token': status[0], 'status': status[1]}
        # The bytes only for a READ that succeeded, and only up to 256 KiB: a 1 MiB READ's bytes do
        # not fit in one answer (EMSGSIZE), so one above 256 KiB answers their SHA-256 instead.
        body = b'' if write or status[1] != 0 else local.raw
        if len(body) > 262144:
            meta['sha256'] = hashlib.sha256(body).hexdigest()
            body = b''
        self.answer(to, meta, body)

    def serve(self):
        while True:
            data, src, dest, status = self.recv()
            if status is not None:
                log({'stray_status': list(status)})
                continue
            words = data.split(b'\n', 1)[0].decode(errors='replace').split()
            log({'cmd': words, 'from': list(src), 'rdma_dest': dest})
            cmd = words[0] if words else ''
            if cmd == 'map':
                size, flags, seed = int(words[1]), int(words[2]), int(words[3])
                mem = ctypes.create_string_buffer(pattern(size, seed), size)
                cookie = ctypes.c_uint64(0)
                args = struct.pack('=QQQQ', ctypes.addressof(mem), size, ctypes.addressof(cookie), flags)
                try:
                    self.answer(src, {'mapping': size}, b'', [(SOL_RDS, RDS_CMSG_RDMA_MAP, args)])
                except OSError as e:
                    self.answer(src, {'errno': e.errno})
                    continue
                self.regions[cookie.value] = mem
                log({'cookie': cookie.value})
            elif cmd == 'dump':
                mem = self.regions.get(int(words[1]))
                off, length = int(words[2]), int(words[3])
                self.answer(src, {'dump': mem is not None}, mem.raw[off:off + length] if mem is not None else b'')
            elif cmd == 'free':
                try:
                    self.s.setsockopt(SOL_RDS, RDS_FREE_MR, struct.pack('=QQ', int(words[1]), int(words[2])))
                    self.regions.pop(int(words[1]), None)
                    self.answer(src, {'rc': 0})
                except OSError as e:
                    self.answer(src, {'rc': -e.errno})
            elif cmd in ('read', 'write'):
                off, length, token = int(words[1]), int(words[2]), int(words[3])
                seed = int(words[4]) if cmd == 'write' else 0
                if cmd == 'write' and len(words) > 5:
                    dest = int(words[5])
                fence = cmd == 'read' and words[4:5] == ['fence']
                try:
                    self.rdma(src, dest or 0, off, length, token, cmd == 'write', seed, fence)
                except OSError as e:
                    self.answer(src, {'token': token, 'errno': e.errno})
            elif cmd == 'gotten':
                self.answer(src, {'got': self.got})
            elif cmd == 'bye':
                self.answer(src, {'bye': True})
                return
            else:
                self.got.append(data[:32].decode(errors='replace'))


if __name__ == '__main__':
    LOG = open('/rdsinst/krdma-%s.log' % sys.argv[1], 'w')
    srv = Server(sys.argv[1], int(sys.argv[2]))
    signal.signal(signal.SIGUSR1, srv.free_all)
    open('/rdsinst/ready.krdma', 'w').close()
    srv.serve()
