#!/usr/bin/env python3
"""The size-gate sweeps of docs/benchmarks/small-messages.md: for each link, op, dtype and size
per rank, the median over the runs of qsdp's speedup over plain MPI with the gate off (gate0-runK,
--gate 0: every size compressed, as before the gate) and with the default gate (default-runK), and
the median times. Usage: python3 summarize.py (in this folder)."""
import glob
import json
import statistics

res = {}
for d in sorted(glob.glob("*-run*")):
    mode = d.split("-run")[0]
    for f in glob.glob(d + "/*.json"):
        j = json.load(open(f))
        key = (j["link"]["rate"], j["op"], j["dtype"])
        for r in j["rows"]:
            per_rank = r["size"] // j["ranks"]
            res.setdefault((mode, key, per_rank), []).append(r)

print("| link | op | type | per rank | gate off: qsdp / MPI (us) | speedup | default gate: qsdp / MPI (us) | speedup |")
print("|---|---|---|---|---|---|---|---|")
for key, per in sorted(set((k[1], k[2]) for k in res), key=lambda k: (k[0][0], k[0][1], k[0][2], k[1])):
    cells = []
    for mode in ("gate0", "default"):
        rows = res.get((mode, key, per), [])
        q = statistics.median(r["time_us"] for r in rows)
        p = statistics.median(r["plain_time_us"] for r in rows)
        s = statistics.median(r["speedup"] for r in rows)
        cells += [f"{q:.0f} / {p:.0f}", f"{s:.2f}x"]
    print(f"| {key[0]} | {key[1]} | {key[2]} | {per // 1024} KiB | " + " | ".join(cells) + " |")
