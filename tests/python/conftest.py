# SPDX-License-Identifier: Apache-2.0
"""Helpers for qsdp.torch's tests: `run_ranks(world, fn, *args)` runs fn(rank, world, *args) in
`world` processes joined by a gloo process group (a file store, no ports), and fails the test with
the first failing rank's traceback."""
import os
import tempfile
import time
import traceback

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp


def _rank_main(rank, world, store_path, fn, args, errors):
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank,
                            world_size=world)
    try:
        fn(rank, world, *args)
    except BaseException:  # noqa: BLE001 -- reported to the parent (before the group closes and
        errors.put((rank, traceback.format_exc()))  # the other ranks fail on the closed links)
        raise
    finally:
        dist.destroy_process_group()


# Ranks are forked from a server process that imported torch and qsdp once (a fresh interpreter per
# rank spends seconds importing torch, times 4 ranks on 2 cores, for every test); the server runs
# no torch operation itself, so forking it is safe where forking the test process (whose torch
# thread pools have run) is not.
_context = mp.get_context("forkserver")
_context.set_forkserver_preload(["torch", "torch.distributed", "qsdp.torch", "conftest"])


def run_ranks(world, fn, *args, timeout=120):
    """Fails with the first failure to arrive (the cause; the other ranks' are usually the broken
    connection that follows), after ending the ranks still waiting on the failed one."""
    ctx = _context
    errors = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "store")
        procs = [ctx.Process(target=_rank_main, args=(r, world, store, fn, args, errors))
                 for r in range(world)]
        for p in procs:
            p.start()
        failures = []
        deadline = time.monotonic() + timeout
        grace = None  # after a failure, the others get a few seconds to report theirs
        while any(p.is_alive() for p in procs):
            while not errors.empty():
                failures.append(errors.get())
            now = time.monotonic()
            if failures and grace is None:
                grace = now + 5.0
            if now > deadline or (grace is not None and now > grace):
                break
            time.sleep(0.05)
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        while not errors.empty():
            failures.append(errors.get())
        if failures:
            rank, text = failures[0]
            others = sorted(r for r, _ in failures[1:])
            pytest.fail(f"rank {rank} of {world} failed first (then ranks {others}; "
                        f"ended waiting: {hung}):\n{text}")
        if hung:
            pytest.fail(f"ranks {hung} of {world} still running after {timeout} s")
        bad = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode != 0]
        if bad:
            pytest.fail(f"ranks exited with {bad}")
