#!/usr/bin/env bash
# Instructions per element of one row-norm forward, for every kind x dtype, under callgrind
# (repeatable on a loaded machine, unlike wall-clock time). Prints a table; see forward_once.rs.
#   bash norms/examples/count_forward.sh [ROWSxN ...]   (default: 256x1024 64x4096)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
cargo build --release --quiet -p normlab-norms --example forward_once
bin=target/release/examples/forward_once
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(256x1024 64x4096)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-10s %-8s' shape kind; for d in f32 f16 bf16; do printf ' %8s' "$d"; done; echo
for s in "${shapes[@]}"; do
    rows=${s%x*}; n=${s#*x}
    for k in rms layer unit-l2 l1 linf topk; do
        printf '%-10s %-8s' "$s" "$k"
        for d in f32 f16 bf16; do
            RAYON_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$out/cg" --collect-atstart=no \
                --toggle-collect='normlab_norms::row::forward_task' "$bin" "$k" "$d" "$rows" "$n" >/dev/null 2>"$out/log"
            ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out/log")
            printf ' %8.2f' "$(echo "$ir / ($rows * $n)" | bc -l)"
        done
        echo
    done
done
