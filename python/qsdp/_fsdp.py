# SPDX-License-Identifier: Apache-2.0
"""qsdp.torch.fsdp: FSDP2 (torch.distributed.fsdp.fully_shard) with qsdp's compressed all-gather of
weights and reduce-scatter of gradients.

    import qsdp.torch as qt
    handle = qt.fsdp.compress(model, weights=qt.random_shift(bits=8, seed=1),
                              grads=qt.stochastic(bits=8, seed=2))
    ...train...
    handle.stats()  # {"all_gather": {"calls", "bytes", "uncompressed_bytes", "fallback_calls",
                    #                 "gated_calls", "seconds"}, "reduce_scatter": {...}}

compress installs a custom all-gather and reduce-scatter (FSDPModule.set_custom_all_gather /
set_custom_reduce_scatter) on every FSDPModule in `model`; either policy may be None, which leaves
that collective to FSDP. FSDP hands each one flat buffer per parameter group. A float32, bfloat16 or
float16 buffer goes through qsdp.torch's collectives. When a group's parameters are gathered in
different dtypes (fp32 norms beside bf16 weights, say), FSDP packs them into one uint8 buffer; the
hook splits it back into its tensors (from the group's parameters) and gathers them all in one
coalesced call (qsdp.torch.all_gather_into_tensor_coalesced), each in its dtype. A buffer qsdp
cannot quantize or split (another dtype, a tensor subclass with its own all-gather inputs) goes
through torch.distributed uncompressed and is counted as such in stats() ("fallback_calls"), never
silently; so is a buffer below the size gate (min_compressed_bytes, "gated_calls"), which qsdp sends
exactly. Reduce ops: SUM
and AVG (FSDP's choice for float32 and bfloat16 gradients, and its pre/post-divided SUM for float16);
a PREMUL_SUM (set_gradient_divide_factor with a factor other than the world size) raises.

This module sits above qsdp.torch's collectives without importing qsdp.torch: qsdp.torch builds its
`fsdp` attribute as FsdpHooks(...) from its own functions, so the two modules do not import each
other.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from . import _encoded

__all__ = ["FsdpHooks", "Handle", "EncodedHandle"]

_QUANTIZABLE = (torch.float32, torch.bfloat16, torch.float16)


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class _Counter:
    def __init__(self):
        self.calls = 0
        self.bytes = 0
        self.uncompressed_bytes = 0
        self.fallback_calls = 0
        self.gated_calls = 0
        self.encoded_calls = 0
        self.seconds = 0.0

    def as_dict(self) -> dict:
        return {"calls": self.calls, "bytes": self.bytes,
                "uncompressed_bytes": self.uncompressed_bytes,
                "fallback_calls": self.fallback_calls, "gated_calls": self.gated_calls,
                "encoded_calls": self.encoded_calls, "seconds": self.seconds}


def _allocate(size, *, dtype, device):
    return torch.empty(size, dtype=dtype, device=device)


def _op(op, where):
    if op == dist.ReduceOp.SUM:
        return "sum"
    if op == dist.ReduceOp.AVG:
        return "avg"
    raise ValueError(f"{where}: FSDP asked for reduce op {op!r}; qsdp.torch.fsdp handles SUM and "
                     "AVG (a PREMUL_SUM comes from set_gradient_divide_factor with a factor other "
                     "than the world size)")


@dataclass(frozen=True)
class _Collectives:
    """What the hooks call: qsdp.torch's policies, collectives and size gate."""
    policy_type: type
    delta_gather: Callable[..., Any]
    compressed_size: Callable[..., int]
    all_gather_into_tensor: Callable[..., Any]
    all_gather_into_tensor_coalesced: Callable[..., Any]
    reduce_scatter_tensor: Callable[..., Any]
    sends_uncompressed: Callable[..., bool]
    gate: Callable[..., int]
    mx_policy: Callable[..., Any]
    mx_classes: Callable[..., Any]
    encode_block_scaled: Callable[..., Any]
    mx_tensor: Callable[..., Any]


