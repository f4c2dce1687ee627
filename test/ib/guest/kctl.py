#!/usr/bin/env python3
"""Command server in the kernel guest for test/ib/kernel-ib.test.ts (npm run test:ib).

  kctl.py ADDR PORT

The test runs in the other guest (rds-socket's), which cannot reach this guest's command queue, so
it asks here over a TCP connection on the link between the two guests: one request per connection,
a JSON line {"cmd": bash command, "timeout": seconds}, answered by one JSON line {"rc", "out"}
(stdout and stderr) when the command has finished. Requests run concurrently (a kernel receiver
runs while the test sends). Test-only: it runs anything it is given, on a private guest link.
"""
import json, socketserver, subprocess, sys


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        req = json.loads(self.rfile.readline())
        try:
            p = subprocess.run(['bash', '-c', req['cmd']], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=float(req.get('timeout', 120)))
            res = {'rc': p.returncode, 'out': p.stdout.decode(errors='replace')}
        except subprocess.TimeoutExpired as e:
            res = {'rc': 124, 'out': (e.stdout or b'').decode(errors='replace') + '\n[kctl: timed out]'}
        self.wfile.write((json.dumps(res) + '\n').encode())


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


if __name__ == '__main__':
    with Server((sys.argv[1], int(sys.argv[2])), Handler) as s:
        print('kctl listening', flush=True)
        s.serve_forever()
