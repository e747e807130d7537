# SPDX-License-Identifier: Apache-2.0
"""qsdp.torch's collectives on 4 gloo processes (and 3, an odd world): identity bit-exact against
torch.distributed's own collectives, error bounds, every rank ending with the same values, a rank
that calls differently making every rank raise, bad tensors, and the size gate (small calls move
uncompressed, exactly as qt.identity() would)."""
import pytest
import torch
import torch.distributed as dist

import qsdp
import qsdp.torch as qt
from conftest import run_ranks

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _shard(rank, count, dtype, seed=0):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randn(count, generator=g).to(dtype)


def _same_on_every_rank(t):
    gathered = torch.empty(dist.get_world_size() * t.numel(), dtype=t.dtype)
    dist.all_gather_into_tensor(gathered, t.contiguous().view(-1))
    for chunk in gathered.view(dist.get_world_size(), -1):
        assert torch.equal(chunk.view(torch.int16 if t.element_size() == 2 else torch.int32),
                           t.view(-1).view(chunk.view(torch.int16 if t.element_size() == 2
                                                      else torch.int32).dtype))


def _identity_matches_torch(rank, world):
    for dtype in DTYPES:
        count = 1000 + 3  # not a multiple of anything
        x = _shard(rank, count, dtype)
        ours, theirs = torch.empty(world * count, dtype=dtype), torch.empty(world * count,
                                                                           dtype=dtype)
        qt.all_gather_into_tensor(ours, x, qt.identity())
        dist.all_gather_into_tensor(theirs, x)
        assert torch.equal(ours.view(torch.uint8), theirs.view(torch.uint8)), dtype
        # reduce-scatter: the sum in float32 in rank order, as torch.distributed's would be for
        # exact inputs (values on a 2^-8 grid below 2^8: every partial sum is exact)
        full = (torch.randint(-2**15, 2**15, (world * count,),
                              generator=torch.Generator().manual_seed(rank)) / 256.0).to(dtype)
        out = torch.empty(count, dtype=dtype)
        qt.reduce_scatter_tensor(out, full, qt.identity(), op="sum")
        expected = full.float().clone()
        dist.all_reduce(expected)
        assert torch.equal(out, expected[rank * count:(rank + 1) * count].to(dtype)), dtype


def _quantized_collectives(rank, world):
    for dtype in DTYPES:
        count = 4096 + 17
        w = qt.random_shift(bits=8, bucket_size=1024, seed=1)
        g = qt.stochastic(bits=8, bucket_size=1024, seed=2)
        x = _shard(rank, count, dtype, seed=1)
        full = torch.empty(world * count, dtype=dtype)
        qt.all_gather_into_tensor(full, x, w, min_compressed_bytes=0)
        exact = torch.empty_like(full)
        dist.all_gather_into_tensor(exact, x)
        err = (full.float() - exact.float()).norm() / exact.float().norm()
        assert err < 0.01, (dtype, float(err))
        _same_on_every_rank(full)
        # reduce-scatter, avg: against the exact mean
        grads = _shard(rank, world * count, dtype, seed=2)
        out = torch.empty(count, dtype=dtype)
        qt.reduce_scatter_tensor(out, grads, g, op="avg", min_compressed_bytes=0)
        mean = grads.float().clone()
        dist.all_reduce(mean)
        mean = mean[rank * count:(rank + 1) * count] / world
        err = (out.float() - mean).norm() / mean.norm()
        assert err < 0.02, (dtype, float(err))
        # all_reduce: in place, the same values on every rank, near the exact sum
        t = grads.clone()
        qt.all_reduce(t, g, op=dist.ReduceOp.SUM, min_compressed_bytes=0)
        total = grads.float().clone()
        dist.all_reduce(total)
        err = (t.float() - total).norm() / total.norm()
        assert 0 < err < 0.02, (dtype, float(err))  # quantized: not exact
        _same_on_every_rank(t)
    # 4-bit rotated gradients: the rotation's gain survives the collective
    count = 1 << 14
    grads = torch.randn(world * count, generator=torch.Generator().manual_seed(rank))
    grads[torch.arange(rank, grads.numel(), 997)] *= 100.0
    exact = grads.clone()
    dist.all_reduce(exact)
    exact = exact[rank * count:(rank + 1) * count]
    errors = {}
    for name, q in {"plain": qt.stochastic(bits=4, bucket_size=256, seed=3),
                    "rotated": qt.hadamard(qt.stochastic(bits=4, bucket_size=256, seed=3))}.items():
        out = torch.empty(count)
        qt.reduce_scatter_tensor(out, grads, q, op="sum")
        errors[name] = float((out - exact).norm() / exact.norm())
    assert errors["rotated"] * 3 < errors["plain"], errors


