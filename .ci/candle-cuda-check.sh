#!/usr/bin/env bash
# Compile-check of the `candle-cuda` feature (candle's CUDA backend + normlab's cuda_fwd ops).
# candle-core's `cuda` feature builds candle-kernels with nvcc, so this installs nvcc from
# NVIDIA's PyPI wheels (CUDA 13.4.x: nvidia-cuda-nvcc, -crt, nvidia-nvvm, -runtime and the
# matching nvidia-cuda-cccl) into a cache OUTSIDE the checkout and runs
# `cargo check --features candle-cuda` with its own target dir, also outside the checkout, so
# later runs reuse both. No GPU or driver is needed (check only: nothing is linked or run).
#
# Usage: bash .ci/candle-cuda-check.sh
# Env: NORMLAB_CUDA13_WHEELS (wheel cache, default $HOME/.cache/normlab/cuda13-wheels),
#      NORMLAB_CANDLE_CUDA_TARGET (target dir, default $HOME/.cache/normlab/candle-cuda-target),
#      CUDA_COMPUTE_CAP (default 80).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CACHE="${NORMLAB_CUDA13_WHEELS:-$HOME/.cache/normlab/cuda13-wheels}"
VERSION="${NORMLAB_CUDA13_VERSION:-13.4.92}"
CCCL_VERSION="${NORMLAB_CUDA13_CCCL_VERSION:-13.3.4.3.1}"
mkdir -p "$CACHE"
PY="$(command -v python3 || command -v python)"
if [ ! -f "$CACHE/.installed-$VERSION-$CCCL_VERSION" ]; then
  echo "candle-cuda-check: installing CUDA $VERSION nvcc wheels into $CACHE" >&2
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --upgrade --target "$CACHE" \
    "nvidia-cuda-nvcc==$VERSION" "nvidia-cuda-crt==$VERSION" "nvidia-nvvm==$VERSION" \
    "nvidia-cuda-runtime==$VERSION" "nvidia-cuda-cccl==$CCCL_VERSION" >&2
  touch "$CACHE/.installed-$VERSION-$CCCL_VERSION"
fi
NVCC="$(find "$CACHE" -type f -name nvcc -path '*/bin/*' | head -n1)"
if [ -z "$NVCC" ]; then
  echo "candle-cuda-check: nvcc not found under $CACHE" >&2
  exit 1
fi
chmod +x "$NVCC" "$(dirname "$NVCC")"/* 2>/dev/null || true
CUDA_ROOT="$(cd "$(dirname "$NVCC")/.." && pwd)"
echo "candle-cuda-check: nvcc $("$NVCC" --version | tail -n1) at $NVCC" >&2
export PATH="$(dirname "$NVCC"):$PATH"
export CUDA_ROOT CUDA_HOME="$CUDA_ROOT" CUDA_PATH="$CUDA_ROOT"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-80}"
export CARGO_TARGET_DIR="${NORMLAB_CANDLE_CUDA_TARGET:-$HOME/.cache/normlab/candle-cuda-target}"
cargo check --release --features candle-cuda --lib --bins
