"""Summarize a lent-GPU run's files (what kernels/device/lease.sh or ab.sh wrote to $OUT).

Usage: python3 kernels/device/summarize.py PATH...
Each PATH is a file or a directory of them; every file is recognised by its content: a
{family: gpu-check report} map (check.json), one `bench --device cuda` report (bench-cuda.json),
a {"<binary>-<round>": bench report} map (ab.sh's bench.json) or peers.py's report (peers.json).
Prints Markdown to stdout; a file of none of these kinds is an error, not skipped silently.
E.g. `python3 kernels/device/summarize.py docs/results/gpu/h200-2026-11-30/call*.json`.
"""

import json
import os
import sys

# The case list of each family in a gpu-check report.
FAMILY_KEY = {"rows": "cases", "rowsquick": "cases", "variants": "variants", "updates": "updates", "batch": "batch_cases", "project": "projections"}


def checks(r):
    print("| family | cases | failed | worst error |")
    print("| --- | ---: | ---: | --- |")
    for fam, rep in r.items():
        cases = rep[FAMILY_KEY[fam]]
        failed = [c for c in cases if not c["pass"]]
        worst = ""
        if FAMILY_KEY[fam] == "cases" and cases:
            worst = "y {:.4f}, dx {:.4f}, dw {:.4f}, db {:.4f} ulp".format(
                max(c["forward_ulp"] for c in cases),
                max(c["dx_ulp"] for c in cases),
                max((c["dweight_ulp"] or 0) for c in cases),
                max((c["dbias_ulp"] or 0) for c in cases),
            )
        print(f"| {fam} | {len(cases)} | {len(failed)} | {worst} |")
        for c in failed:
            print(f"FAIL {fam}: {json.dumps(c)[:400]}")
    dev = next(iter(r.values()))["device"]
    print("\nrow kernels' image: " + ", ".join(f"{fam} {rep['image']['origin']}" for fam, rep in r.items()))
    print(f"\n{dev['name']}, sm_{dev['compute_capability'][0]}{dev['compute_capability'][1]}, {dev['sm_count']} SMs, driver {dev['driver_version']}\n")


def bench_table(r):
    c = r["copy_bandwidth"]
    print(f"row kernels' image: {r['image']['origin']} ({r['image']['target']}, NVRTC {r['image']['nvrtc_version'][0]}.{r['image']['nvrtc_version'][1]})\n")
    print(f"copy {c['gb_per_s']:.0f} GB/s (nl_copy16, {c['buffer_bytes'] >> 20} MiB, median of {c['timing']['reps']})\n")
    print("| kernel | shape | dir | us | GB/s | of copy | goal |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- |")
    for k in r["cases"]:
        s = k["shape"]
        print(f"| {k['kernel']} | {s['rows']}x{s['n']} | {k['direction']} | {k['timing']['median_s']*1e6:.1f} | {k['gb_per_s']:.0f} | {k['fraction_of_copy']:.3f} | {'met' if k['meets_goal'] else 'missed'} |")
    for p in r.get("projections", []):
        print(f"\nprojection {p['model']} {p['dtype']}: {p['gb_per_s']:.0f} GB/s, {p['fraction_of_copy']:.3f} of copy")


def ab_table(r):
    """bench.json of ab.sh: per kernel, every binary's two medians and the speed-up of each
    binary over the first (sum of the first's medians / sum of its own)."""
    names = []
    for k in r:
        n = k.rsplit("-", 1)[0]
        if n not in names:
            names.append(n)
    base = names[0]
    cases = {k: {(c["kernel"], c["direction"]): c for c in v["cases"]} for k, v in r.items()}
    print("row kernels' image: " + ", ".join(f"{k} {v['image']['origin']}" for k, v in sorted(r.items())) + "\n")
    print("copy GB/s: " + ", ".join(f"{k} {v['copy_bandwidth']['gb_per_s']:.0f}" for k, v in sorted(r.items())) + "\n")
    print("| kernel | dir | " + " | ".join(f"{n} us (of copy)" for n in names) + " | " + " | ".join(f"{n} / {base}" for n in names[1:]) + " |")
    print("|---|---|" + "---|" * (2 * len(names) - 1))
    for key in cases[f"{base}-1"]:
        cells, sums = [], {}
        for n in names:
            runs = [cases[k][key] for k in sorted(cases) if k.rsplit("-", 1)[0] == n]
            sums[n] = sum(c["timing"]["median_s"] for c in runs)
            cells.append("/".join(f"{c['timing']['median_s']*1e6:.1f}" for c in runs) + " (" + "/".join(f"{c['fraction_of_copy']:.3f}" for c in runs) + ")")
        ratios = [f"{sums[base] / sums[n]:.3f}" for n in names[1:]]
        print(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    for k, v in sorted(r.items()):
        print(f"\n{k}: {v['summary']['meeting_goal']} of {v['summary']['cases']} at their goals")


def peers(r):
    print(f"\n{r['device']}, torch {r['torch']}, triton {r['triton']}, liger {r['liger_kernel']}; torch copy {r['copy_gb_per_s']:.0f} GB/s\n")
    print("| peer | dtype | dir | us | GB/s | of torch copy | rel err |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for c in r["cases"]:
        print(f"| {c['peer']} | {c['dtype']} | {c['direction']} | {c['median_s']*1e6:.1f} | {c['gb_per_s']:.0f} | {c['fraction_of_copy']:.3f} | {c['rel_err_vs_fp32']:.1e} |")


def summarize(path):
    with open(path) as f:
        r = json.load(f)
    print(f"## {path}\n")
    if not isinstance(r, dict) or not r:
        raise SystemExit(f"{path}: not a report (empty or not a JSON object)")
    first = next(iter(r.values()))
    if r.get("schema") == "normlab.bench.cuda/1":
        bench_table(r)
    elif "torch" in r and "cases" in r:
        peers(r)
    elif isinstance(first, dict) and first.get("schema") == "normlab.gpu_check/1":
        checks(r)
    elif isinstance(first, dict) and first.get("schema") == "normlab.bench.cuda/1":
        ab_table(r)
    else:
        raise SystemExit(f"{path}: not a gpu-check map, bench report, A/B bench map or peers report")
    print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    for arg in sys.argv[1:]:
        files = sorted(os.path.join(arg, f) for f in os.listdir(arg) if f.endswith(".json")) if os.path.isdir(arg) else [arg]
        for f in files:
            summarize(f)
