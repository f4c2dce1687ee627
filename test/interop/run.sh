#!/usr/bin/env bash
# npm run test:interop — rds-socket against a real Linux kernel's RDS/TCP under qemu.
# Skips (exit 0, with the reason) where it cannot run: not root, no qemu and no apt-get, no /dev/net/tun.
set -uo pipefail
cd "$(dirname "$0")/../.."
VM=test/interop/kernel-vm.sh
source test/interop/vm-lib.sh
vm_prepare "interop tests"
vm_start
extra=()
[ -n "${INTEROP_JSON:-}" ] && extra=(--reporter=default --reporter=json --outputFile.json="$INTEROP_JSON")
ip netns exec "${RDS_NETNS:-rdsint}" npx vitest run --config test/interop/vitest.config.ts "${extra[@]}" "$@"
