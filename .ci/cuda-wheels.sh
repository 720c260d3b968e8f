#!/usr/bin/env bash
# Install NVIDIA's NVRTC (libnvrtc) and ptxas from their PyPI wheels into a cache OUTSIDE the
# checkout, for the kernels' compile gate (kernels/tests/nvrtc_gate.rs). No GPU or driver needed.
#
# Usage:  eval "$(bash .ci/cuda-wheels.sh)"     # exports NORMLAB_NVRTC_LIB, NORMLAB_PTXAS, NORMLAB_CUDA_INCLUDE
# The cache is $NORMLAB_CUDA_WHEELS (default $HOME/.cache/normlab/cuda-wheels); a second run
# reuses it. Progress goes to stderr, the export lines to stdout.
set -euo pipefail
CACHE="${NORMLAB_CUDA_WHEELS:-$HOME/.cache/normlab/cuda-wheels}"
VERSION="${NORMLAB_CUDA_WHEEL_VERSION:-12.9.86}"
# The runtime wheel only provides the headers (cuda_fp16.h, cuda_bf16.h) that NVRTC needs.
RT_VERSION="${NORMLAB_CUDA_RUNTIME_WHEEL_VERSION:-12.9.79}"
mkdir -p "$CACHE"
PY="$(command -v python3 || command -v python)"
if [ ! -f "$CACHE/.installed-$VERSION-$RT_VERSION" ]; then
  echo "cuda-wheels: installing nvidia-cuda-{nvrtc,nvcc}-cu12==$VERSION, nvidia-cuda-runtime-cu12==$RT_VERSION into $CACHE" >&2
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --upgrade --target "$CACHE" \
    "nvidia-cuda-nvrtc-cu12==$VERSION" "nvidia-cuda-nvcc-cu12==$VERSION" \
    "nvidia-cuda-runtime-cu12==$RT_VERSION" >&2
  touch "$CACHE/.installed-$VERSION-$RT_VERSION"
fi
NVRTC="$(find "$CACHE" -name 'libnvrtc.so*' ! -name '*builtins*' | sort | head -n1)"
PTXAS="$(find "$CACHE" -type f -name ptxas | head -n1)"
FP16H="$(find "$CACHE" -name cuda_fp16.h | head -n1)"
if [ -z "$NVRTC" ] || [ -z "$PTXAS" ] || [ -z "$FP16H" ]; then
  echo "cuda-wheels: libnvrtc, ptxas or cuda_fp16.h not found under $CACHE" >&2
  exit 1
fi
chmod +x "$PTXAS"
echo "export NORMLAB_NVRTC_LIB='$NVRTC'"
echo "export NORMLAB_PTXAS='$PTXAS'"
echo "export NORMLAB_CUDA_INCLUDE='$(dirname "$FP16H")'"
