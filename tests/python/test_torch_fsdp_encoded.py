# SPDX-License-Identifier: Apache-2.0
"""qt.fsdp.keep_encoded on FSDP2 (fully_shard) over gloo processes: the linear layers receive their
gathered weights as torchao MXTensors that are MXTensor.to_mx of the whole weight, bit for bit (no
decode on the way), their forward is torchao's MX linear on those bytes, the gradients are the
straight-through ones, training follows the uncompressed run, the gather's bytes are the encoded
ones, and misuse raises on every rank. Skipped where torchao is not installed."""
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import qsdp.torch as qt
from conftest import run_ranks

pytest.importorskip("torchao.prototype.mx_formats")
from torchao.prototype.mx_formats.mx_tensor import MXTensor  # noqa: E402


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 64, bias=False))


def _shard(model, world):
    mesh = init_device_mesh("cpu", (world,))
    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _policies():
    return [("mxfp8", qt.mxfp8, torch.float8_e4m3fn), ("mxfp4", qt.mxfp4, torch.float4_e2m1fn_x2)]


def _reference_linear(x, w, bias, elem_dtype):
    """torchao's MX linear of x and the whole weight w: both cast by to_mx, multiplied emulated."""
    a = MXTensor.to_mx(x, elem_dtype, 32)
    b = MXTensor.to_mx(w, elem_dtype, 32)
    y = a.dequantize(x.dtype) @ b.dequantize(w.dtype).t()
    return y if bias is None else y + bias


def _straight_through_linear(x, w, elem_dtype):
    """Q(x) Q(w)^T in value; gradients g Q(w) for x and g^T x for w (qsdp's backward)."""
    def cast(t):
        return MXTensor.to_mx(t.detach(), elem_dtype, 32).dequantize(t.dtype)
    qx, qw = cast(x), cast(w)
    x_through = x + (qx - x.detach())
    return x_through @ qw.t() + x.detach() @ w.t() - x.detach() @ w.detach().t()


def _layers_see_to_mx_of_the_whole_weight(rank, world):
    for name, policy, elem_dtype in _policies():
        reference = _model()
        model = _model()
        handle = qt.fsdp.keep_encoded(model, policy())
        assert handle.weights == ["0.weight", "2.weight"]
        assert isinstance(model[0].weight, qt.fsdp.ShardedMXWeight)
        _shard(model, world)
        seen = {}

        def look(m, args, i):
            w = m.weight
            assert isinstance(w, qt.fsdp.EncodedMXWeight), type(w)
            whole = reference[i].weight.detach()
            expected = MXTensor.to_mx(whole, elem_dtype, 32)
            got = w.mx
            assert got.qdata.view(torch.uint8).equal(expected.qdata.view(torch.uint8)), name
            assert got.scale.view(torch.uint8).equal(expected.scale.view(torch.uint8)), name
            assert w.shape == whole.shape and w.dtype == whole.dtype
            # any other op sees the decoded values
            assert torch.equal(w * 1, expected.dequantize(torch.float32))
            seen[i] = True

        hooks = [model[i].register_forward_pre_hook(lambda m, a, i=i: look(m, a, i))
                 for i in (0, 2)]
        torch.manual_seed(10)  # the same on every rank: the averaged gradient is one rank's
        x = torch.randn(4, 3, 64, requires_grad=True)
        y = model(x)
        for h in hooks:
            h.remove()
        assert seen == {0: True, 2: True}

        # the forward: torchao's MX linear on the gathered bytes, layer by layer
        w0, b0 = reference[0].weight.detach(), reference[0].bias.detach()
        w2 = reference[2].weight.detach()
        h = F.gelu(_reference_linear(x.detach().reshape(-1, 64), w0, b0, elem_dtype))
        expected = _reference_linear(h, w2, None, elem_dtype).reshape(4, 3, 64)
        torch.testing.assert_close(y.detach(), expected, rtol=1e-5, atol=1e-6)
        assert not y._is_view()

        # the backward: straight through the casts; x's gradient with the decoded weight, the
        # weight's with x's own values
        y.sum().backward()
        xr = x.detach().reshape(-1, 64).clone().requires_grad_(True)
        w0s = w0.clone().requires_grad_(True)
        w2s = w2.clone().requires_grad_(True)
        h0 = F.gelu(_straight_through_linear(xr, w0s, elem_dtype) + b0)
        _straight_through_linear(h0, w2s, elem_dtype).sum().backward()
        torch.testing.assert_close(x.grad.reshape(-1, 64), xr.grad, rtol=1e-4, atol=1e-5)
        rows = 96 // world
        got_w0 = model[0].weight.grad.to_local()
        torch.testing.assert_close(got_w0, w0s.grad[rank * rows:(rank + 1) * rows],
                                   rtol=1e-4, atol=1e-5)
        stats = handle.stats()
        assert stats["calls"] == 4  # two weights, gathered for forward and again for backward
        per_rank = (96 * 64 + 64 * 96) // world * 2
        bits = 8 if name == "mxfp8" else 4
        assert stats["bytes"] == per_rank * bits // 8 + per_rank // 32
        assert stats["uncompressed_bytes"] == per_rank * 4


