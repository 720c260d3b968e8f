# Sourced by the device scripts (lease.sh, ab.sh) on the GPU machine, from the repository root:
# logs to $OUT/lease.log (and the terminal) with the device's name and clocks first, unpacks what prepare.sh put in .lease/ (python's lzma and tarfile: the image may lack xz) and
# defines `use NAME`, which points B at .lease/bin/NAME's binary and NORMLAB_PTX_CACHE at its
# precompiled kernels, NORMLAB_CUDA_INCLUDE at the headers' path they were compiled with (a
# report's `image.origin` says `disk` when the carried image was used, `compiled` when not).
set -u
L="$PWD/.lease"
OUT="${OUT:-/tmp/normlab-lease}"
mkdir -p "$OUT"
exec > >(tee "$OUT/lease.log") 2>&1
echo "== $(date -u +%FT%TZ) $(uname -m) $(nproc) cpus"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 - "$L" <<'PY'
import glob, lzma, os, shutil, sys, tarfile
L = sys.argv[1]
INC = "/tmp/normlab-lease-include"
os.makedirs("/tmp/nvrtc", exist_ok=True)
for f in glob.glob(L + "/nvrtc/*.xz"):
    with lzma.open(f) as i, open("/tmp/nvrtc/" + os.path.basename(f)[:-3], "wb") as o:
        shutil.copyfileobj(i, o)
for d in sorted(glob.glob(L + "/bin/*/")):
    name = os.path.basename(d.rstrip("/"))
    dst = "/tmp/nl/" + name
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    with lzma.open(d + "normlab.xz") as i, open(dst + "/normlab", "wb") as o:
        shutil.copyfileobj(i, o)
    os.chmod(dst + "/normlab", 0o755)
    with tarfile.open(d + "kernels.tar.xz") as t:
        t.extractall(dst)
    # The headers at the path prepare.sh compiled with (the cache key hashes it); every
    # binary's copy is the same wheel's headers.
    shutil.rmtree(INC, ignore_errors=True)
    shutil.copytree(dst + "/include", INC)
    print("unpacked", name)
PY
ln -sf libnvrtc.so.12 /tmp/nvrtc/libnvrtc.so
export NORMLAB_NVRTC_LIB=/tmp/nvrtc/libnvrtc.so.12 LD_LIBRARY_PATH="/tmp/nvrtc:${LD_LIBRARY_PATH:-}"
# The driver's libraries, in case the loader's cache does not name them (appended: never first).
[ -d /usr/local/nvidia/lib64 ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/usr/local/nvidia/lib64"
use() {
  B="/tmp/nl/$1/normlab"
  export NORMLAB_PTX_CACHE="/tmp/nl/$1/ptx" NORMLAB_CUDA_INCLUDE=/tmp/normlab-lease-include
}
# step NAME LIMIT_S CMD...: stdout to $OUT/NAME.json (removed if empty), stderr to the log.
step() {
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s%N)
  echo "== $name: $*"
  timeout "$limit" "$@" >"$OUT/$name.json"
  local rc=$?
  echo "== $name: rc=$rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  [ -s "$OUT/$name.json" ] || rm -f "$OUT/$name.json"
}
# merge_checks: $OUT/check-*.json into $OUT/check.json as {family: report}.
merge_checks() {
  python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = {}
for f in sorted(glob.glob(sys.argv[1] + "/check-*.json")):
    try:
        out[os.path.basename(f)[6:-5]] = json.load(open(f))
    except ValueError as e:
        print(f"{f}: not JSON ({e})")
        continue
    os.remove(f)
json.dump(out, open(sys.argv[1] + "/check.json", "w"))
print("check families (total, failed):", {k: (v["total"], v["failed"]) for k, v in out.items()})
PY
}
# ncu_run LIMIT_S KERNELS: Nsight Compute (clocks left alone) on the second launch of each kernel
# named by KERNELS (a regex alternation of names without the `nl_` prefix) inside
# `$B bench --device cuda --reps 2`, into $OUT/ncu.txt; skipped where ncu is missing.
ncu_run() {
  command -v ncu >/dev/null || { echo "== ncu: not installed"; return; }
  echo "== ncu: $2"
  timeout "$1" ncu --clock-control none --print-summary none --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
    --kernel-id "::regex:^nl_($2)\$:2" "$B" bench --device cuda --reps 2 >"$OUT/ncu.txt" 2>&1
  echo "== ncu: rc=$?"
}
# finish: the clocks after the work, and the time.
finish() {
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  echo "== done $(date -u +%FT%TZ)"
}