def _block_scaled_collectives(rank, world):
    count = 32 * 50 + 7  # a partial last block
    for dtype in (torch.float32, torch.bfloat16):
        # An all-gather of round-to-nearest packets: each rank's part is what encoding and decoding
        # that rank's input alone gives (NVFP4: its own tensor scale per packet).
        x = _shard(rank, count, dtype, seed=3) * (rank + 1)
        inputs = torch.empty(world * count, dtype=dtype)
        dist.all_gather_into_tensor(inputs, x)
        for q in (qt.mxfp8(), qt.mxfp6("e3m2"), qt.mxfp4(), qt.nvfp4()):
            full = torch.empty(world * count, dtype=dtype)
            qt.all_gather_into_tensor(full, x, q)
            for r, part in enumerate(full.view(world, count)):
                alone = torch.empty(count, dtype=dtype)
                qt.decode(q, qt.encode(q, inputs[r * count:(r + 1) * count]), alone)
                assert torch.equal(part.view(torch.uint8), alone.view(torch.uint8)), (q.name, r)
        # Reduce-scatter and all-reduce of stochastic, rotated gradients: near the exact mean,
        # the same bits on every rank.
        grads = _shard(rank, world * count, dtype, seed=4)
        mean = grads.float().clone()
        dist.all_reduce(mean)
        mean /= world
        # The bounds: 1.3x the all-reduce errors seen (it quantizes twice; the reduce-scatter's
        # are 0.075, 0.17 and 0.17).
        for q, bound in ((qt.mxfp8("e5m2", "stochastic", seed=5), 0.14),
                         (qt.hadamard(qt.mxfp4("stochastic", seed=6)), 0.32),
                         (qt.nvfp4("stochastic", seed=7), 0.3)):
            out = torch.empty(count, dtype=dtype)
            qt.reduce_scatter_tensor(out, grads, q, op="avg")
            exact = mean[rank * count:(rank + 1) * count]
            err = float((out.float() - exact).norm() / exact.norm())
            assert 0 < err < bound, (q.name, dtype, err)
            t = grads.clone()
            qt.all_reduce(t, q, op="avg")
            err = float((t.float() - mean).norm() / mean.norm())
            assert 0 < err < bound, (q.name, dtype, err)
            _same_on_every_rank(t)


def _mismatch_raises_on_every_rank(rank, world):
    g = qt.stochastic(bits=8, bucket_size=1024, seed=2)
    count = 1000 if rank != 1 else 999  # rank 1 calls with another count
    with pytest.raises(qsdp.Error, match="count"):
        qt.all_gather_into_tensor(torch.empty(world * count), torch.zeros(count), g)
    other = qt.stochastic(bits=4, bucket_size=1024) if rank == 2 else g  # another policy
    with pytest.raises(qsdp.Error, match="bits|stochastic<4>|quantizer"):
        qt.reduce_scatter_tensor(torch.empty(100), torch.zeros(world * 100), other)
    dtype = torch.bfloat16 if rank == 0 else torch.float32  # another element type
    with pytest.raises(qsdp.Error):
        qt.all_reduce(torch.zeros(100, dtype=dtype), g)
    # and the group still works afterwards
    out = torch.empty(world * 10)
    qt.all_gather_into_tensor(out, torch.full((10,), float(rank)), qt.identity())
    assert torch.equal(out, torch.arange(world).float().repeat_interleave(10))


def _bad_tensors_raise(rank, world):
    g = qt.stochastic(bits=8)
    with pytest.raises(ValueError, match="output has 10 values; expected world size"):
        qt.all_gather_into_tensor(torch.empty(10), torch.zeros(10), g)
    with pytest.raises(TypeError, match="input has dtype torch.float32, output torch.bfloat16"):
        qt.all_gather_into_tensor(torch.empty(40, dtype=torch.bfloat16), torch.zeros(10), g)
    with pytest.raises(ValueError, match="input is not contiguous"):
        qt.reduce_scatter_tensor(torch.empty(10), torch.zeros(10, world).t(), g)
    with pytest.raises(ValueError, match="op is 'max'"):
        qt.all_reduce(torch.zeros(10), g, op="max")
    with pytest.raises(TypeError, match="tensor has dtype torch.int64"):
        qt.all_reduce(torch.zeros(10, dtype=torch.int64), g)
    dist.barrier()


