#!/usr/bin/env bash
# npm run test:ib — the conformance suite and the IB transport tests over Soft-RoCE (rdma_rxe)
# inside the qemu guest of test/interop (two node stacks on 10.77.0.2 and 10.77.0.5, both on rxe0),
# then rds-socket against the kernel's RDS/IB (rds_rdma): a second guest (the "peer", no tap) on a
# point-to-point qemu link to the first, rds-socket there on rxe0 (10.88.0.2, .3, .6), the kernel's
# RDS/IB in the first guest on rxe1 (10.88.0.1, .4, .5), test/ib/kernel-ib.test.ts and kernel-rdma.test.ts in the peer
# driving the kernel side through test/ib/guest/kctl.py. Why two guests: docs/infiniband.md.
# $RDS_KERNEL picks the kernel of both guests (6.1, 6.12, 7; see kernel-vm.sh); RDS_IB_KERNEL=0
# skips the kernel interop part, RDS_IB_KERNEL=only runs nothing else. RDS_IB_PEER_KERNEL (6.1, 6.12,
# 7) boots rds-socket's guest on another kernel than the kernel's guest (its own cache,
# $RDS_KVM_CACHE-peer-<kernel>); with RDS_KVM_MONITOR=1 (kernel-vm.sh) both guests get a qemu
# monitor and the kernel guest's /proc/kallsyms is kept in its instance directory.
# RDS_IB_KERNEL_TESTS=PATTERN runs only the kernel scenarios whose names match (vitest -t);
# RDS_IB_KERNEL_FILES='test/ib/kernel-x.test.ts ...' only those kernel suites (the others are not even loaded);
# RDS_STRESS_ORACLE=/abs/path/rds-stress (built from oracle/rds-tools, docs/rds-stress-rdma.md) adds
# rds-stress -D against it (kernel-stress.test.ts; skipped without it);
# RDS_IB_LINK_LOSS=1 adds the scenario that fails on every kernel so far (docs/infiniband.md, (5)).
# npm run bench:ib — bench/ib.mjs in the same guest (rds-socket next to ib_send_bw / ibv_rc_pingpong).
# Skips (exit 0, with the reason) where it cannot run: not root, no qemu and no apt-get, no /dev/net/tun.
set -uo pipefail
cd "$(dirname "$0")/../.."
VM=test/interop/kernel-vm.sh
source test/interop/vm-lib.sh
vm_prepare "IB tests"
# The guest runs on this machine's root filesystem: it needs rdma-core's libraries and the rxe
# provider here (perftest for the benchmark's ib_send_bw / ib_send_lat).
pkgs=()
for p in libibverbs1 librdmacm1 ibverbs-providers ibverbs-utils perftest iproute2; do dpkg -s "$p" >/dev/null 2>&1 || pkgs+=("$p"); done
if ((${#pkgs[@]})); then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}") >/dev/null \
    || { echo "IB: cannot install ${pkgs[*]}"; exit 1; }
fi
KINTEROP=${RDS_IB_KERNEL:-1}
[ "${1:-}" = --bench ] && KINTEROP=0
# The kernel guest listens for the peer guest's link (qemu socket netdev, 127.0.0.1 inside $RDS_NETNS).
LINK_PORT=${RDS_IB_LINK_PORT:-7788}
[ "$KINTEROP" != 0 ] && export RDS_KVM_LINK=listen:$LINK_PORT
vm_start
unset RDS_KVM_LINK
bash $VM exec 'modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm && rdma link add rxe0 type rxe netdev eth0 && ip addr add 10.77.0.5/24 dev eth0 && ibv_devices' \
  || { echo "IB: Soft-RoCE setup in the guest failed"; exit 1; }
if [ "${1:-}" = --bench ]; then
  shift
  RDS_KVM_EXEC_TIMEOUT=900 bash $VM exec "cd '$PWD' && node bench/ib.mjs $*"
  exit $?
fi
inst="${RDS_KVM_CACHE:-/var/tmp/rds-socket-kernel}/instance"
rm -f "$inst/ib.json"
rc=0
[ "$KINTEROP" = only ] || RDS_KVM_EXEC_TIMEOUT=1500 bash $VM exec "cd '$PWD' && RDS_IB_ADDRS=10.77.0.2,10.77.0.5 RDS_CONFORMANCE_KINDS=ib \
  npx vitest run --config test/ib/vitest.config.ts --reporter=default --reporter=json --outputFile.json=/rdsinst/ib.json $*" || rc=$?
[ -n "${IB_JSON:-}" ] && [ -f "$inst/ib.json" ] && cp "$inst/ib.json" "$IB_JSON"
[ "$KINTEROP" != 0 ] || exit $rc

# ---- rds-socket (peer guest) against the kernel's RDS/IB (this guest) ----
CACHE=$(bash $VM cache)
PEER=(env RDS_KVM_CACHE="$CACHE-peer" RDS_KVM_NOTAP=1 RDS_KVM_LINK=connect:$LINK_PORT RDS_KVM_GUEST_IP=10.88.0.2/24 RDS_KVM_KERNEL_FROM="$CACHE")
[ -n "${RDS_IB_PEER_KERNEL:-}" ] && PEER=(env RDS_KERNEL="$RDS_IB_PEER_KERNEL" RDS_KVM_CACHE="$CACHE-peer-$RDS_IB_PEER_KERNEL" RDS_KVM_NOTAP=1 RDS_KVM_LINK=connect:$LINK_PORT RDS_KVM_GUEST_IP=10.88.0.2/24)
trap '"${PEER[@]}" bash $VM stop; bash "$VM" stop' EXIT
"${PEER[@]}" bash $VM setup >/dev/null && "${PEER[@]}" bash $VM start || { echo "IB kernel interop: the peer guest did not start"; exit 1; }
bash $VM exec "cd '$PWD' && ip addr add 10.88.0.1/24 dev eth1 && ip addr add 10.88.0.4/24 dev eth1 && ip addr add 10.88.0.5/24 dev eth1 && ip link set eth1 up \
  && rdma link add rxe1 type rxe netdev eth1 && modprobe rds_rdma \
  && { setsid python3 test/ib/guest/kctl.py 10.88.0.1 7000 > /rdsinst/kctl.log 2>&1 < /dev/null & } && sleep 1 && cat /rdsinst/kctl.log" \
  || { echo "IB kernel interop: kernel guest setup failed"; exit 1; }
[ "${RDS_KVM_MONITOR:-}" = 1 ] && bash $VM exec 'cat /proc/kallsyms > /rdsinst/kallsyms'
"${PEER[@]}" bash $VM exec 'modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm && ip addr add 10.88.0.3/24 dev eth0 && ip addr add 10.88.0.6/24 dev eth0 && rdma link add rxe0 type rxe netdev eth0 && ibv_devices' \
  || { echo "IB kernel interop: Soft-RoCE setup in the peer guest failed"; exit 1; }
krel=$(bash $VM exec 'uname -r' | tr -d '\n')
pinst="$("${PEER[@]}" bash $VM cache)/instance"
rm -f "$pinst/ib-kernel.json"
RDS_KVM_EXEC_TIMEOUT=1500 "${PEER[@]}" bash $VM exec "cd '$PWD' && RDS_IB_KCTL=10.88.0.1:7000 RDS_IB_KERNEL_ADDRS=10.88.0.1,10.88.0.4,10.88.0.5 \
  RDS_IB_LOCAL_ADDRS=10.88.0.2,10.88.0.3,10.88.0.6 RDS_KERNEL_RELEASE='$krel' RDS_IB_LINK_LOSS='${RDS_IB_LINK_LOSS:-}' RDS_STRESS_ORACLE='${RDS_STRESS_ORACLE:-}' \
  npx vitest run --config test/ib/vitest.kernel.config.ts --reporter=default --reporter=json --outputFile.json=/rdsinst/ib-kernel.json${RDS_IB_KERNEL_TESTS:+ -t '$RDS_IB_KERNEL_TESTS'} ${RDS_IB_KERNEL_FILES:-}"
krc=$?
[ -n "${IB_JSON:-}" ] && [ -f "$pinst/ib-kernel.json" ] && cp "$pinst/ib-kernel.json" "${IB_JSON%.json}-kernel.json"
echo "IB: rds-socket stacks $([ "$KINTEROP" = only ] && echo "not run" || { [ $rc = 0 ] && echo passed || echo FAILED; }); against the kernel's RDS/IB ($krel) $([ $krc = 0 ] && echo passed || echo FAILED)"
((rc || krc)) && exit 1
exit 0
