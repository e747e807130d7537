# SPDX-License-Identifier: Apache-2.0
"""qt.fsdp.compress on FSDP2 (fully_shard) over 4 gloo processes: the hooks run, bytes fall about 4x
at 8 bits, training follows the uncompressed run, a mixed-dtype buffer is split into its tensors
and compressed, small buffers are gated and counted, and bad arguments raise; keep_encoded says why
not where torchao's MX formats do not import (its own tests: test_torch_fsdp_encoded.py)."""
import sys

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import qsdp
import qsdp.torch as qt
from conftest import run_ranks


def _model(world):
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 1))
    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _train(model, rank, steps):
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    target = torch.nn.Linear(64, 1)
    torch.nn.init.normal_(target.weight, generator=torch.Generator().manual_seed(7))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        x = torch.randn(32, 64, generator=g)
        with torch.no_grad():
            y = torch.tanh(target(x))
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / dist.get_world_size())
    return losses


def _compressed_training(rank, world):
    steps = 40
    plain = _train(_model(world), rank, steps)
    model = _model(world)
    # These layers are small (at most 16 KiB per rank), below the default size gate: compress all.
    handle = qt.fsdp.compress(model, weights=qt.random_shift(bits=8, bucket_size=1024, seed=1),
                              grads=qt.stochastic(bits=8, bucket_size=1024, seed=2),
                              min_compressed_bytes=0)
    assert len(handle.modules) == 4  # three Linear layers and the root
    compressed = _train(model, rank, steps)
    stats = handle.stats()
    for name in ("all_gather", "reduce_scatter"):
        s = stats[name]
        assert s["calls"] >= steps, (name, s)  # at least one per step
        assert s["fallback_calls"] == 0 and s["gated_calls"] == 0, (name, s)
        ratio = s["bytes"] / s["uncompressed_bytes"]
        assert 0.24 < ratio < 0.3, (name, s, ratio)  # 8 bits from float32: ~4x fewer bytes
        assert 0 < s["seconds"] < 60, (name, s)  # the hooks' time is measured
    assert plain[-1] < 0.5 * plain[0], plain  # the task is learnable ...
    assert compressed[-1] < 0.5 * compressed[0], compressed  # ... and learned compressed
    assert abs(compressed[-1] - plain[-1]) < 0.1 * plain[-1], (plain[-1], compressed[-1])


def _four_bit_training(rank, world):
    steps = 40
    plain = _train(_model(world), rank, steps)
    model = _model(world)
    handle = qt.fsdp.compress(model, weights=qt.random_shift(bits=4, bucket_size=1024, seed=1),
                              grads=qt.hadamard(qt.stochastic(bits=4, bucket_size=256, seed=2)),
                              weight_deltas=True, min_compressed_bytes=0)
    compressed = _train(model, rank, steps)
    s = handle.stats()["all_gather"]
    assert s["calls"] >= steps and 0.12 < s["bytes"] / s["uncompressed_bytes"] < 0.16, s
    assert compressed[-1] < 0.5 * compressed[0], compressed
    assert abs(compressed[-1] - plain[-1]) < 0.2 * plain[-1], (plain[-1], compressed[-1])


def _block_scaled_training(rank, world):
    steps = 40
    plain = _train(_model(world), rank, steps)
    runs = {
        "mxfp8": (dict(weights=qt.mxfp8(), grads=qt.mxfp8(rounding="stochastic", seed=2)),
                  0.1, (0.25, 0.3)),
        "nvfp4": (dict(weights=qt.nvfp4(), grads=qt.hadamard(qt.nvfp4("stochastic", seed=2)),
                       weight_deltas=True), 0.2, (0.14, 0.18)),
    }
    for name, (policies, tolerance, ratios) in runs.items():
        model = _model(world)
        handle = qt.fsdp.compress(model, min_compressed_bytes=0, **policies)
        compressed = _train(model, rank, steps)
        for collective, s in handle.stats().items():
            ratio = s["bytes"] / s["uncompressed_bytes"]
            assert s["fallback_calls"] == 0 and ratios[0] < ratio < ratios[1], (name, s, ratio)
        assert compressed[-1] < 0.5 * compressed[0], (name, compressed)
        assert abs(compressed[-1] - plain[-1]) < tolerance * plain[-1], (name, plain[-1],
                                                                         compressed[-1])


class _Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(256, 256)
        # frozen and of another dtype (FSDP takes mixed dtypes only among frozen parameters): the
        # group's all-gather buffer is then uint8
        self.scale = torch.nn.Parameter(torch.ones(256, dtype=torch.bfloat16),
                                        requires_grad=False)

    def forward(self, x):
        return self.linear(x) * self.scale.float()


