#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plots of qsdp-bench results (the JSON files written with --json).

    python3 bench/plot_bench.py OUT_DIR [--per-rank-mib 64] results/*.json

Writes two PNG files into OUT_DIR:
  speedup.png  speedup over the uncompressed exchange against the link rate, one line per
               (op, dtype, bits), at --per-rank-mib MiB of input per rank (default: the largest size
               each file measured)
  error.png    relative L2 error against bits, one line per (op, dtype), at the same size
Needs matplotlib (pip install matplotlib). Files without a link rate (in-process runs) are skipped in
the first plot; model files are drawn dashed.
"""
import json
import re
import sys
from collections import defaultdict
from pathlib import Path


ELEMENT_BYTES = {"float": 4, "bf16": 2, "half": 2}


def per_rank_mib(run, row):
    """MiB of input per rank of one row of a --json file (count values of the run's type)."""
    return row["count"] * ELEMENT_BYTES[run["dtype"]] / 2**20


def rate_gbps(link):
    """'1gbit' / '500mbit' / {'rate_gbps': 10} -> Gbit/s, or None."""
    if not link:
        return None
    if "rate_gbps" in link:
        return float(link["rate_gbps"])
    m = re.fullmatch(r"([0-9.]+)\s*([kmgt]?)bit", str(link.get("rate", "")).lower())
    if not m:
        return None
    scale = {"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1.0, "t": 1e3}[m.group(2)]
    return float(m.group(1)) * scale


def main(argv):
    if any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__)
        return 0
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench.py: needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 1
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    names = argv[2:]
    per_rank = None
    if len(names) >= 2 and names[0] == "--per-rank-mib":
        per_rank = float(names[1])
        names = names[2:]
    runs = []
    for name in names:
        with open(name) as f:
            data = json.load(f)
        if not data.get("rows"):
            print(f"plot_bench.py: {name} has no rows; skipped", file=sys.stderr)
            continue
        runs.append(data)
    if not runs:
        print("plot_bench.py: nothing to plot", file=sys.stderr)
        return 1

    def chosen(r):
        """The row of --per-rank-mib, else the largest; None if the file lacks that size."""
        if per_rank is None:
            return max(r["rows"], key=lambda row: row["size"])
        for row in r["rows"]:
            if abs(per_rank_mib(r, row) - per_rank) < 1e-9:
                return row
        return None

    # Speedup against link rate, at the chosen size.
    lines = defaultdict(list)
    for r in runs:
        g = rate_gbps(r.get("link"))
        if g is None:
            continue
        last = chosen(r)
        if last is None:
            continue
        key = (r["op"], r["dtype"], r.get("bits", 0), r["backend"] == "model")
        lines[key].append((g, last["speedup"]))
    # One panel per op; colour = bits, line = element type, dotted = model.
    colours = {8: "tab:blue", 4: "tab:orange", 2: "tab:green", 0: "tab:grey"}
    ops = sorted({key[0] for key in lines})
    fig, axes = plt.subplots(1, max(1, len(ops)), figsize=(6 * max(1, len(ops)), 4.8), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for (o, dtype, bits, model), points in sorted(lines.items()):
            if o != op:
                continue
            points.sort()
            style = ":" if model else ("-" if dtype == "float" else "--")
            ax.plot([p[0] for p in points], [p[1] for p in points], style, color=colours.get(bits, "black"),
                    marker="x" if model else ("o" if dtype == "float" else "s"),
                    label=f"{dtype} " + (f"{bits}-bit" if bits else "identity") + (" (model)" if model else ""))
        ax.set_xscale("log")
        ax.set_xlabel("link rate per rank (Gbit/s)")
        ax.set_ylabel("speedup over the uncompressed exchange")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title(f"{op}, " + (f"{per_rank:g} MiB per rank" if per_rank is not None else "largest size"))
    fig.tight_layout()
    fig.savefig(out / "speedup.png", dpi=120)

    # Error against bits.
    errors = defaultdict(dict)
    for r in runs:
        if r["backend"] == "model" or not r.get("bits"):  # no error to draw for models and identity
            continue
        last = chosen(r)
        if last is not None and last.get("rel_l2") is not None:
            errors[(r["op"], r["dtype"], r["quantizer"].split("<")[0])][r.get("bits", 0)] = last["rel_l2"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (op, dtype, policy), by_bits in sorted(errors.items()):
        bits = sorted(by_bits)
        ax.plot(bits, [by_bits[b] for b in bits], marker="o", label=f"{op} {dtype} {policy}")
    ax.set_yscale("log")
    ax.set_xlabel("bits per value")
    ax.set_ylabel("relative L2 error (worst rank)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("error against bits")
    fig.tight_layout()
    fig.savefig(out / "error.png", dpi=120)
    print(f"plot_bench.py: wrote {out / 'speedup.png'} and {out / 'error.png'} from {len(runs)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