class _ThenWork(dist.Work):
    """A Work whose wait() also runs `then` once the inner Work is done (the copy of a coalesced
    all-gather's outputs into FSDP's buffer)."""

    def __init__(self, work, then):
        super().__init__()
        self._work, self._then = work, then

    def wait(self, timeout=None) -> bool:
        if self._work is not None:
            work, then = self._work, self._then
            self._work = self._then = None
            if timeout is None:
                work.wait()
            else:
                work.wait(timeout)
            then()
        return True

    def is_completed(self) -> bool:
        return self._work is None or self._work.is_completed()

    def is_success(self) -> bool:
        return self.is_completed()


class _AllGather:
    """FSDP's AllGather interface (torch.distributed.fsdp._fully_shard._fsdp_api) over
    qsdp.torch.all_gather_into_tensor, or over a qsdp.torch.DeltaGather of its own (deltas=True:
    one per FSDP module, so per parameter group)."""

    def __init__(self, qt: _Collectives, policy, counter: _Counter, deltas: bool,
                 min_compressed_bytes, module):
        self.qt, self.policy, self.counter, self.deltas = qt, policy, counter, deltas
        self.min_compressed_bytes = min_compressed_bytes
        self.module = module
        self.delta = None

    def allocate(self, size, *, dtype, device):
        return _allocate(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        """Gathers now and returns None, or with async_op returns a torch.distributed Work that
        FSDP waits on before it reads the output (the weight differences gather now)."""
        start = time.perf_counter()
        work = self._gather(output_tensor, input_tensor, group, async_op)
        self.counter.seconds += time.perf_counter() - start
        return work

    def _gather(self, output_tensor, input_tensor, group, async_op):
        qt = self.qt
        c = self.counter
        c.calls += 1
        c.uncompressed_bytes += _bytes(input_tensor)
        if input_tensor.dtype in _QUANTIZABLE and self.deltas:
            d = self.delta
            if d is None:
                d = self.delta = qt.delta_gather(input_tensor.numel(), input_tensor.dtype,
                                                 group)
            elif d.count != input_tensor.numel() or d.dtype != input_tensor.dtype:
                raise ValueError("qsdp.torch.fsdp all-gather: FSDP handed over "
                                 f"{input_tensor.numel()} values of {input_tensor.dtype}, this "
                                 f"group's weight differences are of {d.count} values of "
                                 f"{d.dtype}")
            d.all_gather_into_tensor(output_tensor, input_tensor, self.policy)
            c.bytes += qt.compressed_size(self.policy, input_tensor.numel(), torch.float32)
            return None
        if input_tensor.dtype in _QUANTIZABLE:
            gate = self.min_compressed_bytes
            work = qt.all_gather_into_tensor(output_tensor, input_tensor, self.policy,
                                             group=group, async_op=async_op,
                                             min_compressed_bytes=gate)
            if qt.sends_uncompressed(input_tensor, input_tensor.numel(), gate):
                c.bytes += _bytes(input_tensor)
                c.gated_calls += 1
            else:
                c.bytes += qt.compressed_size(self.policy, input_tensor.numel(),
                                              input_tensor.dtype)
            return work
        if (parts := self._parts(input_tensor)) is not None:
            return self._gather_parts(output_tensor, input_tensor, group, parts, async_op)
        c.bytes += _bytes(input_tensor)
        if (encoded := self._encoded_weights()) is not None:
            # keep_encoded's weights, encoded already: sent as they are, and counted uncompressed
            # at the bytes of the values they encode
            c.encoded_calls += 1
            c.uncompressed_bytes += encoded[1] - encoded[0]
        else:
            c.fallback_calls += 1
        return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group,
                                           async_op=async_op)

    def _encoded_weights(self):
        """(bytes encoded, bytes of the values they encode) of the keep_encoded weights in this
        module's parameter group, or None where it holds none."""
        try:
            group = self.module._get_fsdp_state()._fsdp_param_group
            encoded = values = 0
            for p in group.fsdp_params:
                shard = p._sharded_local_tensor
                if isinstance(shard, _encoded.ShardedMXWeight):
                    sizes = p._extensions_data.all_gather_input_sizes
                    encoded += sum(size.numel() for size in sizes)
                    dtype = p.param_dtype or p.orig_dtype
                    values += sizes[0][0] * shard.shape[1] * dtype.itemsize
            return (encoded, values) if encoded else None
        except (AttributeError, AssertionError, RuntimeError):
            return None

    def _parts(self, input_tensor):
        """The (byte offset, values, dtype) of each tensor FSDP packed into a uint8 all-gather
        buffer, from the module's parameter group, or None where that cannot be known for certain
        (then the buffer falls back, counted)."""
        if input_tensor.dtype != torch.uint8:
            return None
        try:
            group = self.module._get_fsdp_state()._fsdp_param_group
            inputs = []
            for p in group.fsdp_params:
                if hasattr(p._sharded_local_tensor, "fsdp_pre_all_gather"):
                    return None  # a tensor subclass's own inputs: not ours to reinterpret
                inputs.extend(p.all_gather_inputs)
        except (AttributeError, AssertionError, RuntimeError):
            return None
        parts, offset = [], 0
        for t in inputs:
            if t.dtype not in _QUANTIZABLE:
                return None
            parts.append((offset, t.numel(), t.dtype))
            offset += t.numel() * t.element_size()
        return parts if offset == input_tensor.numel() else None

    def _gather_parts(self, output_tensor, input_tensor, group, parts, async_op):
        """One coalesced all-gather of the buffer's tensors, each in its own dtype, written back
        into FSDP's uint8 layout (rank r's bytes at r x the input's bytes): now, or with async_op
        when FSDP waits on the Work returned."""
        qt, c = self.qt, self.counter
        world = group.size()
        inputs, outputs = [], []
        for offset, n, dtype in parts:
            size = n * torch.tensor([], dtype=dtype).element_size()
            # a copy: the part's bytes need not be aligned for its dtype
            inputs.append(input_tensor[offset:offset + size].clone().view(dtype))
            outputs.append(torch.empty(world * n, dtype=dtype, device=input_tensor.device))
        gate = self.min_compressed_bytes
        work = qt.all_gather_into_tensor_coalesced(outputs, inputs, self.policy, group=group,
                                                   async_op=async_op, min_compressed_bytes=gate)
        if qt.gate(gate, "qsdp.torch.fsdp") > input_tensor.numel():
            c.bytes += _bytes(input_tensor)
            c.gated_calls += 1
        else:
            c.bytes += sum(qt.compressed_size(self.policy, n, dtype) for _, n, dtype in parts)

        def copy_out():
            rows = output_tensor.view(world, -1)
            for (offset, n, dtype), out in zip(parts, outputs):
                gathered = out.view(world, n).view(torch.uint8)
                rows[:, offset:offset + gathered.shape[1]].copy_(gathered)

        if work is None:
            copy_out()
            return None
        return _ThenWork(work, copy_out)


