#!/usr/bin/env python3
"""Names kernel addresses with a saved /proc/kallsyms (test/ib/hang-dump.sh).

  ksym.py KALLSYMS HEXADDR...

Prints one line per address that falls in kernel or module text: the address, symbol+offset and
module. Addresses outside any text symbol (data, stack pointers) are left out.
"""
import bisect, sys


def load(path):
    syms = []
    for line in open(path):
        parts = line.split()
        if len(parts) < 3 or parts[1] not in 'tTwW':
            continue
        syms.append((int(parts[0], 16), parts[2], parts[3] if len(parts) > 3 else ''))
    syms.sort()
    return syms


def main():
    syms = load(sys.argv[1])
    starts = [s[0] for s in syms]
    for a in sys.argv[2:]:
        try:
            addr = int(a, 16)
        except ValueError:
            continue
        i = bisect.bisect_right(starts, addr) - 1
        # A text symbol is rarely over 64 KiB: farther than that is not in text.
        if i < 0 or addr - syms[i][0] > 0x10000:
            continue
        start, name, mod = syms[i]
        print(f'{addr:016x} {name}+0x{addr - start:x} {mod}'.rstrip())


if __name__ == '__main__':
    main()
