#!/usr/bin/env python3
"""Fail when code of this workspace calls a SIMD intrinsic instead of inlining it.

    python3 .ci/intrinsics-inlined.py BINARY [BINARY ...]

std's intrinsics (`core::core_arch::x86::*`) are `#[target_feature]` functions that only
inline into callers compiled for those features. A closure or helper that the compiler
chooses not to inline into the fused kernels' `#[target_feature]` entry points is compiled
without the features, and then every intrinsic in it is an out-of-line call: the same bits,
several times slower. That happened silently once (bf16 Top-k rows on AVX2 took 4x longer
from a closure around the selection's fallback), so this checks the release binary: every
`call` to a `core::core_arch::` symbol is mapped to its source lines, inlined frames
included (addr2line -i, from the binary's debug info), and fails if any frame lies in this
workspace's sources. Dependencies' own calls (gemm, candle) are reported only as a count.

Needs binutils (objdump, addr2line) and a binary with line tables (the release profile
keeps debug info).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CALL = re.compile(r"^\s*([0-9a-f]+):\s+call\s+[0-9a-f]+ <(core::core_arch::[^>]*)>")


def calls_to_intrinsics(binary):
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", binary],
                         check=True, capture_output=True, text=True).stdout
    for line in dis.splitlines():
        m = CALL.match(line)
        if m:
            yield m.group(1), m.group(2)


def frames(binary, addrs):
    """addr2line -i's frames for each address, innermost first."""
    if not addrs:
        return {}
    # One query per address, each followed by a sentinel, so the inlined frames can be split.
    query = "".join(f"0x{a}\n0x0\n" for a in addrs)
    out = subprocess.run(["addr2line", "-e", binary, "-i", "-a"], input=query,
                         check=True, capture_output=True, text=True).stdout
    result, cur = {}, None
    for line in out.splitlines():
        if line.startswith("0x"):
            a = line[2:].lstrip("0") or "0"
            cur = None if a == "0" else a
            if cur is not None:
                result[cur] = []
        elif cur is not None:
            result[cur].append(line)
    return result


def ours(frame):
    path = frame.rsplit(":", 1)[0]
    return path.startswith(ROOT + os.sep) and "/target/" not in path[len(ROOT):]


def main(binaries):
    if not binaries:
        print(__doc__, file=sys.stderr)
        return 2
    failed = False
    for binary in binaries:
        calls = list(calls_to_intrinsics(binary))
        where = frames(binary, [a for a, _ in calls])
        bad = []
        for addr, callee in calls:
            fr = where.get(addr.lstrip("0"), [])
            if not fr:
                bad.append((addr, callee, ["(no line information: is debug info stripped?)"]))
            elif any(ours(f) for f in fr):
                bad.append((addr, callee, fr))
        print(f"{binary}: {len(calls)} calls to out-of-line intrinsics, {len(bad)} from this workspace")
        for addr, callee, fr in bad:
            failed = True
            print(f"  0x{addr}: call {callee}")
            for f in fr:
                print(f"      at {f.replace(ROOT + os.sep, '')}")
    if failed:
        print("an intrinsic in the code above is called, not inlined: the function or closure "
              "around it was not inlined into a #[target_feature] function (mark it "
              "#[inline(always)], or make the closure a match or a function)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
