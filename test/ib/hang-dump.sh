#!/usr/bin/env bash
# Where is a hung kernel guest? For a guest of test/ib/run.sh started with RDS_KVM_MONITOR=1 (same
# RDS_KERNEL / RDS_KVM_CACHE as the run): samples the vCPUs' registers through qemu's monitor,
# names each RIP and the kernel text addresses found on the stack with the guest's kallsyms (saved
# by run.sh before the hang; the guest boots with nokaslr), then asks for SysRq l, w and t (CPU
# backtraces, blocked tasks, all tasks), which reach the console only if the guest still takes
# keyboard interrupts. Prints everything; the console is $CACHE/instance/console.log.
#   RDS_KERNEL=7 RDS_KVM_CACHE=... bash test/ib/hang-dump.sh [samples]
set -uo pipefail
cd "$(dirname "$0")/../.."
VM=test/interop/kernel-vm.sh
INST="$(bash $VM cache)/instance"
[ -f "$INST/kallsyms" ] || { echo "no $INST/kallsyms (run.sh saves it with RDS_KVM_MONITOR=1)" >&2; exit 2; }
mon() { bash $VM monitor "$*"; }
name() { python3 test/ib/guest/ksym.py "$INST/kallsyms" "$@"; }
echo "== status: $(mon 'info status' | tr -d '\n')"
for i in $(seq 1 "${1:-5}"); do
  regs=$(mon 'info registers -a')
  rip=$(grep -o 'RIP=[0-9a-f]*' <<<"$regs" | cut -d= -f2 | tr '\n' ' ')
  rsp=$(grep -o 'RSP=[0-9a-f]*' <<<"$regs" | head -1 | cut -d= -f2)
  echo "== sample $i: RIP $rip"
  name $rip
  if [ "$i" = 1 ]; then
    echo "$regs"
    # Kernel text addresses on the stack: the return addresses of the calls that led here.
    echo "== stack of vCPU 0 from RSP $rsp (kernel text addresses)"
    name $(mon "x /512gx 0x$rsp" | grep -o '0x[0-9a-f]\{16\}' | grep -v "^0x$rsp" | sed 's/^0x//' | grep '^ffffffff')
  fi
  sleep 1
done
echo "== interrupts: $(mon 'info irq' | tr -s ' \n' ' ' | cut -c1-400)"
for k in l w t; do mon "sendkey alt-sysrq-$k" >/dev/null; sleep 3; done
echo "== SysRq l, w, t sent; console tail:"
tail -n 60 "$INST/console.log"