class _ReduceScatter:
    """FSDP's ReduceScatter interface over qsdp.torch.reduce_scatter_tensor."""

    def __init__(self, qt: _Collectives, policy, counter: _Counter, min_compressed_bytes):
        self.qt, self.policy, self.counter = qt, policy, counter
        self.min_compressed_bytes = min_compressed_bytes

    def allocate(self, size, *, dtype, device):
        return _allocate(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        """Reduces now and returns None, or with async_op returns a torch.distributed Work."""
        start = time.perf_counter()
        work = self._reduce(output_tensor, input_tensor, group, op, async_op)
        self.counter.seconds += time.perf_counter() - start
        return work

    def _reduce(self, output_tensor, input_tensor, group, op, async_op):
        qt = self.qt
        name = _op(op, "qsdp.torch.fsdp reduce-scatter")
        c = self.counter
        c.calls += 1
        c.uncompressed_bytes += _bytes(input_tensor)
        if input_tensor.dtype in _QUANTIZABLE:
            gate = self.min_compressed_bytes
            work = qt.reduce_scatter_tensor(output_tensor, input_tensor, self.policy, op=name,
                                            group=group, async_op=async_op,
                                            min_compressed_bytes=gate)
            if qt.sends_uncompressed(output_tensor, output_tensor.numel(), gate):
                c.bytes += _bytes(input_tensor)
                c.gated_calls += 1
            else:
                c.bytes += group.size() * qt.compressed_size(self.policy, output_tensor.numel(),
                                                             input_tensor.dtype)
            return work
        c.bytes += _bytes(input_tensor)
        c.fallback_calls += 1
        return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group,
                                          async_op=async_op)


