# SPDX-License-Identifier: Apache-2.0
"""Weights that FSDP2 gathers still MX-encoded (qsdp.torch.fsdp.keep_encoded): the tensor subclasses
and the linear that computes on them.

A ShardedMXWeight is a weight's shard (the full-precision values the optimizer updates). Through
FSDP2's all-gather extension (fsdp_pre_all_gather / fsdp_post_all_gather) each rank encodes its
shard with qsdp's codec into the block-scaled layout (MX elements and E8M0 scales), FSDP gathers
those bytes as they are, and the module receives an EncodedMXWeight: the gathered weight as a
torchao MXTensor (its `mx`), no value decoded. F.linear on it casts the input to the same MX format
and runs torchao's MX GEMM; the backward takes the straight-through estimator of both casts, with
the weight decoded locally for the input's gradient (the gradient of an MX GEMM's operand in its
other orientation needs the blocks along the other axis, which the gathered layout does not have).

This module imports neither qsdp.torch nor _fsdp: the codec and torchao's classes reach it through
a _Codec that qsdp.torch builds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

__all__ = ["ShardedMXWeight", "EncodedMXWeight"]

_aten = torch.ops.aten

# The ops through which FSDP2 shards, pads, moves and views a parameter: their results stay
# ShardedMXWeights, so that the shard FSDP keeps still encodes itself for the gather.
_SHARD_PRESERVING = {
    _aten.detach.default, _aten.alias.default, _aten.empty_like.default,
    _aten.new_zeros.default, _aten.new_empty.default, _aten.slice.Tensor, _aten.copy_.default,
    _aten.view.default, _aten.as_strided.default, _aten._to_copy.default,
    _aten._pin_memory.default, _aten.split.Tensor, _aten.split_with_sizes.default,
    _aten.clone.default,
}


@dataclass(frozen=True)
class _Codec:
    """What the subclasses call: qsdp.torch's block-scaled encode and torchao's MXTensor."""
    encode_block_scaled: Callable[..., Any]  # (policy, 2-D values) -> (elements, scales)
    mx_tensor: Callable[..., Any]  # (policy, elements, scales, dtype, quantized_inputs=)


class _Counter:
    """The gathers' figures for keep_encoded's handle: calls, bytes encoded, bytes they replace."""

    def __init__(self):
        self.calls = 0
        self.bytes = 0
        self.uncompressed_bytes = 0
        self.seconds = 0.0

    def as_dict(self) -> dict:
        return {"calls": self.calls, "bytes": self.bytes,
                "uncompressed_bytes": self.uncompressed_bytes, "encode_seconds": self.seconds}


@dataclass(frozen=True)
class _Encoding:
    """One keep_encoded call's policy, codec and counter, shared by the weights it wrapped."""
    policy: Any
    codec: _Codec
    counter: _Counter


class ShardedMXWeight(torch.Tensor):
    """A weight (or FSDP's shard of it) that FSDP2 all-gathers MX-encoded. It behaves as its
    full-precision values for every operation (the optimizer's included); FSDP's gather sends its
    elements and scales instead of those values."""

    @staticmethod
    def __new__(cls, values: torch.Tensor, encoding: _Encoding):
        return torch.Tensor._make_wrapper_subclass(
            cls, values.size(), strides=values.stride(), storage_offset=values.storage_offset(),
            dtype=values.dtype, layout=values.layout, device=values.device,
            requires_grad=values.requires_grad)

    def __init__(self, values: torch.Tensor, encoding: _Encoding):
        self._values = values
        self._encoding = encoding

    def __repr__(self) -> str:
        return (f"ShardedMXWeight({self._encoding.policy!r}, shape={tuple(self.shape)}, "
                f"dtype={self.dtype})")

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        encoding = None

        def unwrap(t):
            nonlocal encoding
            encoding = encoding or t._encoding
            return t._values

        args, kwargs = pytree.tree_map_only(ShardedMXWeight, unwrap, (args, kwargs or {}))
        out = func(*args, **kwargs)
        if func not in _SHARD_PRESERVING:
            return out
        return pytree.tree_map_only(torch.Tensor, lambda t: ShardedMXWeight(t, encoding), out)

    def __reduce_ex__(self, protocol):
        # A checkpoint holds the weight's values; the policy is the program's, not the file's.
        return self._values.__reduce_ex__(protocol)

    def __tensor_flatten__(self):
        return ["_values"], {"encoding": self._encoding}

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return ShardedMXWeight(inner["_values"], meta["encoding"])

    def fsdp_pre_all_gather(self, mesh, outer_size, outer_stride, module, mp_policy):
        """This rank's shard encoded: (elements, scales), uint8 rows of the shard's rows."""
        enc = self._encoding
        world = mesh.size()
        if len(outer_size) != 2 or outer_size[0] % world:
            # Raised on every rank alike (FSDP's own check for uneven shards fires only on the
            # ranks that hold padding, and the others wait for them).
            raise ValueError(f"qsdp.torch.fsdp.keep_encoded: a weight of shape "
                             f"{tuple(outer_size)} is sharded over {world} ranks; an encoded "
                             "gather needs a 2-D weight whose rows divide evenly among the ranks "
                             "(FSDP pads uneven shards, and the padding of an encoded shard "
                             "would not be its layout's)")
        start = time.perf_counter()
        values = self._values
        if mp_policy is not None and mp_policy.param_dtype is not None:
            values = values.to(mp_policy.param_dtype)
        elements, scales = enc.codec.encode_block_scaled(enc.policy, values)
        c = enc.counter
        c.calls += 1
        c.bytes += elements.numel() + scales.numel()
        c.uncompressed_bytes += values.numel() * values.element_size()
        c.seconds += time.perf_counter() - start
        return (elements, scales), values.dtype

    def fsdp_post_all_gather(self, all_gather_outputs, metadata, param_dtype, *, out=None):
        """The gathered weight: an EncodedMXWeight over the gathered elements and scales."""
        elements, scales = all_gather_outputs
        if out is not None:
            # FSDP refilled the storage the first gather's result was made on; a result made on
            # other tensors takes their bytes.
            mx = out.mx
            for mine, gathered in ((mx.qdata, elements), (mx.scale, scales)):
                if mine.untyped_storage().data_ptr() != gathered.untyped_storage().data_ptr():
                    mine.view(torch.uint8).copy_(gathered.view(-1, *mine.shape[1:]))
            return None
        enc = self._encoding
        mx = enc.codec.mx_tensor(enc.policy, elements, scales, metadata, quantized_inputs=True)
        return EncodedMXWeight(mx, enc), (elements, scales)


