#!/usr/bin/env python3
"""Instruction counts of the kernels in an sm_90 cubin, on a machine without cuobjdump (the CPU machine).

The CUDA toolkit here has nvcc and ptxas but no cuobjdump or nvdisasm (shared/reference/dependencies.md), so SASS
could only be read on the GPU machine. A Hopper instruction is 16 bytes; its low 12 bits name the opcode. This tool
maps those opcodes to mnemonics with a table learned from `cuobjdump -sass` listings taken on the GPU machine
(scripts/device-sass.sh), and reads the kernels' .text sections from a cubin compiled here, e.g. the build's
build/ptxas/*.cubin (tests/kernels/cuda/ptxas_report.sh). Opcodes the table has not seen print as `?xxx`.

  tools/cubin_sass.py learn LISTING[.xz]... [-o tools/sass_opcodes.json]  # extend the table from listings
  tools/cubin_sass.py hist CUBIN [-k REGEX] [--loops]                 # per kernel: counts, innermost loops
  tools/cubin_sass.py diff CUBIN_A CUBIN_B [-k REGEX]                 # which kernels' code differs
  tools/cubin_sass.py check CUBIN...                                   # every branch lands inside its kernel

(tools/sass_diff.py compares listings made on the GPU machine instruction by instruction; this reads cubins.)

Counts only: the base mnemonic (IMAD.MOV.U32 counts as IMAD; several forms of one opcode, e.g. WARPGROUP.ARRIVE and
WARPGROUP.DEPBAR, share a name). Branch targets are decoded for BRA (checked against every BRA of the listing the
table came from), which is what the loop report needs.
"""
import argparse
import collections
import json
import os
import re
import struct
import subprocess
import sys

from sass_diff import ANON, read  # the anonymous namespace's per-build hash in mangled names; plain or .xz listings

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sass_opcodes.json")
LINE = re.compile(r"\s+/\*([0-9a-f]+)\*/\s+(.*?);\s*/\* 0x([0-9a-f]{16}) \*/")
BRA_OPCODE = 0x947


def cubin_kernels(path):
    """{mangled kernel name: code bytes} from an ELF cubin's .text.<name> sections."""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        sys.exit(f"cubin_sass: {path}: not a 64-bit ELF cubin (compile with nvcc -cubin)")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = sections[shstrndx][4]

    def name(off):
        end = data.index(b"\0", names_at + off)
        return data[names_at + off:end].decode()

    out = {}
    for sec in sections:
        n = name(sec[0])
        if n.startswith(".text."):
            out[n[len(".text."):]] = data[sec[4]:sec[4] + sec[5]]
    return out


def words(code):
    for i in range(0, len(code) - 15, 16):
        lo, hi = struct.unpack_from("<QQ", code, i)
        yield i, lo, hi


def branch_target(addr, lo, hi):
    """A BRA's target: bits 16-23 hold offset bits 2-9, bits 34-81 the signed offset from bit 10."""
    high = (lo >> 34) | ((hi & 0x3FFFF) << 30)
    if high >> 47:
        high -= 1 << 48
    return addr + 16 + (high << 10) + (((lo >> 16) & 0xFF) << 2)


def read_table(path):
    return {int(k, 16): v for k, v in json.load(open(path))["opcodes"].items()}


def load_table():
    if not os.path.exists(TABLE):
        sys.exit(f"cubin_sass: {TABLE} missing; make it with `learn` from a cuobjdump -sass listing")
    return read_table(TABLE)


def branches(code, table):
    """(address, target) of every BRA in a kernel's code (none when the table does not name BRA's opcode)."""
    if table.get(BRA_OPCODE) != "BRA":
        return
    for addr, lo, hi in words(code):
        if lo & 0xFFF == BRA_OPCODE:
            yield addr, branch_target(addr, lo, hi)


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return out.split("\n")[: len(names)]
    except (OSError, subprocess.CalledProcessError):
        return names


