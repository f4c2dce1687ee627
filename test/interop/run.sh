#!/usr/bin/env bash
# npm run test:interop — rds-socket against a real Linux kernel's RDS/TCP under qemu.
# Skips (exit 0, with the reason) where it cannot run: not root, no qemu and no apt-get, no /dev/net/tun.
set -uo pipefail
cd "$(dirname "$0")/../.."
VM=test/interop/kernel-vm.sh
if ! why=$(bash $VM check); then
  echo "interop tests skipped: $why"
  exit 0
fi
bash $VM setup || { echo "interop: setup failed (apt packages or the kernel could not be installed)"; exit 1; }
trap 'bash $VM stop' EXIT
bash $VM start || exit 1
[ -f dist/index.js ] || npm run build || exit 1
extra=()
[ -n "${INTEROP_JSON:-}" ] && extra=(--reporter=default --reporter=json --outputFile.json="$INTEROP_JSON")
ip netns exec "${RDS_NETNS:-rdsint}" npx vitest run --config test/interop/vitest.config.ts "${extra[@]}" "$@"
