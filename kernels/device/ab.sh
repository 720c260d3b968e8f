#!/usr/bin/env bash
# A/B on a lent GPU machine: `bash kernels/device/ab.sh BASE X [Y ...]` (binaries under
# .lease/bin, made by prepare.sh) benchmarks every binary in turn, twice (BASE X Y BASE X Y:
# same-machine ratios, and the spread between the two runs of one binary is the noise), then
# checks X (`gpu-check --only rows --quick`, `--only variants`: the families the row kernels'
# code serves), runs Nsight Compute on X's NCU_KERNELS, and last the full `--only rows` check
# (the longest step: its time limit CHECK_LIMIT_S, default 240 s). What comes back ($OUT):
#   lease.log   this script's log
#   bench.json  {"<name>-<round>": `normlab bench --device cuda --json`}
#   check.json  {"rowsquick" | "variants" | "rows": `normlab gpu-check ... --json`} of X
#   ncu.txt     Nsight Compute on X (if ncu exists)
. kernels/device/setup.sh
X=$2
for round in 1 2; do
  for name in "$@"; do
    use "$name"; step "bench-$name-$round" 120 "$B" bench --device cuda --json
  done
done
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = {}
for f in sorted(glob.glob(sys.argv[1] + "/bench-*.json")):
    try:
        r = json.load(open(f))
    except ValueError as e:
        print(f"{f}: not JSON ({e})")
        continue
    out[os.path.basename(f)[6:-5]] = r
    os.remove(f)
    print(f"{os.path.basename(f)[6:-5]}: copy {r['copy_bandwidth']['gb_per_s']:.0f} GB/s, {r['summary']}")
json.dump(out, open(sys.argv[1] + "/bench.json", "w"))
PY
use "$X"
step check-rowsquick 120 "$B" gpu-check --only rows --quick --json
step check-variants 120 "$B" gpu-check --only variants --json
NCU_KERNELS="${NCU_KERNELS:-rms_fwd_f16_block|layer_fwd_f16_block|rms_bwd_f16_block|rms_fwd_f16_warp|l1_fwd_f16_warp}"
ncu_run 150 "$NCU_KERNELS"
step check-rows "${CHECK_LIMIT_S:-240}" "$B" gpu-check --only rows --json
merge_checks
finish
