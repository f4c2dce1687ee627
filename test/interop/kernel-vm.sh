#!/usr/bin/env bash
# A real Linux kernel with RDS, booted under qemu for interop tests.
#   kernel-vm.sh check          exit 0 if this machine can run it (root, qemu or apt), else print why
#   kernel-vm.sh setup          install qemu & co (apt), fetch Debian's kernel, build a busybox initramfs (cached)
#   kernel-vm.sh start          boot the guest in the background inside netns $RDS_NETNS; returns when up
#   kernel-vm.sh exec 'CMD'     run CMD (bash) in the guest, print its output, exit with its status
#   kernel-vm.sh stop           power the guest off and remove the namespace
# The guest's root is this machine's root, read-only over 9p under a tmpfs overlay, so it has python3,
# node and the project. Network: netns $RDS_NETNS holds tap $RDS_TAP with 10.77.0.1, .3 and .4 (/24)
# (and 10.77.0.4 for tools that run as their own node); the guest is 10.77.0.2.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${RDS_KVM_CACHE:-/var/tmp/rds-socket-kernel}"
NETNS="${RDS_NETNS:-rdsint}"
TAP="${RDS_TAP:-rdstap0}"
HOST_IPS=(10.77.0.1 10.77.0.3 10.77.0.4)
GUEST_IP=10.77.0.2
INST="$CACHE/instance"
kver() { ls "$CACHE/kernel/lib/modules" 2>/dev/null | head -n1; }

cmd_check() {
  [ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, tap devices)"; return 1; }
  command -v ip >/dev/null || { echo "needs iproute2"; return 1; }
  command -v qemu-system-x86_64 >/dev/null || command -v apt-get >/dev/null || { echo "needs qemu-system-x86_64 or apt-get to install it"; return 1; }
  [ -e /dev/net/tun ] || { echo "needs /dev/net/tun"; return 1; }
  return 0
}

