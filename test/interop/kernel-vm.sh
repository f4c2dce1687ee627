#!/usr/bin/env bash
# A real Linux kernel with RDS, booted under qemu for interop tests.
#   kernel-vm.sh check          exit 0 if this machine can run it (root, qemu or apt), else print why
#   kernel-vm.sh setup          install qemu & co (apt), fetch Debian's kernel, build a busybox initramfs (cached)
#   kernel-vm.sh start          boot the guest in the background inside netns $RDS_NETNS; returns when up
#   kernel-vm.sh exec 'CMD'     run CMD (bash) in the guest, print its output, exit with its status
#   kernel-vm.sh stop           power the guest off and remove the namespace
#   kernel-vm.sh cache          print the cache directory of $RDS_KERNEL (instance files live under it)
#   kernel-vm.sh monitor 'CMD'  send CMD to the guest's qemu monitor (needs RDS_KVM_MONITOR=1 at start)
# $RDS_KERNEL picks the kernel: 6.1 (default: this machine's own Debian suite, bookworm), 6.12
# (Debian trixie) or 7 (Debian sid, 7.x). The newer ones come from a private apt list under the
# cache, so the machine's own apt sources are never touched. Each kernel has its own cache
# ($RDS_KVM_CACHE overrides it).
# The guest's root is this machine's root, read-only over 9p under a tmpfs overlay, so it has python3,
# node and the project. Network: netns $RDS_NETNS holds tap $RDS_TAP with 10.77.0.1, .3 and .4 (/24)
# and fd77::1 and fd77::3 (/64); the guest is 10.77.0.2 and fd77::2.
# A second guest (test/ib's kernel interop): $RDS_KVM_LINK=listen:PORT or connect:PORT adds a NIC
# joined to the other guest's by a qemu socket link on 127.0.0.1:PORT inside $RDS_NETNS (listen
# side first); with $RDS_KVM_NOTAP=1 that link is the guest's only NIC (eth0), with no tap and
# $RDS_KVM_GUEST_IP (default 10.77.0.2/24) on it. $RDS_KVM_KERNEL_FROM names another cache whose
# kernel this one reuses (no second download). $RDS_KVM_LOGLEVEL (default 3) is the guest console
# loglevel: 7 puts every kernel message in $CACHE/instance/console.log.
# $RDS_KVM_MONITOR=1 (debugging a hung guest) gives qemu a monitor on $CACHE/instance/monitor.sock
# and boots with sysrq_always_enabled and nokaslr: `monitor 'sendkey alt-sysrq-w'` (or -t, -l)
# dumps blocked tasks (all tasks, CPU backtraces) to the console even when the guest runs no more
# commands, and `monitor 'info registers'` gives RIPs that the guest's /proc/kallsyms, saved before
# the hang (test/ib/run.sh keeps it as kallsyms in the instance directory), names.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KERNEL="${RDS_KERNEL:-6.1}"
case "$KERNEL" in
  6.1) SUITE=""; DEFAULT_CACHE=/var/tmp/rds-socket-kernel; SMP=2 ;;
  # One vCPU: with two, 7.2 under multi-threaded TCG was seen to die on a stale int3 left by
  # kernel text patching ("Oops: int3" in ktime_get_real_ts64) about a minute after boot.
  6.12) SUITE=trixie; DEFAULT_CACHE=/var/tmp/rds-socket-kernel-6.12; SMP=1 ;;
  7) SUITE=sid; DEFAULT_CACHE=/var/tmp/rds-socket-kernel-7; SMP=1 ;;
  *) echo "RDS_KERNEL must be 6.1, 6.12 or 7, got '$KERNEL'" >&2; exit 2 ;;