def _delta_gather(rank, world):
    count = 8192 + 5
    for dtype in (torch.float32, torch.bfloat16):
        gather = qt.DeltaGather(count, dtype=dtype)
        q = qt.random_shift(bits=4, bucket_size=2048, seed=9)
        plain_q = qt.random_shift(bits=4, bucket_size=2048, seed=9)
        g = torch.Generator().manual_seed(rank)
        weights = torch.randn(count, generator=g)
        delta_out = torch.empty(world * count, dtype=dtype)
        plain_out = torch.empty(world * count, dtype=dtype)
        exact = torch.empty(world * count, dtype=dtype)
        for _ in range(40):  # slowly moving weights: 0.5 % of their spread per step
            weights += 0.005 * torch.randn(count, generator=g)
            shard = weights.to(dtype)
            gather.all_gather_into_tensor(delta_out, shard, q)
            qt.all_gather_into_tensor(plain_out, shard, plain_q, min_compressed_bytes=0)
            dist.all_gather_into_tensor(exact, shard)
        _same_on_every_rank(delta_out)
        delta_err = float((delta_out.float() - exact.float()).norm() / exact.float().norm())
        plain_err = float((plain_out.float() - exact.float()).norm() / exact.float().norm())
        assert delta_err * 5 < plain_err, (dtype, delta_err, plain_err)
        assert gather.calls == 40 and gather.memory_bytes >= world * count * shard.element_size()
    # a rank that reset alone: its reconstruction is not the others', and every rank raises
    gather = qt.DeltaGather(100)
    q = qt.random_shift(bits=8, seed=1)
    out = torch.empty(world * 100)
    gather.all_gather_into_tensor(out, torch.zeros(100), q)
    if rank == 1:
        gather.reset()
    with pytest.raises(qsdp.Error, match="rank 1's reconstruction has seen 0 calls, rank 0's 1"):
        gather.all_gather_into_tensor(out, torch.zeros(100), q)
    with pytest.raises(ValueError, match="input has 99 values; this DeltaGather was made for count"):
        gather.all_gather_into_tensor(out, torch.zeros(99), q)


def _size_gate(rank, world):
    g = qt.stochastic(bits=4, bucket_size=256, seed=5)
    for dtype in DTYPES:
        count = 1000 + 3  # 4012 or 2006 bytes: below the recommended gate
        gate = qt.RECOMMENDED_MIN_COMPRESSED_BYTES
        assert count * torch.tensor([], dtype=dtype).element_size() < gate
        x = _shard(rank, count, dtype, seed=3)
        grads = _shard(rank, world * count, dtype, seed=4)
        gated, exact = torch.empty(world * count, dtype=dtype), torch.empty(world * count,
                                                                            dtype=dtype)
        qt.all_gather_into_tensor(gated, x, g, min_compressed_bytes=gate)  # uncompressed, exact
        qt.all_gather_into_tensor(exact, x, qt.identity(), min_compressed_bytes=0)
        assert torch.equal(gated.view(torch.uint8), exact.view(torch.uint8)), dtype
        squeezed = torch.empty_like(gated)
        qt.all_gather_into_tensor(squeezed, x, g)  # the default: compressed, not exact
        assert not torch.equal(squeezed.view(torch.uint8), exact.view(torch.uint8)), dtype
        for op in ("sum", "avg"):
            out, ref = torch.empty(count, dtype=dtype), torch.empty(count, dtype=dtype)
            qt.reduce_scatter_tensor(out, grads, g, op=op, min_compressed_bytes=gate)
            qt.reduce_scatter_tensor(ref, grads, qt.identity(), op=op, min_compressed_bytes=0)
            assert torch.equal(out.view(torch.uint8), ref.view(torch.uint8)), (dtype, op)
            t, r = grads.clone(), grads.clone()
            qt.all_reduce(t, g, op=op, min_compressed_bytes=gate)
            qt.all_reduce(r, qt.identity(), op=op, min_compressed_bytes=0)
            assert torch.equal(t.view(torch.uint8), r.view(torch.uint8)), (dtype, op)
            _same_on_every_rank(t)
    # A rank with another gate: every rank raises, naming it.
    x = torch.zeros(100)
    with pytest.raises(qsdp.Error, match="min_compressed_bytes 0, rank 0 with 32768"):
        qt.all_gather_into_tensor(torch.empty(world * 100), x, g,
                                  min_compressed_bytes=0 if rank == 1 else 32768)
    with pytest.raises(ValueError, match="min_compressed_bytes is -1; expected 0.."):
        qt.all_reduce(x, g, min_compressed_bytes=-1)
    with pytest.raises(TypeError, match="min_compressed_bytes is 1.5; expected an integer"):
        qt.reduce_scatter_tensor(torch.empty(25), torch.zeros(world * 25), g,
                                 min_compressed_bytes=1.5)
    dist.barrier()


def test_size_gate_sends_small_calls_as_identity_would():
    run_ranks(4, _size_gate)


def test_delta_gather_beats_plain_gathering_on_moving_weights():
    run_ranks(4, _delta_gather)


@pytest.mark.parametrize("world", [4, 3])
def test_identity_is_bit_exact_against_torch(world):
    run_ranks(world, _identity_matches_torch)


def test_quantized_collectives_within_bounds_and_identical_on_every_rank():
    run_ranks(4, _quantized_collectives)


def test_block_scaled_float_policies_in_the_collectives():
    run_ranks(4, _block_scaled_collectives)


def test_a_rank_that_calls_differently_makes_every_rank_raise():
    run_ranks(4, _mismatch_raises_on_every_rank)


def test_bad_tensors_raise_naming_them():
    run_ranks(4, _bad_tensors_raise)


def test_collectives_need_torch_distributed():
    with pytest.raises(RuntimeError, match="torch.distributed is not initialized"):
        qt.all_reduce(torch.zeros(4), qt.stochastic(bits=8))
