#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""qsdp.torch's collectives against torch.distributed's own, side by side in one run: time, bytes,
error and speedup of qt.all_gather_into_tensor / qt.reduce_scatter_tensor against
dist.all_gather_into_tensor / dist.reduce_scatter_tensor on the same process group.

One process per rank, started the way torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT); on shaped links, each rank in its own network namespace:

    sudo bench/net/run.sh --ranks 4 --rate 1gbit --env-ranks -- \\
        build/python-venv/bin/python bench/torch_peers.py --mib 64 --json peers-1gbit.json
    torchrun --standalone --nproc-per-node 4 bench/torch_peers.py --mib 4     # no shaping

Every timed call starts after a barrier; a call's time is the slowest rank's; the table shows the
median over --iters calls after --warmup ones. The torch call runs first, then each qsdp policy on the
same input; the errors are relative L2 distances from the exact result (float64), torch's own too:
gloo sums bf16 in bf16, rounding after every add, where qsdp sums in float32 and rounds once. Data as qsdp-bench
makes it: weight-like (normal, scale 0.02) for the all-gather, gradient-like for the reduce-scatter
(scale 1e-3, every 97th value 1000 times larger). --mib is the bytes per rank: the all-gather's input,
the reduce-scatter's output. Rank 0 prints a line per row as it goes and the markdown table at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.distributed as dist

import qsdp.torch as qt

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def policies_for(op: str, widths: list[int], bucket: int) -> list[qt.Policy]:
    made = [qt.identity()]
    for bits in widths:
        if op == "all_gather":
            made.append(qt.random_shift(bits=bits, bucket_size=bucket, seed=1))
        else:
            made.append(qt.stochastic(bits=bits, bucket_size=bucket, seed=2))
    if op == "reduce_scatter" and 4 in widths:
        made.append(qt.hadamard(qt.stochastic(bits=4, bucket_size=bucket, seed=3)))
    return made


def make_data(op: str, count: int, dtype: torch.dtype, rank: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(count, generator=gen, dtype=torch.float32)
    if op == "all_gather":
        x *= 0.02
    else:
        x *= 1e-3
        x[::97] *= 1000.0
    return x.to(dtype)


def exact_result(op: str, count: int, dtype: torch.dtype, rank: int, world: int) -> torch.Tensor:
    """What the collective would return without rounding, in float64: the concatenated inputs, or
    the sum of every rank's chunk `rank` (each rank's data comes from its seed)."""
    if op == "all_gather":
        return torch.cat([make_data(op, count, dtype, r).double() for r in range(world)])
    total = torch.zeros(count, dtype=torch.float64)
    for r in range(world):
        total += make_data(op, count * world, dtype, r)[rank * count:(rank + 1) * count].double()
    return total


def slowest(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def timed(call, iters: int, warmup: int) -> float:
    times = []
    for i in range(warmup + iters):
        dist.barrier()
        start = time.perf_counter()
        call()
        elapsed = slowest(time.perf_counter() - start)
        if i >= warmup:
            times.append(elapsed)
    return statistics.median(times)


def relative_l2(got: torch.Tensor, exact: torch.Tensor) -> float:
    """Worst rank's relative L2 distance from the exact result, in float64."""
    g, w = got.double(), exact
    num = torch.linalg.vector_norm(g - w).item()
    den = torch.linalg.vector_norm(w).item()
    t = torch.tensor([num / den if den > 0 else num], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=float, default=64, help="MiB per rank (default 64)")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--ops", default="all_gather,reduce_scatter")
    p.add_argument("--bits", default="8,4", help="widths to run (default 8,4)")
    p.add_argument("--bucket", type=int, default=1024)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--json", help="write every row here (rank 0)")
    args = p.parse_args()
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    ops = args.ops.split(",")
    for op in ops:
        if op not in ("all_gather", "reduce_scatter"):
            p.error(f"--ops: {op!r} is not all_gather or reduce_scatter")
    widths = [int(b) for b in args.bits.split(",") if b]
    torch.set_num_threads(args.threads)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"torch_peers: {world} ranks, {args.mib:g} MiB per rank, torch {torch.__version__}, "
        f"link {os.environ.get('QSDP_NET_RATE', 'unshaped')}", flush=True)
    rows = []
    for op in ops:
        for dtype in dtypes:
            elem = torch.empty((), dtype=dtype).element_size()
            count = int(args.mib * 2**20) // elem  # values per rank
            mine = make_data(op, count if op == "all_gather" else count * world, dtype, rank)
            out_shape = count * world if op == "all_gather" else count
            want = torch.empty(out_shape, dtype=dtype)
            got = torch.empty(out_shape, dtype=dtype)
            if op == "all_gather":
                plain = lambda: dist.all_gather_into_tensor(want, mine)  # noqa: E731
            else:
                plain = lambda: dist.reduce_scatter_tensor(want, mine, op=dist.ReduceOp.SUM)  # noqa: E731
            plain_s = timed(plain, args.iters, args.warmup)
            exact = exact_result(op, count, dtype, rank, world)
            plain_error = relative_l2(want, exact)
            plain_bytes = count * elem
            for policy in policies_for(op, widths, args.bucket):
                if op == "all_gather":
                    call = lambda: qt.all_gather_into_tensor(got, mine, policy)  # noqa: E731
                else:
                    call = lambda: qt.reduce_scatter_tensor(got, mine, policy, op="sum")  # noqa: E731
                seconds = timed(call, args.iters, args.warmup)
                wire = qt.compressed_size(policy, count, dtype=dtype)
                row = {
                    "op": op, "dtype": str(dtype).removeprefix("torch."), "policy": policy.name,
                    "ranks": world, "mib_per_rank": args.mib, "count_per_rank": count,
                    "link": os.environ.get("QSDP_NET_RATE", "unshaped"),
                    "qsdp_s": seconds, "torch_s": plain_s, "speedup": plain_s / seconds,
                    "wire_bytes": wire, "torch_bytes": plain_bytes, "byte_ratio": plain_bytes / wire,
                    "rel_l2": relative_l2(got, exact), "torch_rel_l2": plain_error,
                    "iters": args.iters,
                }
                rows.append(row)
                say(f"  {op:14} {row['dtype']:8} {row['policy']:24} qsdp {seconds:7.3f} s  "
                    f"torch {plain_s:7.3f} s  {row['speedup']:5.2f}x  bytes /{row['byte_ratio']:5.2f}"
                    f"  rel. L2 {row['rel_l2']:.2e} (torch {plain_error:.1e})", flush=True)
            del mine, want, got, exact
    if rank == 0:
        say("\n| link | ranks | op | type | policy | MiB per rank | qsdp (s) | torch gloo (s) | speedup "
            "| byte ratio | rel. L2 | torch's rel. L2 |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            say(f"| {r['link']} | {r['ranks']} | {r['op']} | {r['dtype']} | {r['policy']} | "
                f"{r['mib_per_rank']:g} | {r['qsdp_s']:.3f} | {r['torch_s']:.3f} | {r['speedup']:.2f}x "
                f"| {r['byte_ratio']:.2f} | {r['rel_l2']:.2e} | {r['torch_rel_l2']:.1e} |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"machine": platform.machine(), "cpus": os.cpu_count(),
                           "torch": torch.__version__, "python": sys.version.split()[0],
                           "rows": rows}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
