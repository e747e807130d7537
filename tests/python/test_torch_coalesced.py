# SPDX-License-Identifier: Apache-2.0
"""qsdp.torch's coalesced collectives on 3 gloo processes: every output the bits of the single call
made in its place, mixed dtypes and policies, the size gate on the total, the communicator's
counters, ranks that disagree raising on every rank, and bad arguments named."""
import pytest
import torch
import torch.distributed as dist

import qsdp
import qsdp.torch as qt
from conftest import run_ranks


def _values(rank, count, dtype, seed):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return (torch.randn(count, generator=g) * (1 + seed)).to(dtype)


def _policies():
    """A fresh set of the policies the tests use (each object keeps its own state)."""
    return [qt.random_shift(bits=8, bucket_size=128, seed=1), qt.stochastic(bits=4, seed=2),
            qt.hadamard(qt.stochastic(bits=4, bucket_size=256, seed=3)), qt.uniform(bits=6)]


SIZES = [(1000, torch.float32), (777, torch.bfloat16), (4096, torch.float32),
         (300, torch.float16)]


def _same_bits(a, b):
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _matches_single_calls(rank, world):
    # A new group per run: its communicator's call indices start at 0, so the coalesced calls and
    # the single calls draw the same random numbers.
    coalesced_group, single_group = dist.new_group(), dist.new_group()
    inputs = [_values(rank, n, dtype, i) for i, (n, dtype) in enumerate(SIZES)]
    outputs = [torch.empty(world * n, dtype=dtype) for n, dtype in SIZES]
    qt.all_gather_into_tensor_coalesced(outputs, inputs, _policies(), group=coalesced_group)
    grads = [_values(rank, world * n, dtype, 10 + i) for i, (n, dtype) in enumerate(SIZES)]
    reduced = [torch.empty(n, dtype=dtype) for n, dtype in SIZES]
    qt.reduce_scatter_tensor_coalesced(reduced, grads, _policies(), op="avg",
                                       group=coalesced_group)
    policies = _policies()
    for i, (n, dtype) in enumerate(SIZES):
        single = torch.empty(world * n, dtype=dtype)
        qt.all_gather_into_tensor(single, inputs[i], policies[i], group=single_group)
        assert _same_bits(single, outputs[i]), i
    policies = _policies()
    for i, (n, dtype) in enumerate(SIZES):
        single = torch.empty(n, dtype=dtype)
        qt.reduce_scatter_tensor(single, grads[i], policies[i], op="avg", group=single_group)
        assert _same_bits(single, reduced[i]), i
    # Quantized, not exact: the 4-bit gathers differ from the inputs.
    assert not torch.equal(outputs[1].view(world, -1)[rank], inputs[1])
    counters = qt.call_counters(group=coalesced_group)
    assert counters["compressed_calls"] == 2 * len(SIZES) and counters["gated_calls"] == 0
    dist.barrier()


def _gate_applies_to_the_total(rank, world):
    g = qt.stochastic(bits=4, bucket_size=64, seed=5)
    small = [_values(rank, 256, torch.float32, i) for i in range(16)]  # 1 KiB each, 16 KiB in all
    for gate, compressed in ((8 * 1024, True), (32 * 1024, False)):
        group = dist.new_group()
        outputs = [torch.empty(world * 256) for _ in small]
        qt.all_gather_into_tensor_coalesced(outputs, small, g, group=group,
                                            min_compressed_bytes=gate)
        exact = all(torch.equal(o.view(world, -1)[rank], x) for o, x in zip(outputs, small))
        assert exact != compressed, gate
        counters = qt.call_counters(group=group)
        assert counters["gated_calls" if not compressed else "compressed_calls"] == 16
        assert counters["gated_bytes" if not compressed else "compressed_bytes"] == 16 * 1024
    dist.barrier()


def _disagreement_raises_everywhere(rank, world):
    g = qt.stochastic(bits=8, seed=1)
    n = 3 if rank == 1 else 4  # rank 1 hands over one tensor fewer
    inputs = [torch.zeros(100) for _ in range(n)]
    outputs = [torch.empty(world * 100) for _ in range(n)]
    with pytest.raises(qsdp.Error, match="rank 1's group holds 3 calls, rank 0's 4"):
        qt.all_gather_into_tensor_coalesced(outputs, inputs, g)
    counts = [100, 100, 99 if rank == 2 else 100]
    with pytest.raises(qsdp.Error, match=r"call 2 of the group \(reduce_scatter\).*count"):
        qt.reduce_scatter_tensor_coalesced([torch.empty(c) for c in counts],
                                           [torch.zeros(world * c) for c in counts], g)
    # The communicator works on afterwards.
    out = torch.empty(world * 10)
    qt.all_gather_into_tensor_coalesced([out], [torch.full((10,), float(rank))], qt.identity())
    assert torch.equal(out, torch.arange(world).repeat_interleave(10).float())
    dist.barrier()


def _bad_arguments_named(rank, world):
    g = qt.stochastic(bits=8)
    x = torch.zeros(10)
    with pytest.raises(ValueError, match="2 outputs for 1 inputs"):
        qt.all_gather_into_tensor_coalesced([torch.empty(world * 10)] * 2, [x], g)
    with pytest.raises(ValueError, match="3 policies for 1 tensors"):
        qt.all_gather_into_tensor_coalesced([torch.empty(world * 10)], [x], [g, g, g])
    with pytest.raises(ValueError, match=r"outputs\[1\] has 10 values; expected world size"):
        qt.all_gather_into_tensor_coalesced([torch.empty(world * 10), torch.empty(10)], [x, x], g)
    with pytest.raises(TypeError, match=r"inputs\[0\] has dtype torch.int64"):
        qt.reduce_scatter_tensor_coalesced([torch.empty(10)],
                                           [torch.zeros(world * 10, dtype=torch.long)], g)
    with pytest.raises(TypeError, match="inputs is Tensor; expected a list"):
        qt.all_gather_into_tensor_coalesced([torch.empty(world * 10)], x, g)
    with pytest.raises(ValueError, match="op is 'max'"):
        qt.reduce_scatter_tensor_coalesced([torch.empty(10)], [torch.zeros(world * 10)], g,
                                           op="max")
    qt.all_gather_into_tensor_coalesced([], [], g)  # nothing to do, on every rank alike
    dist.barrier()


def test_coalesced_outputs_are_the_single_calls_bits():
    run_ranks(3, _matches_single_calls)


def test_the_size_gate_applies_to_the_coalesced_total():
    run_ranks(3, _gate_applies_to_the_total)


def test_ranks_that_disagree_on_a_coalesced_call_all_raise():
    run_ranks(3, _disagreement_raises_everywhere)


def test_bad_coalesced_arguments_raise_naming_them():
    run_ranks(2, _bad_arguments_named)