class Handle:
    """What compress installed: the modules, and the bytes each collective sent."""

    def __init__(self, modules, all_gather: _Counter, reduce_scatter: _Counter):
        self.modules = modules
        self._all_gather, self._reduce_scatter = all_gather, reduce_scatter

    def stats(self) -> dict:
        """Per collective: calls, bytes this rank encoded for the wire (its packets),
        uncompressed_bytes (what FSDP's own collective would have sent), fallback_calls (buffers
        sent uncompressed because qsdp cannot quantize their dtype), gated_calls (buffers sent
        uncompressed because they are below the size gate), encoded_calls (buffers that hold
        weights of keep_encoded, encoded already, sent as they are with the group's other
        tensors: counted in bytes as sent, in uncompressed_bytes with those weights' values),
        seconds
        (wall time inside the collective on this rank: encode, wire, decode and waiting for the
        slowest peer)."""
        return {"all_gather": self._all_gather.as_dict(),
                "reduce_scatter": self._reduce_scatter.as_dict()}


class EncodedHandle:
    """What keep_encoded wrapped: the weights' names, and what their gathers encoded."""

    def __init__(self, names, counter):
        self.weights = names
        self._counter = counter

    def stats(self) -> dict:
        """Over this process's gathers of the wrapped weights: calls (weights gathered), bytes
        (elements and scales this rank encoded for the wire), uncompressed_bytes (its shards'
        bytes in the gathered dtype), encode_seconds (wall time of those encodes)."""
        return self._counter.as_dict()