cmd_setup() {
  export DEBIAN_FRONTEND=noninteractive
  local pkgs=() p
  for p in qemu-system-x86 kmod iproute2 cpio busybox-static; do dpkg -s "$p" >/dev/null 2>&1 || pkgs+=("$p"); done
  if ((${#pkgs[@]})); then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  fi
  mkdir -p "$CACHE/debs"
  if [ -z "$(kver)" ]; then
    (cd "$CACHE/debs"
      apt-get update -qq || true
      local pkg
      pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
      [ -n "$pkg" ] || { echo "cannot resolve linux-image-amd64" >&2; exit 1; }
      ls "${pkg}"_*.deb >/dev/null 2>&1 || apt-get download "$pkg" 2>/dev/null
      rm -rf "$CACHE/kernel"; mkdir -p "$CACHE/kernel"
      dpkg-deb -x "${pkg}"_*.deb "$CACHE/kernel")
  fi
  local v; v=$(kver)
  [ -f "$CACHE/kernel/lib/modules/$v/modules.dep" ] || depmod -b "$CACHE/kernel" "$v"
  if [ ! -f "$CACHE/initramfs.cpio.gz" ] || [ "$HERE/guest/initramfs-init" -nt "$CACHE/initramfs.cpio.gz" ]; then
    local ir="$CACHE/initramfs"
    rm -rf "$ir"; mkdir -p "$ir"/{bin,dev,proc,sys,lower,newroot,rw,mods}
    cp /bin/busybox "$ir/bin/busybox"
    cp "$HERE/guest/initramfs-init" "$ir/init"; chmod +x "$ir/init"
    local m
    for m in virtio_pci 9pnet_virtio 9p overlay; do
      modprobe -d "$CACHE/kernel" -S "$v" --show-depends "$m" | awk '$1=="insmod"{print $2}'
    done | awk '!seen[$0]++' | while read -r ko; do cp "$ko" "$ir/mods/"; basename "$ko" >> "$ir/mods/order"; done
    (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$CACHE/initramfs.cpio.gz"
  fi
  echo "kernel $v ready"
}

netns_up() {
  [ -e "/run/netns/$NETNS" ] || ip netns add "$NETNS"
  ip -n "$NETNS" link set lo up
  ip -n "$NETNS" link show "$TAP" >/dev/null 2>&1 || ip -n "$NETNS" tuntap add dev "$TAP" mode tap
  local a
  for a in "${HOST_IPS[@]}"; do
    ip -n "$NETNS" addr show dev "$TAP" | grep -q "inet $a/" || ip -n "$NETNS" addr add "$a/24" dev "$TAP"
  done
  ip -n "$NETNS" link set "$TAP" up
}

cmd_start() {
  [ -f "$CACHE/initramfs.cpio.gz" ] || cmd_setup
  if [ -f "$CACHE/qemu.pid" ] && kill -0 "$(cat "$CACHE/qemu.pid")" 2>/dev/null; then echo "guest already running"; return 0; fi
  netns_up
  rm -rf "$INST"; mkdir -p "$INST/queue"
  local accel=(-accel tcg,thread=multi,tb-size=512 -cpu max)
  setsid ip netns exec "$NETNS" qemu-system-x86_64 "${accel[@]}" -M q35 -m "${RDS_KVM_MEM:-1536}" -smp 2 \
    -nodefaults -no-user-config -display none -no-reboot \
    -kernel "$CACHE/kernel/boot/vmlinuz-$(kver)" -initrd "$CACHE/initramfs.cpio.gz" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 rds.kroot=$CACHE/kernel rds.init=$HERE/guest/guest-init.sh rds.ip=$GUEST_IP/24" \
    -serial "file:$INST/console.log" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$INST,mount_tag=rdsinst,security_model=none" \
    -netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no" -device virtio-net-pci,netdev=n0,mac=52:54:00:77:00:02 \
    -device virtio-rng-pci < /dev/null > "$INST/qemu.out" 2>&1 &
  echo $! > "$CACHE/qemu.pid"
  local i
  for i in $(seq 1 $(( ${RDS_KVM_BOOT_TIMEOUT:-180} * 10 ))); do
    [ -e "$INST/ready" ] && { echo "guest up ($(tr -d '\n' < "$INST/ready"))"; return 0; }
    kill -0 "$(cat "$CACHE/qemu.pid")" 2>/dev/null || { echo "qemu exited during boot" >&2; cat "$INST/qemu.out" "$INST/console.log" >&2; return 1; }
    sleep 0.1
  done
  echo "guest did not come up; console:" >&2; tail -30 "$INST/console.log" >&2; return 1
}

cmd_exec() {
  [ -e "$INST/ready" ] || { echo "no running guest" >&2; return 3; }
  local id="r$(date +%s%N)$$$RANDOM"
  printf '%s\n' "$*" > "$INST/queue/$id.tmp"
  mv "$INST/queue/$id.tmp" "$INST/queue/$id.sh"
  local i
  for i in $(seq 1 $(( ${RDS_KVM_EXEC_TIMEOUT:-300} * 20 ))); do
    [ -e "$INST/queue/$id.rc" ] && break
    sleep 0.05
  done
  [ -e "$INST/queue/$id.rc" ] || { echo "guest command timed out" >&2; cat "$INST/queue/$id.out" 2>/dev/null; return 124; }
  cat "$INST/queue/$id.out"
  return "$(cat "$INST/queue/$id.rc")"
}

cmd_stop() {
  local pid
  pid=$(cat "$CACHE/qemu.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    : > "$INST/stop"
    local i
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill "$pid" || true
  fi
  rm -f "$CACHE/qemu.pid"
  [ -e "/run/netns/$NETNS" ] && ip netns del "$NETNS" || true
}

case "${1:-}" in
  check) cmd_check ;;
  setup) cmd_setup ;;
  start) cmd_start ;;
  exec) shift; cmd_exec "$@" ;;
  stop) cmd_stop ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
