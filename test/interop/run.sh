#!/usr/bin/env bash
# npm run test:interop [-- --kernel 6.1|6.12|7 ...] [vitest args]
# rds-socket against real Linux kernels' RDS/TCP under qemu: Debian bookworm's 6.1, trixie's 6.12
# and sid's 7.x (default: all three, in that order). Each kernel gets one guest boot and the whole
# interop suite runs in that guest session; the tests read $RDS_KERNEL for version-specific
# expectations. --kernel may be repeated or comma-separated.
# With $INTEROP_JSON set, each kernel's vitest JSON report goes to ${INTEROP_JSON%.json}-<kernel>.json.
# $RDS_KVM_CACHE, if set, is used as is for a single kernel and suffixed with -<kernel> for several.
# Skips (exit 0, with the reason) where it cannot run: not root, no qemu and no apt-get, no /dev/net/tun.
set -uo pipefail
cd "$(dirname "$0")/../.."
VM=test/interop/kernel-vm.sh
source test/interop/vm-lib.sh

kernels=()
args=()
while (($#)); do
  case "$1" in
    --kernel) shift; IFS=, read -ra ks <<< "${1:-}"; kernels+=("${ks[@]}") ;;
    --kernel=*) IFS=, read -ra ks <<< "${1#--kernel=}"; kernels+=("${ks[@]}") ;;
    *) args+=("$1") ;;
  esac
  shift
done
((${#kernels[@]})) || kernels=(6.1 6.12 7)
for k in "${kernels[@]}"; do
  case "$k" in 6.1|6.12|7) ;; *) echo "--kernel takes 6.1, 6.12 or 7 (got '$k')"; exit 2 ;; esac
done

user_cache="${RDS_KVM_CACHE:-}"
status=0
summary=()
for k in "${kernels[@]}"; do
  export RDS_KERNEL="$k"
  if [ -n "$user_cache" ]; then
    if ((${#kernels[@]} > 1)); then export RDS_KVM_CACHE="$user_cache-$k"; else export RDS_KVM_CACHE="$user_cache"; fi
  else
    unset RDS_KVM_CACHE
    RDS_KVM_CACHE=$(bash "$VM" cache) && export RDS_KVM_CACHE
  fi
  echo "=== interop against Linux $k (cache $RDS_KVM_CACHE) ==="
  t0=$(date +%s)
  vm_prepare "interop tests"
  vm_start
  export RDS_KERNEL_RELEASE
  RDS_KERNEL_RELEASE=$(bash "$VM" exec 'uname -r' | tr -d '\n')
  extra=()
  [ -n "${INTEROP_JSON:-}" ] && extra=(--reporter=default --reporter=json --outputFile.json="${INTEROP_JSON%.json}-$k.json")
  # $INTEROP_VITEST replaces the vitest command line (for a checkout whose node_modules needs one).
  ip netns exec "${RDS_NETNS:-rdsint}" ${INTEROP_VITEST:-npx vitest run --config test/interop/vitest.config.ts} "${extra[@]}" "${args[@]}"
  rc=$?
  bash "$VM" stop
  trap - EXIT
  ((rc)) && status=1
  summary+=("Linux $k ($RDS_KERNEL_RELEASE): $([ $rc = 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - t0 )) s")
done
printf '%s\n' "${summary[@]}"
exit $status
