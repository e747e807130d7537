# SPDX-License-Identifier: Apache-2.0
"""qsdp.torch's collectives with async_op=True on 3 gloo processes: a torch.distributed Work
returned before the peers have joined, the bits of the blocking calls in the order started, the
caller's own torch collectives running meanwhile, errors raised by wait() on every rank, and FSDP2's
asynchronous unshard through qt.fsdp.compress."""
import time

import pytest
import torch
import torch.distributed as dist

import qsdp
import qsdp.torch as qt
from conftest import run_ranks

N = 3000


def _values(rank, count, seed):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randn(count, generator=g)


def _calls(rank, world, group, async_op):
    """The same calls, blocking or started (then waited for in reverse order)."""
    q8, q4 = qt.stochastic(bits=8, seed=1), qt.stochastic(bits=4, seed=2)
    shard, full = _values(rank, N, 1), _values(rank, world * N, 2)
    gathered, scattered, reduced = torch.empty(world * N), torch.empty(N), _values(rank, N, 3)
    coalesced = [torch.empty(world * N), torch.empty(world * 100, dtype=torch.bfloat16)]
    works = [
        qt.all_gather_into_tensor(gathered, shard, q8, group=group, async_op=async_op),
        qt.reduce_scatter_tensor(scattered, full, q8, op="avg", group=group, async_op=async_op),
        qt.all_reduce(reduced, q4, op="sum", group=group, async_op=async_op),
        qt.all_gather_into_tensor_coalesced(
            coalesced, [shard, shard[:100].to(torch.bfloat16)], q8, group=group,
            async_op=async_op),
    ]
    if async_op:
        assert all(isinstance(w, dist.Work) for w in works)
        for w in reversed(works):
            assert w.wait() is True
            assert w.is_completed()
    else:
        assert works == [None] * 4
    return [gathered, scattered, reduced, *coalesced]


def _same_bits_as_blocking(rank, world):
    # Fresh groups: both runs draw their random numbers from call index 0.
    blocking = _calls(rank, world, dist.new_group(), False)
    started = _calls(rank, world, dist.new_group(), True)
    for i, (a, b) in enumerate(zip(blocking, started)):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), i
    assert not torch.equal(blocking[0].view(world, -1)[rank], _values(rank, N, 1))  # quantized
    dist.barrier()


def _returns_before_the_peers(rank, world):
    shard, full = torch.full((N,), float(rank + 1)), torch.empty(world * N)
    # The group's first qsdp call makes its communicator, with every rank: not the one timed.
    qt.all_gather_into_tensor(full, shard, qt.uniform(bits=8))
    if rank != 0:
        time.sleep(0.5)
        qt.all_gather_into_tensor(full, shard, qt.uniform(bits=8))
    else:
        start = time.monotonic()
        work = qt.all_gather_into_tensor(full, shard, qt.uniform(bits=8), async_op=True)
        returned = time.monotonic() - start
        pending = not work.is_completed()
        assert work.wait()
        assert returned < 0.3 and pending, (returned, pending)
    for r in range(world):
        assert abs(full[r * N].item() - (r + 1)) < 0.05
    dist.barrier()


def _own_collectives_meanwhile(rank, world):
    """The caller's torch collectives on the same group while a qsdp one is on the wire: neither
    waits for the other, in any interleaving."""
    shard, full = _values(rank, N, 4), torch.empty(world * N)
    if rank == 1:
        time.sleep(0.2)  # this rank's qsdp exchange starts after the others' all_reduce
    work = qt.all_gather_into_tensor(full, shard, qt.uniform(bits=8), async_op=True)
    x = torch.tensor([float(rank)])
    dist.all_reduce(x)
    assert x.item() == sum(range(world))
    future = work.get_future()
    assert future.wait()[0] is full
    assert work.wait()
    # The codec's share of the time, once the started call is done (call_timings waits for it).
    t = qt.call_timings()
    assert t["encode"] > 0 and t["decode"] > 0
    assert t["calls"] >= t["encode"] + t["decode"] and t["exchange"] >= 0
    dist.barrier()


def _errors_at_wait(rank, world):
    n = 99 if rank == 1 else 100
    shard, full = torch.ones(n), torch.empty(world * n)
    work = qt.all_gather_into_tensor(full, shard, qt.uniform(bits=8), async_op=True)
    with pytest.raises(qsdp.Error, match="rank 1 called with count 99"):
        work.wait()
    work.wait()  # raised once
    # The communicator goes on.
    shard, full = torch.ones(100), torch.empty(world * 100)
    qt.all_gather_into_tensor(full, shard, qt.uniform(bits=8))
    assert full[-1].item() == pytest.approx(1.0, abs=0.01)
    dist.barrier()


def _fsdp_async_unshard(rank, world):
    from torch.distributed.fsdp import fully_shard

    def model():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8))
        for layer in (m[0], m[2]):
            fully_shard(layer)
        fully_shard(m)
        return m

    x = _values(rank, 4 * 64, 5).view(4, 64)
    outputs = []
    for prefetch in (False, True):
        m = model()
        handle = qt.fsdp.compress(m, weights=qt.uniform(bits=8), min_compressed_bytes=0)
        if prefetch:
            unshard = m[0].unshard(async_op=True)
            # FSDP keeps the hook's Work and waits on it before the module reads its weights.
            result = m[0]._get_fsdp_state()._fsdp_param_group._all_gather_result
            assert isinstance(result.all_gather_work, dist.Work)
            unshard.wait()
        outputs.append(m(x))
        assert handle.stats()["all_gather"]["fallback_calls"] == 0
    assert torch.equal(outputs[0], outputs[1])
    dist.barrier()


def test_started_collectives_give_the_blocking_calls_bits():
    run_ranks(3, _same_bits_as_blocking)


def test_a_started_collective_returns_before_its_peers_join():
    run_ranks(3, _returns_before_the_peers)


def test_the_callers_own_collectives_run_while_one_is_started():
    run_ranks(3, _own_collectives_meanwhile)


def test_a_started_collectives_error_is_raised_by_wait_on_every_rank():
    run_ranks(3, _errors_at_wait)


def test_fsdp_async_unshard_uses_the_hooks_work():
    run_ranks(2, _fsdp_async_unshard)
