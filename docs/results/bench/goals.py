#!/usr/bin/env python3
"""Issue 2's speed goals over a set of `normlab bench norms --json` runs.

Usage: python3 docs/results/bench/goals.py FILE.json [FILE.json ...]

Prints, per run, the copy bandwidth and how many forwards met each goal (from the run's own
`summary`), then per case the range over the runs of the median time, the ratio to candle-nn's
`rms_norm` (forwards) and the fraction of copy bandwidth. Reads only what the runs wrote.
"""
import json
import sys


def key(case):
    s = case["shape"]
    shape = s if isinstance(s, str) else f"{s['rows']}x{s['n']}"
    return (case["direction"], shape, case["dtype"], case["kind"])


def span(values, fmt):
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else (fmt + "-" + fmt).format(lo, hi)


def main(paths):
    if not paths:
        sys.exit(__doc__)
    cases = {}
    for p in paths:
        d = json.load(open(p))
        s = d["summary"]
        prov = d["provenance"]
        print(
            f"{p}: commit {prov['git_commit'][:7]}{' (dirty)' if prov['git_dirty'] else ''}, "
            f"copy {d['copy_bandwidth']['gb_per_s']:.1f} GB/s, "
            f"3x: {s['forwards_meeting_ratio']} of {s['forwards']}, "
            f"60%: {s['forwards_meeting_copy_fraction']} of {s['forwards']}"
            + (f", misses: {s['misses']}" if s["misses"] else "")
        )
        for c in d["cases"]:
            cases.setdefault(key(c), []).append(c)
    print(f"\nover {len(paths)} runs: median ms; x candle-nn rms_norm (forwards); % of copy")
    for k in sorted(cases, key=lambda k: (k[0] != "forward", k[1], k[2], k[3])):
        cs = cases[k]
        ms = span([c["timing"]["median_s"] * 1e3 for c in cs], "{:.3f}")
        pct = span([100 * c["fraction_of_copy"] for c in cs], "{:.0f}")
        ratio = ""
        if k[0] == "forward" and cs[0].get("candle_rms_norm_ratio") is not None:
            ratio = "  " + span([c["candle_rms_norm_ratio"] for c in cs], "{:.2f}") + "x"
        print(f"{k[0]:8} {k[1]:>10} {k[2]:4} {k[3]:7}  {ms} ms{ratio}  {pct}%")


if __name__ == "__main__":
    main(sys.argv[1:])