def _mixed_dtypes_are_split_and_compressed(rank, world):
    torch.manual_seed(0)
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(1))
    reference = _Mixed()
    fully_shard(reference, mesh=init_device_mesh("cpu", (world,)))
    exact = reference(x)
    torch.manual_seed(0)
    model = _Mixed()
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    # The group's buffer is uint8 (fp32 linear, bf16 scale): the hook splits it into its tensors
    # and gathers them in one coalesced call, each in its dtype, compressed.
    handle = qt.fsdp.compress(model, weights=qt.stochastic(bits=8), min_compressed_bytes=0)
    out = model(x)
    out.sum().backward()
    s = handle.stats()["all_gather"]
    assert s["calls"] >= 1 and s["fallback_calls"] == 0 and s["gated_calls"] == 0, s
    assert s["bytes"] < 0.5 * s["uncompressed_bytes"], s
    assert not torch.equal(out, exact)  # quantized ...
    assert torch.allclose(out, exact, atol=0.05), (out - exact).abs().max()  # ... and close
    assert handle.stats()["reduce_scatter"]["calls"] == 0  # grads=None: left to FSDP
    # Below the size gate the parts move exactly, counted as gated.
    torch.manual_seed(0)
    model = _Mixed()
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    handle = qt.fsdp.compress(model, weights=qt.stochastic(bits=8), min_compressed_bytes=1 << 20)
    assert torch.equal(model(x), exact)
    s = handle.stats()["all_gather"]
    assert s["gated_calls"] == s["calls"] >= 1 and s["fallback_calls"] == 0, s


def _small_buffers_are_gated(rank, world):
    # The default gate (32 KiB per peer): the first and last layers' buffers (at most 16 KiB per
    # rank) go exactly and are counted, the middle one's (64 KiB) compressed.
    model = _model(world)
    handle = qt.fsdp.compress(model, weights=qt.random_shift(bits=8, seed=1),
                              grads=qt.stochastic(bits=8, seed=2))
    _train(model, rank, 2)
    for name, s in handle.stats().items():
        assert 0 < s["gated_calls"] < s["calls"], (name, s)
        assert s["bytes"] < s["uncompressed_bytes"] and s["fallback_calls"] == 0, (name, s)
    # A gate above every buffer: all exact, every byte counted as sent.
    model = _model(world)
    handle = qt.fsdp.compress(model, weights=qt.random_shift(bits=8, seed=1),
                              grads=qt.stochastic(bits=8, seed=2), min_compressed_bytes=1 << 20)
    _train(model, rank, 2)
    for name, s in handle.stats().items():
        assert s["calls"] >= 2 and s["gated_calls"] == s["calls"], (name, s)
        assert s["bytes"] == s["uncompressed_bytes"], (name, s)
    with pytest.raises(ValueError, match="min_compressed_bytes is -5"):
        qt.fsdp.compress(model, weights=qt.stochastic(bits=8), min_compressed_bytes=-5)


def _bad_arguments(rank, world):
    with pytest.raises(ValueError, match="model has no FSDPModule"):
        qt.fsdp.compress(torch.nn.Linear(2, 2), weights=qt.stochastic(bits=8))
    with pytest.raises(TypeError, match="grads is 8; expected a qsdp.torch policy or None"):
        qt.fsdp.compress(_model(world), grads=8)


def test_fsdp_training_compressed_at_8_bits_follows_the_uncompressed_run():
    run_ranks(4, _compressed_training, timeout=300)


def test_fsdp_training_with_4_bit_weight_deltas_and_rotated_gradients():
    run_ranks(4, _four_bit_training, timeout=300)


def test_fsdp_training_with_mxfp8_and_with_nvfp4_follows_the_uncompressed_run():
    run_ranks(4, _block_scaled_training)


def test_a_mixed_dtype_buffer_is_split_into_its_tensors_and_compressed():
    run_ranks(4, _mixed_dtypes_are_split_and_compressed)


def test_buffers_below_the_size_gate_go_exactly_and_are_counted():
    run_ranks(4, _small_buffers_are_gated)


def test_compress_refuses_bad_arguments():
    run_ranks(2, _bad_arguments)


def test_keep_encoded_says_why_not_without_torchao(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao.prototype.mx_formats.mx_tensor", None)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    with pytest.raises(qsdp.Error, match="torchao's MX formats do not import here"):
        qt.fsdp.keep_encoded(model, qt.mxfp8())
    assert type(model[0].weight) is torch.nn.Parameter  # nothing wrapped
