# Sourced by test/interop/run.sh and test/ib/run.sh, from the project root with VM set to
# kernel-vm.sh: the steps both take to get the qemu guest up.

# vm_prepare LABEL: skip (exit 0, with the reason) where the guest cannot run; install what it needs.
vm_prepare() {
  local why
  if ! why=$(bash "$VM" check); then
    echo "$1 skipped: $why"
    exit 0
  fi
  bash "$VM" setup || { echo "$1: setup failed (apt packages or the kernel could not be installed)"; exit 1; }
}

# vm_start: boot the guest (stopped again when the script exits) and make sure dist/ is built.
vm_start() {
  trap 'bash "$VM" stop' EXIT
  bash "$VM" start || exit 1
  [ -f dist/index.js ] || npm run build || exit 1
}