class FsdpHooks:
    """qsdp.torch.fsdp: compress(model, weights=..., grads=...) installs qsdp's collectives as the
    custom all-gather and reduce-scatter of FSDP2 modules; Handle is what it returns."""

    Handle = Handle
    EncodedHandle = EncodedHandle
    ShardedMXWeight = _encoded.ShardedMXWeight
    EncodedMXWeight = _encoded.EncodedMXWeight

    def __init__(self, **collectives):
        self._collectives = _Collectives(**collectives)
        c = self._collectives
        self._codec = _encoded._Codec(encode_block_scaled=c.encode_block_scaled,
                                      mx_tensor=c.mx_tensor)

    def keep_encoded(self, model: torch.nn.Module, weights, *,
                     include: Callable[[str, torch.nn.Module], bool] | None = None
                     ) -> EncodedHandle:
        """Makes FSDP2 gather the weights of model's linear layers MX-encoded and hand them to the
        layers still encoded, as torchao MXTensors, so that their forward is an MX GEMM on the
        gathered bytes, with no decode. Call it before fully_shard.

        Every torch.nn.Linear of `model` (or those for which include(name, module) is true) gets
        its weight replaced by a ShardedMXWeight of the same values: the optimizer and the state
        dict see those values, and FSDP's all-gather sends what each rank's shard encodes to with
        policy `weights` (qt.mxfp8, qt.mxfp6, qt.mxfp4; not rotated), elements and E8M0 scales,
        about a quarter (mxfp8) or an eighth (mxfp4) of float32's bytes. In forward the layer's
        weight is an EncodedMXWeight whose `mx` is the torchao MXTensor of the gathered weight;
        F.linear casts its input to the same MX format and runs torchao's MX GEMM (on CUDA devices
        of compute capability 10.0 and up with 32-value e4m3 or e2m1 blocks; elsewhere torchao
        emulates it). Backward passes the gradient straight through both casts: the input's with
        the weight decoded on this rank, the weight's from the input's full-precision values.

        A weight's columns (in_features) must be whole blocks of the policy's bucket_size, and its
        rows must divide evenly among the ranks that shard it (FSDP's padding of an uneven shard
        would not be the layout's); the first gather raises on every rank otherwise. Needs torchao
        (qsdp.Error saying why where its MX formats do not import); CPU shards encode with the
        host codec, CUDA ones with the device codec on torch's current stream. Tied weights stay
        tied. The gathered bytes go
        through FSDP's all-gather, or compress's, which sends them as they are (stats():
        encoded_calls)."""
        qt = self._collectives
        where = "qsdp.torch.fsdp.keep_encoded"
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"{where}: model is {type(model).__name__}; expected a "
                            "torch.nn.Module")
        if not isinstance(weights, qt.policy_type):
            raise TypeError(f"{where}: weights is {weights!r}; expected an MX policy (qt.mxfp8, "
                            "qt.mxfp6, qt.mxfp4)")
        q = qt.mx_policy(weights, where)
        qt.mx_classes(where, "")
        from torch.distributed.fsdp import FSDPModule
        if any(isinstance(m, FSDPModule) for m in model.modules()):
            raise ValueError(f"{where}: model is sharded already (it holds an FSDPModule); call "
                             "keep_encoded before fully_shard, which shards the weights it wraps")
        owners: dict[int, list] = {}
        for name, m in model.named_modules():
            for pname, p in m.named_parameters(recurse=False):
                owners.setdefault(id(p), []).append((m, pname))
        encoding = _encoded._Encoding(q, self._codec, _encoded._Counter())
        names = []
        for name, m in model.named_modules():
            if not isinstance(m, torch.nn.Linear) or (include is not None and not include(name, m)):
                continue
            w = m.weight
            if isinstance(w, _encoded.ShardedMXWeight):
                continue
            if w.dim() != 2 or w.shape[1] % q.bucket_size:
                raise ValueError(f"{where}: {name or 'model'}.weight has shape "
                                 f"{tuple(w.shape)}; expected in_features a multiple of the "
                                 f"policy's bucket_size {q.bucket_size} (the blocks run along "
                                 "it); leave the layer out with include=")
            if w.dtype not in _QUANTIZABLE:
                raise TypeError(f"{where}: {name or 'model'}.weight has dtype {w.dtype}; expected "
                                "torch.float32, torch.bfloat16 or torch.float16")
            wrapped = torch.nn.Parameter(_encoded.ShardedMXWeight(w.detach(), encoding),
                                         requires_grad=w.requires_grad)
            for owner, pname in owners[id(w)]:
                setattr(owner, pname, wrapped)
            names.append(f"{name}.weight" if name else "weight")
        if not names:
            raise ValueError(f"{where}: model has no torch.nn.Linear to encode"
                             + (" that include accepts" if include is not None else ""))
        return EncodedHandle(names, encoding.counter)

    def compress(self, model: torch.nn.Module, weights=None, grads=None, *,
                 weight_deltas: bool = False, min_compressed_bytes=None) -> Handle:
        """Compresses the all-gather of weights with policy `weights` and the reduce-scatter of
        gradients with policy `grads` in every FSDPModule (fully_shard) of `model`. weight_deltas:
        gather each parameter group through a qsdp.torch.DeltaGather (SDP4Bit's weight
        differences: 4-bit weights that train like 8-bit ones), at the cost of a full copy of the
        gathered weights on every rank (the reconstruction); a DeltaGather always quantizes.
        min_compressed_bytes: the size gate of the hooks' collectives (None:
        qsdp.torch.RECOMMENDED_MIN_COMPRESSED_BYTES, 32 KiB, measured; 0 compresses every
        buffer). stats() counts the buffers it sent uncompressed as gated_calls."""
        from torch.distributed.fsdp import FSDPModule

        qt = self._collectives
        where = "qsdp.torch.fsdp.compress"
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"{where}: model is {type(model).__name__}; expected a "
                            "torch.nn.Module")
        for name, policy in (("weights", weights), ("grads", grads)):
            if policy is not None and not isinstance(policy, qt.policy_type):
                raise TypeError(f"{where}: {name} is {policy!r}; expected a qsdp.torch policy "
                                "or None")
        gate = qt.gate(min_compressed_bytes, where)
        modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
        if not modules:
            raise ValueError(f"{where}: model has no FSDPModule; call fully_shard on it (and its "
                             "blocks) first")
        gathered, reduced = _Counter(), _Counter()
        for m in modules:
            if weights is not None:
                m.set_custom_all_gather(
                    _AllGather(qt, weights, gathered, bool(weight_deltas), gate, m))
            if grads is not None:
                m.set_custom_reduce_scatter(_ReduceScatter(qt, grads, reduced, gate))
        return Handle(modules, gathered, reduced)
