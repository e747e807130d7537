#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How close qsdp-bench --model comes to shaped measurements.

    python3 bench/model_check.py [--per-rank-mib 64] measured/*.json model/*.json

Pairs every model file with the measured file of the same op, type, quantizer, ranks and link rate, and
prints per size (or only --per-rank-mib) the measured qsdp time, the model's prediction at the nominal
link rate, and the prediction "calibrated" to the rate the plain all_gather actually reached on that
link (measured files of all_gather, same type and size): the model's network part scaled by nominal /
achieved rate, its codec part kept. Ratios are model / measured (1.00 is exact). Needs only the
standard library.
"""
import json
import sys

from plot_bench import per_rank_mib, rate_gbps


def main(argv):
    args = argv[1:]
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    only = None
    if len(args) >= 2 and args[0] == "--per-rank-mib":
        only = float(args[1])
        args = args[2:]
    measured, model = {}, {}
    achieved = {}  # (rate, dtype, MiB per rank) -> bytes per second one rank received in plain all_gather
    for name in args:
        with open(name) as f:
            d = json.load(f)
        rate = rate_gbps(d.get("link"))
        key = (d["op"], d["dtype"], d["quantizer"], d["ranks"], rate)
        (model if d["backend"] == "model" else measured)[key] = d
        if d["backend"] != "model" and d["op"] == "all_gather":
            for r in d["rows"]:
                received = (d["ranks"] - 1) * r["plain_wire_bytes"]
                achieved[(rate, d["dtype"], per_rank_mib(d, r))] = received / (r["plain_time_us"] * 1e-6)
    print("| link | op | type | policy | MiB per rank | measured (s) | model (s) | model/measured |"
          " plain reached (Gbit/s) | calibrated model (s) | calibrated/measured |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    printed = 0
    for key in sorted(model, key=lambda k: (k[4] or 0, k[0], k[1], k[2])):
        if key not in measured:
            print(f"model_check.py: no measurement for {key}", file=sys.stderr)
            continue
        op, dtype, policy, _, rate = key
        rows = {r["size"]: r for r in measured[key]["rows"]}
        for r in model[key]["rows"]:
            m = rows.get(r["size"])
            mib = per_rank_mib(model[key], r)
            if m is None or (only is not None and abs(mib - only) > 1e-9):
                continue
            reached = achieved.get((rate, dtype, mib))
            calibrated = cal_text = ratio_text = "-"
            if reached and r.get("codec_us") is not None and r.get("network_us") is not None:
                scale = (rate * 1e9 / 8) / reached
                calibrated = (r["codec_us"] + r["network_us"] * scale) / 1e6
                cal_text = f"{calibrated:.3f}"
                ratio_text = f"{calibrated / (m['time_us'] / 1e6):.2f}"
            print(f"| {rate:g} Gbit/s | {op} | {dtype} | {policy} | {mib:g} | {m['time_us'] / 1e6:.3f} | "
                  f"{r['time_us'] / 1e6:.3f} | {r['time_us'] / m['time_us']:.2f} | "
                  + (f"{reached * 8 / 1e9:.2f}" if reached else "-")
                  + f" | {cal_text} | {ratio_text} |")
            printed += 1
    return 0 if printed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
