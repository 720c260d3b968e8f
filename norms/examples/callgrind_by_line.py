#!/usr/bin/env python3
"""Instructions of a callgrind profile by source line of this crate, inlined frames resolved.

    RAYON_NUM_THREADS=1 valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file=cg.out \\
        --collect-atstart=no --toggle-collect='normlab_norms::row::forward_task*' \\
        target/release/normlab bench norms --json --shapes 256x1024 --dtypes f32 --kinds topk \\
        --reps 1 --rounds 1 --warmup 0 --copy-mib 1 > /dev/null
    python3 norms/examples/callgrind_by_line.py cg.out target/release/normlab [FILE_PART]

The fused kernels are inlined into one function per kind and level, so callgrind's own
per-function view puts everything in `rows_at::avx2`. This maps each instruction's address to
its frames (`addr2line -i`) and charges it to the innermost frame whose path contains
FILE_PART (default `norms/src/row/fused.rs`), else to the innermost frame. Prints the 45
heaviest lines. (The bench command above runs the forward twice: 512 rows in all.)
"""
import collections
import subprocess
import sys


def costs(path):
    """Ir per instruction address, from a profile written with --dump-instr=yes."""
    cost = collections.Counter()
    addr = line = 0
    after_calls = False
    for raw in open(path):
        raw = raw.rstrip("\n")
        if not raw or raw[0].isalpha():
            after_calls = raw.startswith("calls=")
            continue
        if raw[0] not in "0123456789+-*":
            continue
        parts = raw.split()

        def step(tok, cur):
            if tok == "*":
                return cur
            if tok[0] in "+-":
                return cur + int(tok, 0)
            return int(tok, 0)

        addr = step(parts[0], addr)
        if len(parts) > 1:
            line = step(parts[1], line)
        if after_calls:  # the line after calls= is the callee's inclusive cost
            after_calls = False
            continue
        if len(parts) > 2:
            cost[addr] += int(parts[2])
    return cost


def main(profile, binary, want="norms/src/row/fused.rs"):
    cost = costs(profile)
    query = "".join(f"0x{a:x}\n0x0\n" for a in sorted(cost))
    out = subprocess.run(["addr2line", "-e", binary, "-i", "-a"], input=query,
                         capture_output=True, text=True, check=True).stdout
    frames, cur = {}, None
    for line in out.splitlines():
        if line.startswith("0x"):
            a = int(line, 16)
            cur = a if a else None
            if cur is not None:
                frames[cur] = []
        elif cur is not None:
            frames[cur].append(line)
    by_line = collections.Counter()
    for a, c in cost.items():
        fr = frames.get(a, [])
        key = next((f for f in fr if want in f), fr[0] if fr else "?")
        by_line[key] += c
    total = sum(cost.values())
    print(f"{total} instructions")
    for key, c in by_line.most_common(45):
        print(f"{c:9d} {100 * c / total:5.1f}%  {key}")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(*sys.argv[1:])
