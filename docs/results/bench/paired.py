#!/usr/bin/env python3
"""Paired A/B ratios over alternating `normlab bench norms --json` runs.

Usage: python3 docs/results/bench/paired.py FILE.json [FILE.json ...]

Files named `...before-R.json` and `...after-R.json` (R the round) are paired by round; per
case (forwards and backwards), prints the median over the rounds of time(after-R) /
time(before-R) (each a run's median), its range, and how many rounds were slower after.
Reads only what the runs wrote.
"""
import json
import re
import statistics
import sys

from goals import key


def main(paths):
    if not paths:
        sys.exit(__doc__)
    times = {}
    for p in paths:
        m = re.search(r"(before|after)-(\d+)\.json$", p)
        if not m:
            sys.exit(f"{p}: not named ...before-R.json or ...after-R.json")
        side, rnd = m.group(1), int(m.group(2))
        for c in json.load(open(p))["cases"]:
            times.setdefault(key(c), {})[(side, rnd)] = c["timing"]["median_s"]
    for k in sorted(times):
        t = times[k]
        rounds = sorted(r for (s, r) in t if s == "after" and ("before", r) in t)
        if not rounds:
            continue
        ratios = [t[("after", r)] / t[("before", r)] for r in rounds]
        print(
            f"{k[0]:8} {k[1]:>10} {k[2]:4} {k[3]:8} after/before median {statistics.median(ratios):.3f} "
            f"({min(ratios):.2f}-{max(ratios):.2f}), slower after in {sum(r > 1 for r in ratios)} of {len(ratios)}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
