// Talking to a kernel AF_RDS program: rds-socket speaks the Linux kernel's RDS/TCP on the wire, so
// a C program on a kernel RDS socket and this Node program exchange messages as two kernels would.
// This program sends "ping N" to the kernel program and prints its answers.
//   node examples/kernel-peer.mjs <local address> <kernel host's address> [port, default 4000]
// On the kernel host (modprobe rds_tcp), an echo server in C, built with `cc -o rds-echo rds-echo.c`
// and run as `./rds-echo <its address> 4000`:
//
//   #include <arpa/inet.h>
//   #include <netinet/in.h>
//   #include <stdio.h>
//   #include <stdlib.h>
//   #include <sys/socket.h>
//   #ifndef AF_RDS
//   #define AF_RDS 21
//   #endif
//   int main(int argc, char **argv) {
//     int fd = socket(AF_RDS, SOCK_SEQPACKET, 0);
//     struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
//     inet_pton(AF_INET, argv[1], &me.sin_addr);
//     if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof me) < 0) { perror("rds"); return 1; }
//     for (;;) {
//       char buf[65536]; struct sockaddr_in from; socklen_t fl = sizeof from;
//       ssize_t n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
//       if (n >= 0) sendto(fd, buf, n, 0, (struct sockaddr *)&from, fl);
//     }
//   }
//
// The two hosts must reach each other on TCP port 16385 (RDS/TCP's). With a kernel peer,
// `send({ confirm: true })` resolves once the kernel's TCP acknowledged the message (the kernel's
// own guarantee), not once its application read it (docs/reliability.md). It needs a kernel with
// rds_tcp, so `npm test` does not run it: `npm run test:interop` does
// (test/interop/kernel-example.test.ts), in qemu guests of Linux 6.1, 6.12 and 7.x, against a Python
// AF_RDS echo program that does what the C one above does. Needs `npm run build` first in a checkout.
import { RdsSocket } from 'rds-socket';

const [local, kernel, portArg = '4000'] = process.argv.slice(2);
if (!local || !kernel) {
  console.error('usage: node examples/kernel-peer.mjs <local address> <kernel host address> [port]');
  process.exit(2);
}
const port = Number(portArg);
const sock = new RdsSocket();
await sock.bind({ address: local, port });
for (let i = 1; i <= 3; i++) {
  await sock.send(Buffer.from(`ping ${i}`), { address: kernel, port }, { confirm: true, timeout: 10000 });
  const reply = await sock.recv({ timeout: 10000 });
  console.log(`kernel ${reply.address}:${reply.port} answered "${reply.data}"`);
}
await sock.close();