class EncodedMXWeight(torch.Tensor):
    """The all-gathered weight, still MX-encoded: `mx` is a torchao MXTensor whose qdata and scale
    are the gathered bytes. F.linear runs on it as an MX GEMM (_EncodedLinear); any other operation
    sees its decoded values, and an in-place one raises (the values to change are the shards')."""

    @staticmethod
    def __new__(cls, mx, encoding: _Encoding):
        return torch.Tensor._make_wrapper_subclass(cls, mx.shape, dtype=mx.orig_dtype,
                                                   device=mx.qdata.device, requires_grad=False)

    def __init__(self, mx, encoding: _Encoding):
        self.mx = mx
        self._encoding = encoding

    def __repr__(self) -> str:
        return (f"EncodedMXWeight({self._encoding.policy!r}, shape={tuple(self.shape)}, "
                f"dtype={self.dtype})")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, weight, bias = _linear_arguments(*args, **kwargs)
            if isinstance(weight, EncodedMXWeight) and not isinstance(x, EncodedMXWeight):
                return _EncodedLinear.apply(x, weight, bias)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        kwargs = kwargs or {}
        if func in (_aten.detach.default, _aten.alias.default):
            w = args[0]
            return EncodedMXWeight(w.mx, w._encoding)
        if func in (_aten.as_strided.default, _aten.view.default, _aten._unsafe_view.default):
            if _whole(func, *args, **kwargs):  # FSDP's as_strided to the parameter's own shape
                return EncodedMXWeight(args[0].mx, args[0]._encoding)
        if func._schema.is_mutable:
            raise RuntimeError(f"qsdp.torch.fsdp.keep_encoded: {func} would change the "
                               "all-gathered weight, which is MX-encoded and rebuilt by every "
                               "gather; change the sharded weight (outside forward and backward)")
        args, kwargs = pytree.tree_map_only(
            EncodedMXWeight, lambda w: w.mx.dequantize(w.dtype), (args, kwargs))
        return func(*args, **kwargs)


def _whole(func, w, size, stride=None, storage_offset=None):
    """Whether a view or as_strided of w is w itself (its shape, row-major, from its start)."""
    if tuple(size) != tuple(w.shape):
        return False
    return func is not _aten.as_strided.default or (
        tuple(stride) == (w.shape[1], 1) and not storage_offset)


def _linear_arguments(input, weight, bias=None):
    return input, weight, bias


class _EncodedLinear(torch.autograd.Function):
    """y = x W^T + b with W an EncodedMXWeight: the forward is torchao's linear on W's MXTensor
    (the input cast to the same MX format); the backward passes the gradient straight through both
    casts, x's gradient with W decoded, W's and b's as F.linear's."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x)
        ctx.mx = weight.mx
        ctx.weight_dtype = weight.dtype
        ctx.has_bias = bias is not None
        rows = x.reshape(-1, x.shape[-1]).to(weight.dtype)
        w = weight.mx.t()
        y = torch.mm(rows, w) if bias is None else torch.addmm(bias.to(weight.dtype), rows, w)
        # not a view of y: FSDP cannot hook the backward of a module whose output is a view
        return torch.ops.aten._unsafe_view(y.to(x.dtype), (*x.shape[:-1], y.shape[-1]))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            w = ctx.mx.dequantize(ctx.weight_dtype)
            grad_x = (g.to(w.dtype) @ w).reshape(x.shape).to(x.dtype)
        if ctx.needs_input_grad[1]:
            rows = x.reshape(-1, x.shape[-1])
            grad_w = (g.t() @ rows.to(g.dtype)).to(ctx.weight_dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum(0)
        return grad_x, grad_w, grad_b
