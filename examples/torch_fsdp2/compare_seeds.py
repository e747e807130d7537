#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Summarizes examples/torch_fsdp2/run_seeds.sh's CSVs: for each precision and compressed run, over
the seeds, the final validation loss against the uncompressed run of the same seed (mean, smallest,
largest relative difference, and how many seeds ended below it), and the largest relative
difference of the training loss at any step and over the last tenth of the steps.

    python3 examples/torch_fsdp2/compare_seeds.py DIR
"""
import argparse
import csv
import math
import pathlib
import re
import statistics
import sys


def read(path):
    """{step: (train, val)} of one run's CSV (val nan where the step was not evaluated)."""
    with open(path) as f:
        return {int(r["step"]): (float(r["train"]), float(r["val"])) for r in csv.DictReader(f)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", help="run_seeds.sh's --out folder")
    args = p.parse_args()
    runs = {}
    for path in sorted(pathlib.Path(args.folder).glob("*_s*_*.csv")):
        m = re.fullmatch(r"(\w+)_s(\d+)_(\w+)\.csv", path.name)
        if m:
            runs[(m.group(1), int(m.group(2)), m.group(3))] = read(path)
    if not runs:
        sys.exit(f"compare_seeds.py: no <precision>_s<seed>_<run>.csv under {args.folder}")
    print("| precision | run | seeds | final val, uncompressed | final val | vs uncompressed: "
          "mean (min .. max) | seeds below | largest step diff, train | last tenth |")
    print("|---|---|---|---|---|---|---|---|---|")
    for precision in sorted({k[0] for k in runs}):
        names = sorted({k[2] for k in runs if k[0] == precision and k[2] != "fp32"})
        for name in names:
            finals, refs, diffs, below, steps_max, tail_max = [], [], [], 0, [], []
            for (prec, seed, run), losses in sorted(runs.items()):
                ref = runs.get((prec, seed, "fp32"))
                if prec != precision or run != name or ref is None:
                    continue
                last = max(step for step in losses if not math.isnan(losses[step][1]))
                val, ref_val = losses[last][1], ref[last][1]
                finals.append(val)
                refs.append(ref_val)
                diffs.append((val - ref_val) / ref_val)
                below += val < ref_val
                step_diffs = [abs(losses[s][0] - ref[s][0]) / ref[s][0] for s in sorted(losses)]
                steps_max.append(max(step_diffs))
                tail_max.append(max(step_diffs[-max(1, len(step_diffs) // 10):]))
            if not diffs:
                continue
            print(f"| {precision} | {name} | {len(diffs)} | {statistics.mean(refs):.4f} | "
                  f"{statistics.mean(finals):.4f} | {100 * statistics.mean(diffs):+.2f} % "
                  f"({100 * min(diffs):+.2f} .. {100 * max(diffs):+.2f}) | {below} of {len(diffs)} "
                  f"| {100 * statistics.mean(steps_max):.2f} % | {100 * statistics.mean(tail_max):.2f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
