#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How close qsdp-bench --model comes to shaped measurements.

    python3 bench/model_check.py [--per-rank-mib 64] [--any-rate] measured/*.json model/*.json

Pairs every model file with the measured file of the same op, type, quantizer, ranks and link rate
(--any-rate: whatever the rates, for a model calibrated to the rate the plain exchange reached), and
prints, per size (or only --per-rank-mib), the predicted and measured times of qsdp and of the plain
exchange and their ratios (predicted / measured: 1.00 is exact, 0.80 means the model is 20 % short).
Needs only the standard library.
"""
import json
import sys

from plot_bench import rate_gbps

ELEMENT_BYTES = {"float": 4, "bf16": 2, "half": 2}


ANY_RATE = False


def key(d):
    return (d["op"], d["dtype"], d["quantizer"], d["ranks"], None if ANY_RATE else rate_gbps(d.get("link")))


def main(argv):
    args = argv[1:]
    global ANY_RATE
    per_rank = None
    while args and args[0] in ("--per-rank-mib", "--any-rate"):
        if args[0] == "--any-rate":
            ANY_RATE = True
            args = args[1:]
        else:
            per_rank = float(args[1])
            args = args[2:]
    measured, model = {}, {}
    for name in args:
        with open(name) as f:
            d = json.load(f)
        (model if d["backend"] == "model" else measured)[key(d)] = d
        d["_rate"] = rate_gbps(d.get("link"))
    print("| link | op | type | policy | MiB per rank | qsdp measured (s) | qsdp model (s) | model/measured |"
          " plain measured (s) | plain model (s) | model/measured |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    printed = 0
    for k in sorted(model, key=lambda k: (k[4] or 0, k[0], k[1], k[2])):
        if k not in measured:
            print(f"model_check.py: no measurement for {k}", file=sys.stderr)
            continue
        rows = {r["size"]: r for r in measured[k]["rows"]}
        for r in model[k]["rows"]:
            m = rows.get(r["size"])
            if m is None:
                continue
            mib = r["count"] * ELEMENT_BYTES[k[1]] / 2**20
            if per_rank is not None and abs(mib - per_rank) > 1e-9:
                continue
            rate = f"{measured[k]['_rate']:g} Gbit/s" + (f" (model {model[k]['_rate']:g})" if ANY_RATE else "")
            print(f"| {rate} | {k[0]} | {k[1]} | {k[2]} | {mib:g} | {m['time_us'] / 1e6:.3f} | "
                  f"{r['time_us'] / 1e6:.3f} | {r['time_us'] / m['time_us']:.2f} | "
                  f"{m['plain_time_us'] / 1e6:.3f} | {r['plain_time_us'] / 1e6:.3f} | "
                  f"{r['plain_time_us'] / m['plain_time_us']:.2f} |")
            printed += 1
    return 0 if printed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