esac
CACHE="${RDS_KVM_CACHE:-$DEFAULT_CACHE}"
NETNS="${RDS_NETNS:-rdsint}"
TAP="${RDS_TAP:-rdstap0}"
HOST_IPS=(10.77.0.1/24 10.77.0.3/24 10.77.0.4/24 fd77::1/64 fd77::3/64)
GUEST_IP=${RDS_KVM_GUEST_IP:-10.77.0.2/24}
GUEST_IP=${GUEST_IP%/24}
GUEST_IP6=fd77::2
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
  if [ -n "${RDS_KVM_KERNEL_FROM:-}" ] && [ ! -e "$CACHE/kernel" ]; then ln -s "$RDS_KVM_KERNEL_FROM/kernel" "$CACHE/kernel"; fi
  [ -n "$(kver)" ] || fetch_kernel
  local v; v=$(kver)
  [ -f "$CACHE/kernel/lib/modules/$v/modules.dep" ] || depmod -b "$CACHE/kernel" "$v"
  if [ ! -f "$CACHE/initramfs.cpio.gz" ] || [ "$HERE/guest/initramfs-init" -nt "$CACHE/initramfs.cpio.gz" ]; then
    local ir="$CACHE/initramfs"
    rm -rf "$ir"; mkdir -p "$ir"/{bin,dev,proc,sys,lower,newroot,rw,mods}
    cp /bin/busybox "$ir/bin/busybox"
    cp "$HERE/guest/initramfs-init" "$ir/init"; chmod +x "$ir/init"
    local m
    # A module the kernel has built in (virtio_pci on 7.x) has no file to load: skip it.
    for m in virtio_pci 9pnet_virtio 9p overlay; do
      modprobe -d "$CACHE/kernel" -S "$v" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}' || true
    done | awk '!seen[$0]++' | while read -r ko; do cp "$ko" "$ir/mods/"; basename "$ko" >> "$ir/mods/order"; done
    (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$CACHE/initramfs.cpio.gz"
  fi
  echo "kernel $v ready"
}

# apt-get with a private list for $SUITE (nothing of the machine's apt configuration changes).
apt_suite() {
  local d="$CACHE/apt" uri
  if [ ! -f "$d/sources.list" ]; then
    mkdir -p "$d/lists/partial" "$d/archives/partial"
    uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$uri" ] || uri=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /^https?:/){print $i; exit}}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$uri" ] || uri=http://deb.debian.org/debian
    printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' "$uri" "$SUITE" > "$d/sources.list"
  fi
  apt-get -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o Dir::State::Lists="$d/lists" -o Dir::Cache::Archives="$d/archives" "$@"
}