def _training_follows_the_uncompressed_run(rank, world):
    def train(model, steps=30):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(5)
        teacher = torch.randn(64, 64, generator=g) / 8
        losses = []
        for _ in range(steps):
            x = torch.randn(16, 64, generator=g)
            loss = ((model(x) - x @ teacher) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    plain = train(_shard(_model(), world))
    model = _model()
    qt.fsdp.keep_encoded(model, qt.mxfp8())
    handle = qt.fsdp.compress(_shard(model, world), grads=qt.mxfp8(rounding="stochastic", seed=3),
                              min_compressed_bytes=0)
    encoded = train(model)
    # checkpoints: the shards' values, saved as plain tensors, load back into the wrapped shards
    saved = io.BytesIO()
    torch.save(model.state_dict(), saved)
    saved.seek(0)
    state = torch.load(saved, weights_only=False)
    assert type(state["0.weight"].to_local()) is torch.Tensor
    assert torch.equal(state["0.weight"].to_local(), model[0].weight.to_local() * 1)
    model.load_state_dict(state)
    assert isinstance(model[0].weight.to_local(), qt.fsdp.ShardedMXWeight)
    assert encoded[-1] < 0.5 * encoded[0]
    assert abs(encoded[-1] - plain[-1]) <= 0.1 * plain[-1], (encoded[-1], plain[-1])
    assert handle.stats()["reduce_scatter"]["calls"] > 0
    # with compress's weights as well, the groups of encoded weights go as they are, counted
    model = _model()
    qt.fsdp.keep_encoded(model, qt.mxfp4())
    handle = qt.fsdp.compress(_shard(model, world), weights=qt.uniform(bits=8),
                              min_compressed_bytes=0)
    train(model, steps=2)
    gathers = handle.stats()["all_gather"]
    assert gathers["encoded_calls"] > 0 and gathers["fallback_calls"] == 0, gathers
    # each layer's group: its weight's MXFP4 shard (4.25 bits a value) and the float32 bias
    # (layer 0), against the float32 values: (1632 + 192 + 1632) / (12288 + 192 + 12288)
    assert gathers["bytes"] / gathers["uncompressed_bytes"] == pytest.approx(0.1395, abs=0.002)


def _misuse_raises(rank, world):
    with pytest.raises(ValueError, match="expected an MX policy"):
        qt.fsdp.keep_encoded(_model(), qt.nvfp4())
    with pytest.raises(ValueError, match="expected an MX policy"):
        qt.fsdp.keep_encoded(_model(), qt.hadamard(qt.mxfp4()))
    with pytest.raises(TypeError, match="expected an MX policy"):
        qt.fsdp.keep_encoded(_model(), "mxfp8")
    with pytest.raises(ValueError, match="a multiple of the policy's bucket_size 32"):
        qt.fsdp.keep_encoded(nn.Sequential(nn.Linear(40, 64)), qt.mxfp8())
    with pytest.raises(ValueError, match="before fully_shard"):
        qt.fsdp.keep_encoded(_shard(_model(), world), qt.mxfp8())
    with pytest.raises(ValueError, match="no torch.nn.Linear"):
        qt.fsdp.keep_encoded(nn.Sequential(nn.GELU()), qt.mxfp8())
    # include= leaves a layer out; tied weights stay tied
    model = nn.Sequential(nn.Linear(40, 64), nn.Linear(64, 64))
    assert qt.fsdp.keep_encoded(model, qt.mxfp8(),
                                include=lambda name, m: m.in_features % 32 == 0).weights == [
                                    "1.weight"]
    tied = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))
    tied[1].weight = tied[0].weight
    qt.fsdp.keep_encoded(tied, qt.mxfp8())
    assert tied[1].weight is tied[0].weight
    # rows that do not divide among the ranks: every rank raises at the first gather
    model = nn.Sequential(nn.Linear(64, 33))
    qt.fsdp.keep_encoded(model, qt.mxfp8())
    _shard(model, world)
    with pytest.raises(ValueError, match="rows divide evenly among the ranks"):
        model(torch.randn(2, 64))
    # the gathered weight cannot be changed in place
    model = _model()
    qt.fsdp.keep_encoded(model, qt.mxfp8())
    _shard(model, world)
    with pytest.raises(RuntimeError, match="MX-encoded"):
        def scale(m, args):
            with torch.no_grad():
                m.weight.mul_(2)

        model[0].register_forward_pre_hook(scale)
        model(torch.randn(2, 64))


def test_layers_receive_to_mx_of_the_whole_weight_and_run_torchaos_mx_linear():
    run_ranks(2, _layers_see_to_mx_of_the_whole_weight)


def test_training_with_encoded_weights_follows_the_uncompressed_run():
    run_ranks(2, _training_follows_the_uncompressed_run, timeout=300)


def test_keep_encoded_refuses_misuse_on_every_rank():
    run_ranks(2, _misuse_raises)
