#!/bin/bash
# Guest init after switch_root: network, RDS modules, then serve command files from /rdsinst/queue
# until /rdsinst/stop appears.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
exec </dev/null >/dev/console 2>&1
# /tmp stays on the overlay: the project may live under /tmp on the host.
mount -t tmpfs -o mode=755 run /run
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs shm /dev/shm
IP=10.77.0.2/24 IP6=
for a in $(cat /proc/cmdline); do case "$a" in rds.ip=*) IP="${a#rds.ip=}";; rds.ip6=*) IP6="${a#rds.ip6=}";; esac; done
ip link set lo up
modprobe virtio_net
for i in $(seq 50); do [ -e /sys/class/net/eth0 ] && break; sleep 0.05; done
ip addr add "$IP" dev eth0
# nodad: usable at once (no duplicate address detection on a link with one host); kept when the
# link flaps (tests take eth0 down and up; IPv6 would otherwise drop the address).
if [ -n "$IP6" ]; then
  sysctl -qw net.ipv6.conf.eth0.keep_addr_on_down=1
  ip addr add "$IP6" dev eth0 nodad
fi
ip link set eth0 up
modprobe rds_tcp
# let kernel senders use 1 MiB messages (SO_SNDBUF is capped by wmem_max)
sysctl -qw net.core.wmem_max=16777216 net.core.rmem_max=16777216
trap 'sync; echo o > /proc/sysrq-trigger' EXIT
echo "uptime $(cut -d' ' -f1 /proc/uptime)s, $(uname -r)" > /rdsinst/ready
while [ ! -e /rdsinst/stop ]; do
  for req in /rdsinst/queue/*.sh; do
    [ -e "$req" ] || continue
    id=${req%.sh}
    mv "$req" "$id.run"
    ( cd /tmp && bash "$id.run" > "$id.out" 2>&1; echo $? > "$id.rc.tmp"; mv "$id.rc.tmp" "$id.rc" ) &
  done
  sleep 0.05
done
