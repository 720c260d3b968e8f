#!/usr/bin/env bash
# Runs on a lent GPU machine, from the repository root, after kernels/device/prepare.sh filled
# `.lease/` here (device tool: carry [".lease"], command `bash kernels/device/lease.sh [NAME]`;
# NAME: the binary under .lease/bin, default `new`). Each step is its own process under its own
# time limit, so one failing step (a kernel family that does not launch, say) costs only its
# own results. What comes back ($OUT, 8 files at most):
#   lease.log        this script's log: device, clocks, every step's stderr and status
#   check.json       {family: `normlab gpu-check --only <family> --json`} for rows, variants,
#                    updates, batch, project (a family that failed or timed out: absent)
#   bench-cuda.json  `normlab bench --device cuda --json`
#   peers.json       kernels/device/peers.py: PyTorch's and Liger's norms, same shape
#   ncu.txt          Nsight Compute on the kernels named by NCU_KERNELS (if ncu exists)
set -u
OUT="${OUT:-/tmp/normlab-lease}"
mkdir -p "$OUT"
exec > >(tee "$OUT/lease.log") 2>&1
echo "== $(date -u +%FT%TZ) $(uname -m) $(nproc) cpus"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw --format=csv
. kernels/device/setup.sh
use "${1:-new}"
"$B" --version
for fam in rows variants updates batch project; do
  step "check-$fam" "${CHECK_LIMIT_S:-240}" "$B" gpu-check --only "$fam" --json
done
merge_checks
step bench-cuda 150 "$B" bench --device cuda --json
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$L"/whl/*.whl
PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 150 python3 kernels/device/peers.py "$OUT/peers.json"
echo "== peers: rc=$?"
NCU_KERNELS="${NCU_KERNELS:-rms_fwd_f16_block|layer_fwd_f16_block|linf_bwd_f16_block|rms_fwd_f16_warp|l1_fwd_f16_warp|topk_fwd_f16_block}"
if command -v ncu >/dev/null; then
  echo "== ncu: $NCU_KERNELS"
  timeout 180 ncu --clock-control none --print-summary none --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
    --kernel-id "::regex:^nl_($NCU_KERNELS)\$:2" "$B" bench --device cuda --reps 2 >"$OUT/ncu.txt" 2>&1
  echo "== ncu: rc=$?"
fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
echo "== done $(date -u +%FT%TZ)"
