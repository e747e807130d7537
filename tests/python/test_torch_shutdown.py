# SPDX-License-Identifier: Apache-2.0
"""qsdp.torch at the end of a process: nothing printed at exit, communicators released with their
process group."""
import gc
import os
import subprocess
import sys
import tempfile
import textwrap

import torch
import torch.distributed as dist

import qsdp.torch as qt
from conftest import run_ranks

# A training program as users write them: FSDP2 with qsdp's hooks, the collectives and a
# DeltaGather, everything still referenced by globals when it ends, and no destroy_process_group.
_PROGRAM = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    import qsdp.torch as qt

    rank, world, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    handle = qt.fsdp.compress(model, weights=qt.random_shift(bits=8, seed=1),
                              grads=qt.stochastic(bits=8, seed=2), min_compressed_bytes=0)
    optimizer = torch.optim.AdamW(model.parameters())
    for _ in range(2):
        model(torch.randn(4, 64)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    gather = qt.DeltaGather(256)
    full = torch.empty(256 * world)
    gather.all_gather_into_tensor(full, torch.randn(256), qt.random_shift(bits=4, seed=3))
    grads = torch.randn(4096)
    qt.all_reduce(grads, qt.stochastic(bits=4, seed=4), op="avg")
    assert handle.stats()["reduce_scatter"]["calls"] > 0
    print("done", flush=True)
""")


def test_a_process_that_used_qsdp_exits_without_a_word():
    world = 2
    with tempfile.TemporaryDirectory() as folder:
        program = os.path.join(folder, "program.py")
        with open(program, "w") as f:
            f.write(_PROGRAM)
        store = os.path.join(folder, "store")
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        ranks = [subprocess.Popen([sys.executable, program, str(r), str(world), store],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd=folder, env=env)
                 for r in range(world)]
        results = [p.communicate(timeout=240) for p in ranks]
    for rank, (p, (out, err)) in enumerate(zip(ranks, results)):
        assert p.returncode == 0, f"rank {rank} exited with {p.returncode}:\n{err}"
        assert out.strip() == "done", f"rank {rank} printed {out!r}"
        # torch may warn at import (no NumPy here); qsdp adds nothing, and nanobind finds no
        # object of qsdp's outliving the interpreter.
        noise = [line for line in err.splitlines() if "nanobind" in line or "leaked" in line]
        assert not noise, f"rank {rank} printed at exit:\n{err}"


def _released_with_group(rank, world):
    group = dist.new_group(list(range(world)))
    tensor = torch.randn(4096)
    qt.all_reduce(tensor, qt.stochastic(bits=8, seed=1), group=group, min_compressed_bytes=0)
    assert group in qt._communicators
    before = len(qt._communicators)
    dist.destroy_process_group(group)
    del group
    gc.collect()
    assert len(qt._communicators) == before - 1


def test_communicators_are_released_with_their_process_group():
    run_ranks(2, _released_with_group)