def cmd_learn(args):
    table = read_table(args.output) if os.path.exists(args.output) else {}
    seen = collections.defaultdict(collections.Counter)
    checked = 0
    for path in args.listings:
        lines = read(path).split("\n")
        for i, line in enumerate(lines):
            m = LINE.match(line)
            if not m:
                continue
            text = m.group(2).split()
            mnemonic = text[1] if text[0].startswith("@") else text[0]
            lo = int(m.group(3), 16)
            seen[lo & 0xFFF][mnemonic.split(".")[0]] += 1
            target = re.search(r"\bBRA\s.*0x([0-9a-f]+)\s*$", m.group(2))
            if lo & 0xFFF == BRA_OPCODE and target and i + 1 < len(lines):
                hi = int(re.search(r"0x([0-9a-f]{16})", lines[i + 1]).group(1), 16)
                if branch_target(int(m.group(1), 16), lo, hi) != int(target.group(1), 16):
                    sys.exit(f"cubin_sass: {path}:{i + 1}: branch decoding disagrees with the listing: {line.strip()}")
                checked += 1
    for op, names in seen.items():
        if len(names) > 1:
            sys.exit(f"cubin_sass: opcode {op:#05x} has several base mnemonics: {dict(names)}")
        name = next(iter(names))
        if table.get(op, name) != name:
            sys.exit(f"cubin_sass: opcode {op:#05x} is {table[op]} in the table, {name} in the listing")
        table[op] = name
    doc = {
        "what": "low 12 bits of an sm_90 instruction -> base mnemonic, learned by tools/cubin_sass.py learn from "
                "cuobjdump -sass listings of this repository's kernels (scripts/device-sass.sh on the GPU machine)",
        "opcodes": {f"{op:#05x}": table[op] for op in sorted(table)},
    }
    with open(args.output, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    print(f"{args.output}: {len(table)} opcodes ({len(seen)} in the listings; {checked} branch targets checked)")


def histogram(code, table, lo_addr=0, hi_addr=None):
    counts = collections.Counter()
    for addr, lo, _ in words(code):
        if addr < lo_addr or (hi_addr is not None and addr > hi_addr):
            continue
        counts[table.get(lo & 0xFFF, f"?{lo & 0xFFF:03x}")] += 1
    return counts


def innermost_loops(code, table, min_instructions):
    """(start, end) of the backward branches spanning at least min_instructions whose range holds no other such
    range (a spin-wait inside a main loop is smaller than the minimum, so the main loop still counts as innermost)."""
    loops = [(target, addr) for addr, target in branches(code, table)
             if target <= addr and (addr - target) // 16 + 1 >= min_instructions]
    return [(a, b) for a, b in loops if not any((c, d) != (a, b) and a <= c and d <= b for c, d in loops)]


def fmt(counts, top):
    return ", ".join(f"{k} {v}" for k, v in counts.most_common(top))


def cmd_hist(args):
    table = load_table()
    kernels = cubin_kernels(args.cubin)
    names = sorted(kernels)
    pretty = dict(zip(names, demangle(names)))
    for n in names:
        if args.kernel and not re.search(args.kernel, pretty[n]) and not re.search(args.kernel, n):
            continue
        code = kernels[n]
        counts = histogram(code, table)
        print(f"{pretty[n]}\n  {len(code) // 16} instructions: {fmt(counts, args.top)}")
        if args.loops:
            for a, b in innermost_loops(code, table, args.min_loop):
                c = histogram(code, table, a, b)
                print(f"  loop {a:#x}-{b:#x}: {sum(c.values())} instructions: {fmt(c, args.top)}")


def cmd_diff(args):
    a, b = cubin_kernels(args.a), cubin_kernels(args.b)

    def key(n):
        return ANON.sub("(anonymous)", n)

    ka, kb = {key(n): n for n in a}, {key(n): n for n in b}
    names = sorted(set(ka) | set(kb))
    pretty = dict(zip(names, demangle([kb.get(k) or ka[k] for k in names])))
    same = 0
    for k in names:
        if args.kernel and not re.search(args.kernel, pretty[k]):
            continue
        x, y = a.get(ka.get(k, ""), None), b.get(kb.get(k, ""), None)
        if x == y:
            same += 1
            continue
        state = "only in A" if y is None else "only in B" if x is None else f"differs ({len(x) // 16} -> {len(y) // 16} instructions)"
        print(f"{state}: {pretty[k]}")
    print(f"{same} kernels identical")


def cmd_check(args):
    """Every BRA of every kernel lands on an instruction of the same kernel (the decoding the loop report relies on)."""
    table = load_table()
    bad = 0
    for path in args.cubins:
        kernels = cubin_kernels(path)
        count = 0
        for n, code in kernels.items():
            for addr, target in branches(code, table):
                count += 1
                if target < 0 or target >= len(code) or target % 16:
                    print(f"{path}: {n}: BRA at {addr:#x} decodes to {target:#x}, outside 0..{len(code):#x}")
                    bad += 1
        if not kernels or not count:
            print(f"{path}: no kernels or no branches found")
            bad += 1
        else:
            print(f"{path}: {len(kernels)} kernels, {count} branches inside their kernels")
    sys.exit(1 if bad else 0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    learn = sub.add_parser("learn", help="extend the opcode table from cuobjdump -sass listings")
    learn.add_argument("listings", nargs="+")
    learn.add_argument("-o", "--output", default=TABLE)
    hist = sub.add_parser("hist", help="instruction counts per kernel (and per innermost loop)")
    hist.add_argument("cubin")
    hist.add_argument("-k", "--kernel", help="regex on the (demangled) kernel name")
    hist.add_argument("--loops", action="store_true")
    hist.add_argument("--min-loop", type=int, default=16, help="smallest loop to count (instructions; smaller ones, e.g. spin-waits, do not hide the loops around them)")
    hist.add_argument("--top", type=int, default=14)
    diff = sub.add_parser("diff", help="which kernels' code differs between two cubins")
    diff.add_argument("a")
    diff.add_argument("b")
    diff.add_argument("-k", "--kernel")
    check = sub.add_parser("check", help="every branch of every kernel lands inside the kernel")
    check.add_argument("cubins", nargs="+")
    args = p.parse_args()
    {"learn": cmd_learn, "hist": cmd_hist, "diff": cmd_diff, "check": cmd_check}[args.cmd](args)


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # output piped into head
        sys.exit(0)
