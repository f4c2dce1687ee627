#!/usr/bin/env bash
# npm run test:ib — the conformance suite and the IB transport tests over Soft-RoCE (rdma_rxe)
# inside the qemu guest of test/interop (two node stacks on 10.77.0.2 and 10.77.0.5, both on rxe0).
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
vm_start
bash $VM exec 'modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm && rdma link add rxe0 type rxe netdev eth0 && ip addr add 10.77.0.5/24 dev eth0 && ibv_devices' \
  || { echo "IB: Soft-RoCE setup in the guest failed"; exit 1; }
if [ "${1:-}" = --bench ]; then
  shift
  RDS_KVM_EXEC_TIMEOUT=900 bash $VM exec "cd '$PWD' && node bench/ib.mjs $*"
  exit $?
fi
inst="${RDS_KVM_CACHE:-/var/tmp/rds-socket-kernel}/instance"
rm -f "$inst/ib.json"
RDS_KVM_EXEC_TIMEOUT=1500 bash $VM exec "cd '$PWD' && RDS_IB_ADDRS=10.77.0.2,10.77.0.5 RDS_CONFORMANCE_KINDS=ib \
  npx vitest run --config test/ib/vitest.config.ts --reporter=default --reporter=json --outputFile.json=/rdsinst/ib.json $*"
rc=$?
[ -n "${IB_JSON:-}" ] && [ -f "$inst/ib.json" ] && cp "$inst/ib.json" "$IB_JSON"
exit $rc