# Downloads and unpacks Debian's kernel for $KERNEL into $CACHE/kernel (lib/modules/<ver>, with
# the kernel image found by boot_image). sid splits the package into linux-binary-* (the image,
# under usr/lib/modules/<ver>/vmlinuz) and linux-modules-* (xz-compressed modules under
# usr/lib/modules); both layouts end up as lib/modules/<ver> with plain .ko files, which busybox's
# insmod in the initramfs can load.
fetch_kernel() {
  (cd "$CACHE/debs"
    local apt=(apt-get) pkg deps p
    if [ -n "$SUITE" ]; then apt=(apt_suite); "${apt[@]}" update -qq >/dev/null || { echo "apt update for $SUITE failed" >&2; exit 1; }
    else apt-get update -qq || true; fi
    local cache=(apt-cache)
    [ -n "$SUITE" ] && cache=(apt-cache -o Dir::Etc::SourceList="$CACHE/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$CACHE/apt/lists")
    pkg=$("${cache[@]}" depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
    [ -n "$pkg" ] || { echo "cannot resolve linux-image-amd64${SUITE:+ in $SUITE}" >&2; exit 1; }
    deps=$("${cache[@]}" depends "$pkg" | awk '/Depends: linux-(binary|modules)-/{print $2}' | sort -u)
    rm -f ./*.deb
    for p in "$pkg" $deps; do
      "${apt[@]}" download -qq "$p" >/dev/null 2>&1 || { echo "cannot download $p" >&2; exit 1; }
    done
    rm -rf "$CACHE/kernel"; mkdir -p "$CACHE/kernel"
    for p in ./*.deb; do dpkg-deb -x "$p" "$CACHE/kernel"; done)
  local k="$CACHE/kernel"
  if [ -d "$k/usr/lib/modules" ]; then
    mkdir -p "$k/lib/modules"
    mv "$k/usr/lib/modules/"* "$k/lib/modules/"
    rm -rf "$k/usr/lib/modules"
  fi
  find "$k/lib/modules" -name '*.ko.xz' -exec unxz -q {} +
  find "$k/lib/modules" -name '*.ko.zst' -exec sh -c 'for f; do zstd -qd --rm "$f"; done' sh {} +
  rm -f "$k/lib/modules/$(kver)/modules.dep"
}

# The kernel image: boot/vmlinuz-<ver> (bookworm, trixie) or lib/modules/<ver>/vmlinuz (sid).
boot_image() {
  local v; v=$(kver)
  if [ -f "$CACHE/kernel/boot/vmlinuz-$v" ]; then echo "$CACHE/kernel/boot/vmlinuz-$v"; else echo "$CACHE/kernel/lib/modules/$v/vmlinuz"; fi
}

netns_up() {
  [ -e "/run/netns/$NETNS" ] || ip netns add "$NETNS"
  ip -n "$NETNS" link set lo up
  [ "${RDS_KVM_NOTAP:-}" = 1 ] && return 0
  ip -n "$NETNS" link show "$TAP" >/dev/null 2>&1 || ip -n "$NETNS" tuntap add dev "$TAP" mode tap
  local a
  for a in "${HOST_IPS[@]}"; do
    # nodad: IPv6 addresses are usable at once, not after duplicate address detection.
    ip -n "$NETNS" addr show dev "$TAP" | grep -q "inet6\\? $a " || ip -n "$NETNS" addr add "$a" dev "$TAP" $([[ $a == *:* ]] && echo nodad)
  done
  ip -n "$NETNS" link set "$TAP" up
}

cmd_start() {
  [ -f "$CACHE/initramfs.cpio.gz" ] || cmd_setup
  if [ -f "$CACHE/qemu.pid" ] && kill -0 "$(cat "$CACHE/qemu.pid")" 2>/dev/null; then echo "guest already running"; return 0; fi
  netns_up
  rm -rf "$INST"; mkdir -p "$INST/queue"
  local accel=(-accel tcg,thread=multi,tb-size=512 -cpu max) nics=() link="${RDS_KVM_LINK:-}" mon=() dbg=""
  [ "${RDS_KVM_MONITOR:-}" = 1 ] && { mon=(-monitor "unix:$INST/monitor.sock,server=on,wait=off"); dbg=" sysrq_always_enabled nokaslr"; }
  [ "${RDS_KVM_NOTAP:-}" = 1 ] || nics=(-netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no" -device virtio-net-pci,netdev=n0,mac=52:54:00:77:00:02)
  # The inter-guest link: qemu's socket netdev, a point-to-point Ethernet between the two guests.
  [ -n "$link" ] && nics+=(-netdev "socket,id=n1,${link%%:*}=127.0.0.1:${link#*:}" -device "virtio-net-pci,netdev=n1,mac=52:54:00:88:00:$([ "${link%%:*}" = listen ] && echo 01 || echo 02)")
  setsid ip netns exec "$NETNS" qemu-system-x86_64 "${accel[@]}" -M q35 -m "${RDS_KVM_MEM:-1536}" -smp "${RDS_KVM_SMP:-$SMP}" \
    -nodefaults -no-user-config -display none -no-reboot \
    -kernel "$(boot_image)" -initrd "$CACHE/initramfs.cpio.gz" \
    -append "console=ttyS0 quiet loglevel=${RDS_KVM_LOGLEVEL:-3} panic=-1 rds.kroot=$(readlink -f "$CACHE/kernel") rds.init=$HERE/guest/guest-init.sh rds.ip=$GUEST_IP/24 rds.ip6=$GUEST_IP6/64$dbg" \
    "${mon[@]}" -serial "file:$INST/console.log" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$INST,mount_tag=rdsinst,security_model=none" \
    "${nics[@]}" \
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
  # The second guest (no tap) leaves the namespace to the first.
  [ "${RDS_KVM_NOTAP:-}" = 1 ] && return 0
  [ -e "/run/netns/$NETNS" ] && ip netns del "$NETNS" || true
}

# One command to qemu's monitor (human monitor protocol), its answer on stdout.
cmd_monitor() {
  [ -S "$INST/monitor.sock" ] || { echo "no monitor: start the guest with RDS_KVM_MONITOR=1" >&2; return 3; }
  python3 - "$INST/monitor.sock" "$*" <<'PY'
import re, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(2)
out = b''
def drain():
    global out
    try:
        while True:
            d = s.recv(65536)
            if not d: break
            out += d
    except socket.timeout:
        pass
drain(); out = b''
s.sendall(sys.argv[2].encode() + b'\n'); drain()
# The monitor echoes the command with terminal escapes, then answers, then prompts again.
text = re.sub(r'\x1b\[[0-9;]*[A-Za-z]', '', out.decode(errors='replace')).replace('\r', '')
sys.stdout.write(text.split('\n', 1)[1].removesuffix('(qemu) ') if '\n' in text else text)
PY
}

case "${1:-}" in
  check) cmd_check ;;
  setup) cmd_setup ;;
  start) cmd_start ;;
  exec) shift; cmd_exec "$@" ;;
  stop) cmd_stop ;;
  cache) echo "$CACHE" ;;
  monitor) shift; cmd_monitor "$@" ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
