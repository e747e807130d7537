#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Loss curves of qsdp_fsdp_train runs (the CSVs of --log), one line per run.

    python3 examples/fsdp_train/plot_losses.py OUT.png runs/*.csv

Draws the validation loss (solid) and the training loss (dotted) against the step. Needs matplotlib.
"""
import csv
import math
import sys
from pathlib import Path


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_losses.py: needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 1
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)  # more runs than the default cycle's 10 colours
    lowest = float("inf")
    for name in argv[2:]:
        with open(name) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            continue
        steps = [int(r["step"]) for r in rows]
        label = Path(name).stem.replace("_", " ")
        # A CSV with the training loss at every step has the validation loss at some (nan at the
        # others): the validation curve joins the steps that have one.
        evaluated = [(int(r["step"]), float(r["val"])) for r in rows
                     if not math.isnan(float(r["val"]))]
        lowest = min([lowest] + [float(r["train"]) for r in rows] + [v for _, v in evaluated])
        line, = ax.plot([s for s, _ in evaluated], [v for _, v in evaluated], label=label)
        ax.plot(steps, [float(r["train"]) for r in rows], ":", color=line.get_color())
    # A run that diverges (losses of tens of nats) would flatten every other curve: the axis stops
    # just above the uniform guess, ln 96 = 4.56 nats, and such a run leaves the top of the plot.
    low, high = ax.get_ylim()
    if high > 5.0:
        ax.set_ylim(max(low, lowest - 0.1), 5.0)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per character)")
    ax.set_title("FSDP training with quantized weights and gradients (solid: validation, dotted: train)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[1], dpi=120)
    print(f"plot_losses.py: wrote {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
