#!/usr/bin/env bash
# Prepares `.lease/` (git-ignored through .git/info/exclude) for a run on a lent GPU machine
# (the `device` tool: `run` with carry [".lease"] and command `bash kernels/device/lease.sh`).
# Everything is built HERE, so that no device time goes to compiling:
#   .lease/bin/NAME/normlab.xz      release binary with `--features cuda`, stripped (debug line tables
#                           are 200 MB; the tree that travels is capped at 64 MiB) and compressed
#   .lease/nvrtc/*.xz       NVRTC 12.9 from .ci/cuda-wheels.sh, xz-compressed (106 MB -> ~28 MB);
#                           the device image has CUDA 13 only, whose libnvrtc.so.13 cudarc's
#                           cuda-12090 build does not look for
#   .lease/bin/NAME/kernels.tar.xz  ptx/: every kernel family precompiled for sm_90 by that NVRTC
#                           (NORMLAB_PTX_CACHE), so the GPU run loads CUBINs and compiles nothing
#                           (27 MB, 2.8 MB compressed), compiled with the headers at
#                           /tmp/normlab-lease-include, where setup.sh puts them on the GPU
#                           machine; include/: those headers (cuda_fp16.h, cuda_bf16.h, ...)
#   .lease/whl/             Liger-Kernel's wheel (pure Python + Triton) for kernels/device/peers.py
# Usage: bash kernels/device/prepare.sh [NAME] [ARCH]   NAME: .lease/bin/NAME (default `new`),
# so that two binaries (a base and a change) travel together for kernels/device/ab.sh; ARCH
# default sm_90 (the H200/H100).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
NAME="${1:-new}"
ARCH="${2:-sm_90}"
L=.lease
BIN="$L/bin/$NAME"
X="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$X")" "$L/nvrtc" "$L/whl" "$BIN"
grep -qx '/.lease/' "$X" 2>/dev/null || echo '/.lease/' >>"$X"
eval "$(bash .ci/cuda-wheels.sh)"
cargo build --release --features cuda --bin normlab
strip -o "$BIN/normlab" target/release/normlab
xz -6 -T0 -f "$BIN/normlab"
D="$(dirname "$NORMLAB_NVRTC_LIB")"
for f in libnvrtc.so.12 libnvrtc-builtins.so.12.9; do
  [ "$L/nvrtc/$f.xz" -nt "$D/$f" ] || xz -9 -T0 -c "$D/$f" >"$L/nvrtc/$f.xz"
done
# The header directory is one of the NVRTC options the cache key hashes, so the kernels are
# compiled here with the headers at the path setup.sh unpacks them to on the GPU machine: any
# other path there makes every image a miss, compiled again on the device (as happened on
# 2026-11-30, costing the first step of each call about a minute).
INC=/tmp/normlab-lease-include
rm -rf "$INC" "$BIN/include" "$BIN/ptx" && cp -r "$NORMLAB_CUDA_INCLUDE" "$INC" && cp -r "$INC" "$BIN/include"
NORMLAB_CUDA_INCLUDE="$INC" NORMLAB_PTX_CACHE="$PWD/$BIN/ptx" target/release/normlab gpu-check --precompile "$ARCH"
tar -C "$BIN" -cJf "$BIN/kernels.tar.xz" ptx include && rm -rf "$BIN/include" "$BIN/ptx"
ls "$L"/whl/liger_kernel-*.whl >/dev/null 2>&1 || python3 -m pip download --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform any -d "$L/whl" 'liger-kernel==0.8.5'
du -sh "$L"/* && du -sh "$L"
