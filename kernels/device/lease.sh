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
ncu_run 180 "$NCU_KERNELS"
finish
