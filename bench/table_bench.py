#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Markdown tables from qsdp-bench --json files (the tables of docs/benchmarks/).

    python3 bench/table_bench.py [--per-rank-mib 64] results/*.json

One row per (file, size): link, ranks, op, type, policy, MiB per rank, qsdp's time, the plain exchange's
time, the speedup, the byte ratio and the relative L2 error, sorted by link, op, type and policy.
--per-rank-mib keeps only the rows of that many MiB of input per rank (count * element size); without
it every size is listed. Model files are marked "(model)". Needs only the standard library.
"""
import json
import sys

from plot_bench import per_rank_mib, rate_gbps


def main(argv):
    args = argv[1:]
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    per_rank = None
    if len(args) >= 2 and args[0] == "--per-rank-mib":
        per_rank = float(args[1])
        args = args[2:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    rows = []
    for name in args:
        with open(name) as f:
            data = json.load(f)
        link = data.get("link") or {}
        gbps = rate_gbps(link)
        link_text = f"{gbps:g} Gbit/s" if gbps is not None else "in-process"
        if data["backend"] == "model":
            link_text += " (model)"
        policy = data["quantizer"]
        for r in data["rows"]:
            mib = per_rank_mib(data, r)
            if per_rank is not None and abs(mib - per_rank) > 1e-9:
                continue
            key = (gbps or 0, data["op"], data["dtype"], policy.split("<")[0], -data.get("bits", 0), mib)
            rl2 = r.get("rel_l2")
            rows.append((key, f"| {link_text} | {data['ranks']} | {data['op']} | {data['dtype']} | {policy} | {mib:g} | "
                              f"{r['time_us'] / 1e6:.3f} | {r['plain_time_us'] / 1e6:.3f} | "
                              f"{r['speedup']:.2f}x | {r['plain_wire_bytes'] / r['wire_bytes']:.2f} | "
                              + (f"{rl2:.2e}" if rl2 is not None else "-") + " |"))
    if not rows:
        print("table_bench.py: no rows matched", file=sys.stderr)
        return 1
    print("| link | ranks | op | type | policy | MiB per rank | qsdp (s) | plain (s) | speedup | byte ratio | rel. L2 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for _, text in sorted(rows):
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
