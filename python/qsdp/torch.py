# SPDX-License-Identifier: Apache-2.0
"""qsdp.torch: qsdp's codec and collectives on torch tensors.

    import qsdp.torch as qt
    w = qt.random_shift(bits=8, bucket_size=1024, seed=1)
    g = qt.stochastic(bits=8, bucket_size=1024, seed=2)
    m = qt.mxfp8(element="e4m3", rounding="nearest")   # also qt.mxfp6, qt.mxfp4, qt.nvfp4
    n = qt.compressed_size(g, count, dtype=torch.bfloat16)
    packet = qt.encode(g, x)                  # 1-D uint8 tensor on x's device, n bytes
    qt.decode(g, packet, out)                 # fills out (x's shape, dtype, device)
    qt.all_gather_into_tensor(output, input, w, group=None)
    qt.reduce_scatter_tensor(output, input, g, op="avg", group=None)
    qt.all_reduce(tensor, g, op="sum", group=None)
    qt.all_gather_into_tensor_coalesced(outputs, inputs, w)   # lists: one agreement, one exchange
    qt.reduce_scatter_tensor_coalesced(outputs, inputs, g, op="avg")
    handle = qt.fsdp.compress(model, weights=w, grads=g)   # every FSDPModule in model
    encoded = qt.fsdp.keep_encoded(model, m)  # before fully_shard: linears get MX-encoded weights

The collectives take min_compressed_bytes=0 (the size gate, C++'s
call_options::min_compressed_bytes; 0, the default, applies the policy at every size): a call that
sends each peer fewer bytes of values (all_gather_into_tensor, reduce_scatter_tensor: the input's or
output's bytes; all_reduce: the whole tensor's) moves them uncompressed, exactly, in one exchange,
as qt.identity() would. qt.RECOMMENDED_MIN_COMPRESSED_BYTES (32 KiB) is the measured gate, and
fsdp.compress's default. Every rank must pass the same value.

Policies are the C++ ones (qsdp/quantizers.hpp), each object keeping its own call counter: a
randomized policy draws fresh random numbers on every call, reproducible from its seed and the
calls made with it. The collectives are the C++ ones (qsdp/collectives.hpp) over a communicator
whose byte exchanges are torch.distributed's all_gather_into_tensor and all_to_all_single on the
process group, so every rank agrees on the call first (count, policy, bit width, bucket size,
element type, op): a rank that calls differently makes every rank raise qsdp.Error with the C++
message. float32, bfloat16 and float16 tensors on the CPU use the host codec (AVX2 / AVX-512 where
the CPU has them); CUDA tensors use the device codec and collectives (qsdp._ext_cuda, built where
nvcc was found at install time), stream-ordered on torch's current stream of the tensors' device,
with no host synchronisation except the first call of each new signature (count, policy, dtype, op)
on a communicator, whose descriptors all ranks compare on the host. On CUDA a bad packet turns its
values into NaN and is raised by the next qsdp call on that device, or by qt.synchronize().
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import numbers
import sys
import threading
import time
import weakref

import torch
import torch.distributed as dist

from . import _ext
from . import _fsdp
from ._ext import Error

__all__ = [
    "Error", "Policy", "stochastic", "uniform", "symmetric", "random_shift", "mxfp8", "mxfp6",
    "mxfp4", "nvfp4", "identity", "all_gather_encoded",
    "hadamard", "compressed_size", "encode", "decode", "all_gather_into_tensor",
    "reduce_scatter_tensor", "all_reduce", "all_gather_into_tensor_coalesced",
    "reduce_scatter_tensor_coalesced", "call_counters", "call_timings", "DeltaGather", "fsdp",
    "synchronize", "cuda_extension", "RECOMMENDED_MIN_COMPRESSED_BYTES",
]

#: The measured size gate (C++ qsdp::recommended_min_compressed_bytes, 32 KiB): below it a
#: compressed call costs more than the values as they are. fsdp.compress's default; the
#: collectives' is 0 (every size compressed).
RECOMMENDED_MIN_COMPRESSED_BYTES: int = _ext.recommended_min_compressed_bytes

_ELEMENT_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_OP_CODES = {"sum": 1, "avg": 2}


class _Released:
    """What a qsdp.torch object holds instead of its native one after interpreter exit began."""

    def __getattr__(self, name):
        raise Error("qsdp.torch: called during interpreter shutdown, after qsdp released its "
                    "native objects (make qsdp calls before the program exits, not from atexit "
                    "handlers registered before qsdp.torch was imported)")


_RELEASED = _Released()

# The Python objects that own native (_ext) objects: policies and DeltaGathers. Objects still
# referenced when the interpreter exits (an FSDP2 model in a global, whose hooks hold policies)
# would otherwise outlive the extension module's teardown, which nanobind reports as leaks.
_native_owners: "weakref.WeakSet" = weakref.WeakSet()


@atexit.register
def _release_native_objects() -> None:
    """Lets the torch collectives' workers finish with qsdp's buffers, then drops every
    communicator and every native object of a live policy or DeltaGather, while the interpreter is
    still whole (atexit runs before module teardown)."""
    _await_torch_workers()
    _communicators.clear()
    for owner in list(_native_owners):
        owner._release()


# The block-scaled float families: their element formats (the first is the default) and their
# element width in bits.
_BLOCK_SCALED = {
    "mxfp8": (("e4m3", "e5m2"), 8),
    "mxfp6": (("e2m3", "e3m2"), 6),
    "mxfp4": (("e2m1",), 4),
    "nvfp4": (("e2m1",), 4),
}
_ROUNDINGS = ("nearest", "stochastic")


class Policy:
    """A qsdp quantizer policy (made by qt.stochastic, qt.mxfp8, ...; not constructed directly).

    family, bits (per value, the block scales aside; None for identity), bucket_size (values per
    bucket or block; None for identity), seed, rotated (under qt.hadamard), and for the
    block-scaled float families element ("e4m3", ...) and rounding ("nearest" or "stochastic")."""

    def __init__(self, family: str, bits: int | None, bucket_size: int | None, seed: int,
                 rotated: bool, element: str | None = None, rounding: str | None = None):
        self.family = family
        self.bits = bits
        self.bucket_size = bucket_size
        self.seed = seed
        self.rotated = rotated
        self.element = element
        self.rounding = rounding
        self._impl = _ext.make_policy(self._native_family, bits or 0, bucket_size or 0, seed,
                                      rotated)
        self._device_impl = None  # made by the first call on CUDA tensors
        _native_owners.add(self)

    @property
    def _native_family(self) -> str:
        """The family as the extensions' make_policy takes it: the C++ name for the block-scaled
        ones."""
        return self._plain_name if self.family in _BLOCK_SCALED else self.family

    @property
    def _plain_name(self) -> str:
        if self.family in _BLOCK_SCALED:
            args = [self.element] if len(_BLOCK_SCALED[self.family][0]) > 1 else []
            args += ["stochastic"] if self.rounding == "stochastic" else []
            return f"{self.family}<{', '.join(args)}>" if args else self.family
        return self.family if self.bits is None else f"{self.family}<{self.bits}>"

    def _release(self) -> None:
        self._impl = self._device_impl = _RELEASED

    def _device(self, cuda):
        if self._device_impl is None:
            self._device_impl = cuda.make_policy(self._native_family, self.bits or 0,
                                                 self.bucket_size or 0, self.seed, self.rotated)
        return self._device_impl

    @property
    def name(self) -> str:
        """The C++ type's name: "stochastic<8>", "hadamard<stochastic<4>>", "identity",
        "mxfp8<e4m3>", "nvfp4<stochastic>"."""
        plain = self._plain_name
        return f"hadamard<{plain}>" if self.rotated else plain

    @property
    def next_call(self) -> int:
        """The call index this policy's next encode draws its random numbers with."""
        return self._impl.next_call

    def __repr__(self) -> str:
        if self.family == "identity":
            return "qt.identity()"
        if self.family in _BLOCK_SCALED:
            args = f"element={self.element!r}, " if len(_BLOCK_SCALED[self.family][0]) > 1 else ""
            args += f"rounding={self.rounding!r}, bucket_size={self.bucket_size}"
        else:
            args = f"bits={self.bits}, bucket_size={self.bucket_size}"
        if self.family in ("stochastic", "random_shift") or self.rounding == "stochastic" or \
                self.rotated:
            args += f", seed={self.seed}"
        plain = f"qt.{self.family}({args})"
        return f"qt.hadamard({plain})" if self.rotated else plain


def _integer(name: str, value, lo: int, hi: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where}: {name} is {value!r}; expected an integer")
    if not lo <= value <= hi:
        raise ValueError(f"{where}: {name} is {value}; expected {lo}..{hi}")
    return int(value)


def _plain(family: str, bits, bucket_size, seed, min_bits: int = 1) -> Policy:
    where = f"qsdp.torch.{family}"
    bits = _integer("bits", bits, min_bits, 8, where)
    bucket_size = _integer("bucket_size", bucket_size, 1, 2**56, where)
    seed = _integer("seed", seed, 0, 2**64 - 1, where)
    return Policy(family, bits, bucket_size, seed, False)


def stochastic(bits: int, bucket_size: int = 1024, seed: int = 0) -> Policy:
    """Asymmetric min/max grid, unbiased stochastic rounding (qsdp::stochastic<bits>), bits 1..8."""
    return _plain("stochastic", bits, bucket_size, seed)


def uniform(bits: int, bucket_size: int = 1024) -> Policy:
    """Asymmetric min/max grid, round to nearest (qsdp::uniform<bits>), bits 1..8."""
    return _plain("uniform", bits, bucket_size, 0)


def symmetric(bits: int, bucket_size: int = 1024) -> Policy:
    """Abs-max grid around zero, round to nearest (qsdp::symmetric<bits>), bits 1..8."""
    return _plain("symmetric", bits, bucket_size, 0)


def random_shift(bits: int, bucket_size: int = 1024, seed: int = 0) -> Policy:
    """QSDP's weight quantizer: a grid shifted by a random offset per bucket, unbiased
    (qsdp::random_shift<bits>), bits 2..8."""
    return _plain("random_shift", bits, bucket_size, seed, min_bits=2)


def _block_scaled(family: str, element, rounding, bucket_size, seed) -> Policy:
    where = f"qsdp.torch.{family}"
    elements, bits = _BLOCK_SCALED[family]
    if element not in elements:
        raise ValueError(f"{where}: element is {element!r}; expected "
                         + " or ".join(repr(e) for e in elements))
    if rounding not in _ROUNDINGS:
        raise ValueError(f"{where}: rounding is {rounding!r}; expected 'nearest' or 'stochastic'")
    bucket_size = _integer("bucket_size", bucket_size, 1, 2**56, where)
    seed = _integer("seed", seed, 0, 2**64 - 1, where)
    return Policy(family, bits, bucket_size, seed, False, element, rounding)


def mxfp8(element: str = "e4m3", rounding: str = "nearest", bucket_size: int = 32,
          seed: int = 0) -> Policy:
    """OCP MXFP8 (qsdp::mxfp8<e4m3|e5m2, R>): FP8 elements with a power-of-two E8M0 scale per
    block of bucket_size values (the spec's 32), 8.28 bits per value on the wire. rounding
    "nearest" is the spec's conversion (torchao's to_mx, bit for bit); "stochastic" is unbiased
    and takes the scale that no value saturates under."""
    return _block_scaled("mxfp8", element, rounding, bucket_size, seed)


def mxfp6(element: str = "e2m3", rounding: str = "nearest", bucket_size: int = 32,
          seed: int = 0) -> Policy:
    """OCP MXFP6 (qsdp::mxfp6<e2m3|e3m2, R>): FP6 elements with an E8M0 scale per block, as
    qt.mxfp8."""
    return _block_scaled("mxfp6", element, rounding, bucket_size, seed)


def mxfp4(rounding: str = "nearest", bucket_size: int = 32, seed: int = 0) -> Policy:
    """OCP MXFP4 (qsdp::mxfp4<R>): E2M1 elements with an E8M0 scale per block, as qt.mxfp8."""
    return _block_scaled("mxfp4", "e2m1", rounding, bucket_size, seed)


def nvfp4(rounding: str = "nearest", bucket_size: int = 16, seed: int = 0) -> Policy:
    """NVFP4 (qsdp::nvfp4<R>): E2M1 elements, an E4M3 scale per block of bucket_size values
    (NVFP4's 16) and an fp32 scale per packet (torchao's NVFP4Tensor with a per-tensor scale, bit
    for bit). Stochastic rounding rounds the block scales up and the elements without bias."""
    return _block_scaled("nvfp4", "e2m1", rounding, bucket_size, seed)


def identity() -> Policy:
    """No quantization: values travel unchanged through the same code path (baselines)."""
    return Policy("identity", None, None, 0, False)


def hadamard(inner: Policy, seed: int | None = None) -> Policy:
    """inner's buckets rotated by random signs and a Walsh-Hadamard transform before it quantizes
    them (qsdp::hadamard<Inner>): outliers spread over the bucket. inner's bucket_size must be a
    power of two from 16 to 4096; the rotation draws with inner's seed unless `seed` is given."""
    where = "qsdp.torch.hadamard"
    if not isinstance(inner, Policy):
        raise TypeError(f"{where}: inner is {inner!r}; expected a policy such as "
                        "qt.stochastic(bits=4)")
    if inner.rotated:
        raise ValueError(f"{where}: inner is {inner!r}, rotated already")
    if inner.family == "identity":
        raise ValueError(f"{where}: inner is qt.identity(); expected a quantizing policy")
    seed = inner.seed if seed is None else _integer("seed", seed, 0, 2**64 - 1, where)
    return Policy(inner.family, inner.bits, inner.bucket_size, seed, True, inner.element,
                  inner.rounding)


# ---- tensors ----------------------------------------------------------------------------------

def _policy(q, where: str) -> Policy:
    if not isinstance(q, Policy):
        raise TypeError(f"{where}: policy is {q!r}; expected a qsdp.torch policy "
                        "(qt.stochastic(...), qt.random_shift(...), ...)")
    return q


def _element_code(dtype, name: str, where: str) -> int:
    code = _ELEMENT_CODES.get(dtype)
    if code is None:
        raise TypeError(f"{where}: {name} has dtype {dtype}; expected torch.float32, "
                        "torch.bfloat16 or torch.float16")
    if code != 0 and not _ext.has_half_types:
        raise Error(f"{where}: {name} has dtype {dtype}, which this build of qsdp lacks (built "
                    "without the CUDA toolkit's cuda_bf16.h / cuda_fp16.h); only torch.float32 "
                    "works")
    return code


def _values(t, name: str, where: str) -> int:
    """Checks a tensor of values: a contiguous CPU or CUDA tensor of a supported dtype; its element
    code."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{where}: {name} is {type(t).__name__}; expected a torch.Tensor")
    code = _element_code(t.dtype, name, where)
    _placed(t, name, where)
    return code


def _placed(t, name: str, where: str) -> None:
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{where}: {name} is on {t.device}; expected a CPU or CUDA tensor")
    if not t.is_contiguous():
        raise ValueError(f"{where}: {name} is not contiguous (shape {tuple(t.shape)}, strides "
                         f"{t.stride()}); pass {name}.contiguous()")


def _same_device(a, a_name: str, b, b_name: str, where: str) -> None:
    if a.device != b.device:
        raise ValueError(f"{where}: {a_name} is on {a.device}, {b_name} on {b.device}; expected "
                         "the same device")


_cuda_module = None


def cuda_extension() -> str:
    """"built" when this installation has qsdp's CUDA extension (CUDA tensors work), else why not."""
    return _ext.cuda_extension


def _cuda(t, name: str, where: str):
    """qsdp._ext_cuda, for tensor `t` on a CUDA device; qsdp.Error saying why where it is missing."""
    global _cuda_module
    if _cuda_module is None:
        if _ext.cuda_extension != "built":
            raise Error(f"{where}: {name} is on {t.device}, and this installation of qsdp has no "
                        f"CUDA extension ({_ext.cuda_extension}); reinstall it where nvcc is "
                        "found (pip install . with /usr/local/cuda/bin on PATH, or CUDACXX set), "
                        "or pass CPU tensors")
        try:
            from . import _ext_cuda
        except ImportError as e:
            raise Error(f"{where}: {name} is on {t.device}, and qsdp's CUDA extension was built "
                        f"but does not load: {e}") from e
        _cuda_module = _ext_cuda
    return _cuda_module


def _on(t):
    """The device context of t (CUDA: torch's current device set to t's for the call)."""
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _stream(t) -> int:
    """torch's current stream on t's device, as the integer the extension takes."""
    return torch.cuda.current_stream(t.device).cuda_stream


def compressed_size(policy: Policy, count: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the packet that encodes `count` values of `dtype` with `policy`."""
    where = "qsdp.torch.compressed_size"
    q = _policy(policy, where)
    count = _integer("count", count, 0, 2**56, where)
    return q._impl.compressed_size(_element_code(dtype, "dtype", where), count)


def encode(policy: Policy, x: torch.Tensor) -> torch.Tensor:
    """x's values as one packet: a 1-D uint8 tensor on x's device, compressed_size(...) bytes."""
    where = "qsdp.torch.encode"
    q = _policy(policy, where)
    code = _values(x, "x", where)
    packet = torch.empty(q._impl.compressed_size(code, x.numel()), dtype=torch.uint8,
                         device=x.device)
    if x.is_cuda:
        device = q._device(_cuda(x, "x", where))
        with _on(x):
            device.encode(code, x.data_ptr(), x.numel(), packet.data_ptr(), q._impl.take_call(),
                          _stream(x))
    else:
        q._impl.encode(code, x.data_ptr(), x.numel(), packet.data_ptr())
    return packet


def decode(policy: Policy, packet: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Fills `out` with the values of `packet` (made by encode with this policy for out.numel()
    values of out.dtype); a packet of another policy, count or element type raises qsdp.Error (on
    CUDA: its values come out NaN and the error is raised by the next qsdp call on that device, or
    by qt.synchronize())."""
    where = "qsdp.torch.decode"
    q = _policy(policy, where)
    code = _values(out, "out", where)
    if not isinstance(packet, torch.Tensor):
        raise TypeError(f"{where}: packet is {type(packet).__name__}; expected a torch.Tensor")
    if packet.dtype != torch.uint8 or packet.dim() != 1:
        raise TypeError(f"{where}: packet has dtype {packet.dtype} and {packet.dim()} "
                        "dimension(s); expected a 1-D torch.uint8 tensor (qt.encode's)")
    _placed(packet, "packet", where)
    _same_device(packet, "packet", out, "out", where)
    expected = q._impl.compressed_size(code, out.numel())
    if packet.numel() != expected:
        raise ValueError(f"{where}: packet holds {packet.numel()} bytes; {q.name} packs "
                         f"{out.numel()} values of {out.dtype} into {expected}")
    if out.is_cuda:
        device = q._device(_cuda(out, "out", where))
        with _on(out):
            device.decode(code, packet.data_ptr(), out.numel(), out.data_ptr(), _stream(out))
    else:
        q._impl.decode(code, packet.data_ptr(), out.numel(), out.data_ptr())
    return out


# ---- collectives ------------------------------------------------------------------------------

# The qsdp communicators of each process group, by device (None: the host one; a CUDA device
# index: that device's), each holding the call counter and scratch its collectives use, dropped
# with the group. Neither the table nor the communicator's callbacks keep the group
# alive: a ProcessGroup that outlived destroy_process_group would be torn down at interpreter exit,
# after its backend, which aborts the process.
_communicators: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

# The byte views handed to the latest torch collectives. While a backend's worker thread holds a
# torch reference to a tensor that Python also sees, that tensor holds a reference to its Python
# object, and the worker takes the GIL to drop it. A gloo worker lets go of a finished collective
# just after wait() returns: when a qsdp collective ends a program, that can fall into the
# interpreter's finalization, where a thread taking the GIL is ended, and the process aborts
# ("terminate called without an active exception"). So the views are kept, and at exit the main
# thread gives up the GIL until no worker holds them.
_recent_views: "collections.deque" = collections.deque(maxlen=32)


def _await_torch_workers(timeout: float = 0.5) -> None:
    """Waits, the GIL released, until the torch collectives' workers have let go of the latest
    byte views (microseconds where they have work to finish; bounded by `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while _recent_views:
        view = _recent_views.popleft()
        # Referenced by `view` and by getrefcount's argument; any more is a worker's.
        while sys.getrefcount(view) > 2 and time.monotonic() < deadline:
            time.sleep(0.0002)


def _communicator(group, where: str, t=None):
    """The qsdp communicator of `group` for tensors like `t`: the host one, or for a CUDA tensor
    the device one of its device (each with its own call counter and scratch)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{where}: torch.distributed is not initialized "
                           "(call torch.distributed.init_process_group first)")
    if group is None:
        group = dist.group.WORLD
    key = None if t is None or not t.is_cuda else t.device.index
    comms = _communicators.get(group)
    if comms is None:
        comms = _communicators[group] = {}
    comm = comms.get(key)
    if comm is None:
        ref = weakref.ref(group)

        def live():
            g = ref()
            if g is None:
                raise RuntimeError(f"{where}: the process group is gone")
            return g

        wire = live
        if key is None:
            # The host communicator's exchanges may run on its progress thread (async_op) while
            # the caller issues collectives of its own: they get a process group of their own over
            # the same ranks, so that the two streams of collectives never interleave differently
            # on different ranks.
            own = dist.new_group(ranks=dist.get_process_group_ranks(group),
                                 backend=dist.get_backend(group), use_local_synchronization=True)

            def wire():
                live()
                return own

        def all_gather(send, recv):
            _recent_views.extend((send, recv))
            dist.all_gather_into_tensor(recv, send, group=wire())

        def all_to_all(send, recv):
            _recent_views.extend((send, recv))
            dist.all_to_all_single(recv, send, group=wire())

        rank, size = dist.get_rank(group), dist.get_world_size(group)
        if key is None:
            comm = _ext.GroupCommunicator(rank, size, all_gather, all_to_all)
        else:
            comm = _cuda(t, "the tensors", where).DeviceGroupCommunicator(
                rank, size, key, all_gather, all_to_all)
        comms[key] = comm
    return comm


def _collective(q: Policy, comm, t, where: str):
    """The policy object that runs a collective on tensors like t, and the stream argument."""
    if not t.is_cuda:
        return q._impl, ()
    return q._device(_cuda(t, "the tensors", where)), (_stream(t),)


def synchronize(device=None) -> None:
    """Waits for torch's current stream on a CUDA device (default: the current one) and raises
    qsdp.Error for a bad packet a qsdp decode or collective on that device found since the last
    check (on CUDA such a packet's values come out NaN and the error is otherwise raised by the
    next qsdp call there). Does nothing where qsdp's CUDA extension is not built."""
    if _ext.cuda_extension != "built" or not torch.cuda.is_available():
        return
    device = torch.device("cuda", torch.cuda.current_device()) if device is None \
        else torch.device(device)
    probe = torch.empty(0, device=device)
    cuda = _cuda(probe, "device", "qsdp.torch.synchronize")
    cuda.synchronize_and_check(_stream(probe))
    for comms in list(_communicators.values()):
        comm = comms.get(device.index)
        if comm is not None:
            comm.check_failures()


def _op_code(op, where: str) -> int:
    if isinstance(op, str):
        code = _OP_CODES.get(op.lower())
    elif op == dist.ReduceOp.SUM:
        code = 1
    elif op == dist.ReduceOp.AVG:
        code = 2
    else:
        code = None
    if code is None:
        raise ValueError(f"{where}: op is {op!r}; expected \"sum\", \"avg\", "
                         "dist.ReduceOp.SUM or dist.ReduceOp.AVG")
    return code


def _same_dtype(a, a_name, b, b_name, where):
    if a.dtype != b.dtype:
        raise TypeError(f"{where}: {a_name} has dtype {a.dtype}, {b_name} {b.dtype}; expected "
                        "the same")


def _world_times(full, full_name, part, part_name, world, where):
    """full must hold world x part's values (all-gather's output, reduce-scatter's input)."""
    if full.numel() != part.numel() * world:
        raise ValueError(f"{where}: {full_name} has {full.numel()} values; expected world size "
                         f"{world} x {part_name}'s {part.numel()} = {part.numel() * world}")


def _gate(min_compressed_bytes, where: str) -> int:
    """The size gate a call runs with: min_compressed_bytes, checked; None is the recommended
    gate (what fsdp.compress passes for its default)."""
    if min_compressed_bytes is None:
        return RECOMMENDED_MIN_COMPRESSED_BYTES
    return _integer("min_compressed_bytes", min_compressed_bytes, 0, 2**63 - 1, where)


def _sends_uncompressed(t: torch.Tensor, values: int, min_compressed_bytes=None) -> bool:
    """Whether a collective whose every rank sends each peer `values` values of t's dtype goes
    uncompressed under the size gate (as the C++ library decides)."""
    gate = _gate(min_compressed_bytes, "qsdp.torch")
    return values * t.element_size() < gate


class _HostWork(dist.Work):
    """A qsdp collective on CPU tensors running on its communicator's progress thread (the GIL
    released while it encodes, decodes and waits), as torch.distributed's Work: wait() returns True
    when it is done, raising its qsdp.Error on every rank where the collective failed. The tensors
    stay referenced until then."""

    def __init__(self, work, keep, outputs):
        super().__init__()
        self._work, self._keep, self._outputs = work, keep, outputs

    def wait(self, timeout=None) -> bool:
        if self._work is None:
            return True
        if timeout is not None and timeout.total_seconds() > 0:
            deadline = time.monotonic() + timeout.total_seconds()
            while not self._work.test():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"qsdp.torch: a started collective did not finish within "
                                       f"{timeout}; it still owns its tensors")
                time.sleep(0.0005)
        work, self._work = self._work, None
        try:
            work.wait()
        finally:
            self._keep = None
        return True

    def is_completed(self) -> bool:
        return self._work is None or self._work.test()

    def is_success(self) -> bool:
        return self.is_completed()

    def get_future(self):
        """A torch.futures.Future that completes (with the output tensors) when wait() would
        return, from a thread that waits."""
        future = torch.futures.Future()

        def finish():
            try:
                self.wait()
                future.set_result(self._outputs)
            except BaseException as e:  # noqa: BLE001 - handed to the future's waiter
                future.set_exception(e)

        threading.Thread(target=finish, daemon=True).start()
        return future


class _CudaWork(dist.Work):
    """A qsdp collective on CUDA tensors: already ordered on the stream it was issued on; wait()
    makes the caller's current stream wait for it, as NCCL's Work does."""

    def __init__(self, event, device, outputs):
        super().__init__()
        self._event, self._device, self._outputs = event, device, outputs

    def wait(self, timeout=None) -> bool:
        torch.cuda.current_stream(self._device).wait_event(self._event)
        return True

    def is_completed(self) -> bool:
        return self._event.query()

    def is_success(self) -> bool:
        return self.is_completed()

    def get_future(self):
        future = torch.futures.Future()
        self._event.synchronize()
        future.set_result(self._outputs)
        return future


class _DoneWork(dist.Work):
    """The Work of a call with nothing to do (an empty coalesced list)."""

    def __init__(self, outputs):
        super().__init__()
        self._outputs = outputs

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self):
        future = torch.futures.Future()
        future.set_result(self._outputs)
        return future


def _issue(t, async_op: bool, keep, outputs, run):
    """Runs a collective on tensors like t: run(tail) calls the extension with `tail` after the
    size gate (the host calls' async_op). Returns None when it is done (async_op False), else a
    torch.distributed Work."""
    if t.is_cuda:
        with _on(t):
            run(())
            if not async_op:
                return None
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(t.device))
        return _CudaWork(event, t.device, outputs)
    work = run((bool(async_op),))
    return _HostWork(work, keep, outputs) if async_op else None


def all_gather_into_tensor(output: torch.Tensor, input: torch.Tensor, policy: Policy,
                           group=None, async_op: bool = False, *, min_compressed_bytes=0):
    """torch.distributed.all_gather_into_tensor, compressed: output (world * input.numel()
    values) gets every rank's input, rank r's at r * input.numel(); the same values on every
    rank. An input of fewer than min_compressed_bytes bytes moves uncompressed (the size gate).
    async_op=True returns a torch.distributed Work at once (see "Started collectives" in the
    module's documentation); otherwise None, when the output is ready."""
    where = "qsdp.torch.all_gather_into_tensor"
    q = _policy(policy, where)
    gate = _gate(min_compressed_bytes, where)
    code = _values(input, "input", where)
    _values(output, "output", where)
    _same_dtype(input, "input", output, "output", where)
    _same_device(input, "input", output, "output", where)
    comm = _communicator(group, where, input)
    _world_times(output, "output", input, "input", comm.size, where)
    impl, stream = _collective(q, comm, input, where)
    return _issue(input, async_op, (output, input, impl, comm), [output],
                  lambda tail: impl.all_gather(comm, code, input.data_ptr(), output.data_ptr(),
                                               input.numel(), *stream, gate, *tail))


def _torchao_element_dtype(element: str):
    """torchao's element dtype of an MX element format (torchao imported by the caller)."""
    from torchao.prototype.mx_formats import constants
    return {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2,
            "e3m2": constants.DTYPE_FP6_E3M2, "e2m3": constants.DTYPE_FP6_E2M3,
            "e2m1": torch.float4_e2m1fn_x2}[element]


def _torchao_mx_classes(where: str, fallback: str):
    """torchao's MXTensor, KernelPreference and QuantizeTensorToMXKwargs; qsdp.Error saying why not
    where torchao's MX formats do not import."""
    try:
        from torchao.prototype.mx_formats.mx_tensor import MXTensor, QuantizeTensorToMXKwargs
        from torchao.quantization.quantize_.common.kernel_preference import KernelPreference
    except ImportError as e:
        raise Error(f"{where}: returns torchao MXTensors, and torchao's MX formats do not import "
                    f"here ({e}); pip install torchao{fallback}") from e
    return MXTensor, KernelPreference, QuantizeTensorToMXKwargs


def _mx_tensor(q: Policy, elements: torch.Tensor, scales: torch.Tensor, orig_dtype, *,
               tiled_scales: bool = False, quantized_inputs: bool = False):
    """The torchao MXTensor whose qdata and scale are the block-scaled layout `elements` and
    `scales` (uint8, rows first; no copy). quantized_inputs: a linear with it as its weight casts
    its input to the same MX format (torchao's dynamic activation cast), so that the GEMM takes two
    MX operands: on CUDA devices of compute capability 10.0 and up with 32-value blocks of e4m3 or
    e2m1 torchao's MX GEMM, elsewhere torchao's emulation (both operands decoded, multiplied in
    orig_dtype)."""
    MXTensor, KernelPreference, QuantizeTensorToMXKwargs = _torchao_mx_classes(
        "qsdp.torch", "")
    elem_dtype = _torchao_element_dtype(q.element)
    qdata = elements.view(elem_dtype) if q.bits == 8 else elements
    preference = KernelPreference.EMULATED
    if (quantized_inputs and elements.is_cuda and q.bucket_size == 32
            and q.element in ("e4m3", "e2m1")
            and torch.cuda.get_device_capability(elements.device) >= (10, 0)):
        preference = KernelPreference.AUTO
    act = None
    if quantized_inputs:
        act = QuantizeTensorToMXKwargs(elem_dtype=elem_dtype, block_size=q.bucket_size,
                                       kernel_preference=preference)
    return MXTensor(qdata, scales.view(torch.float8_e8m0fnu), elem_dtype, q.bucket_size,
                    orig_dtype, preference, act, tiled_scales)


def _encode_block_scaled(q: Policy, x: torch.Tensor):
    """x (2-D, rows of whole blocks) encoded with MX policy q, in the block-scaled layout:
    (elements, scales), uint8 tensors of x's rows, on x's device. One encode, as qt.encode's (the
    policy's next call)."""
    where = "qsdp.torch.fsdp.keep_encoded"
    x = x.contiguous()
    rows, cols = x.shape
    packet = encode(q, x)
    elements = torch.empty(rows, q._impl.block_scaled_element_bytes(cols), dtype=torch.uint8,
                           device=x.device)
    scales = torch.empty(rows, cols // q.bucket_size, dtype=torch.uint8, device=x.device)
    if x.is_cuda:
        device = q._device(_cuda(x, "the weight", where))
        with _on(x):
            device.unpack_block_scaled(packet.data_ptr(), x.numel(), elements.data_ptr(),
                                       scales.data_ptr(), _stream(x))
    else:
        q._impl.unpack_block_scaled(packet.data_ptr(), x.numel(), elements.data_ptr(),
                                    scales.data_ptr())
    return elements, scales


def all_gather_encoded(input: torch.Tensor, policy: Policy, group=None, *,
                       as_mx_tensor: bool = True, tiled_scales: bool = False):
    """all_gather_into_tensor that hands the result over still encoded, for a GEMM that takes MX
    operands: a torchao MXTensor of shape (world * input.shape[0], *input.shape[1:]) (a 1-D input:
    (world * input.numel(),)) whose qdata and scale are the gathered packets' elements and E8M0
    scales, no value decoded (C++ qsdp::all_gather_encoded). policy is an MX policy (qt.mxfp8,
    qt.mxfp6, qt.mxfp4; not rotated), its bucket_size the MXTensor's block_size, which must divide
    input's last dimension (blocks run along it, as torchao's). With round-to-nearest the result is
    torchao's MXTensor.to_mx of the gathered values, bit for bit (a block that held NaN has scale
    0xFF in both, and elements 0 here). as_mx_tensor=False returns the
    layout as two uint8 tensors, (elements, scales), without needing torchao. tiled_scales=True
    hands the scales over in the tiled layout cuBLAS's block-scaled GEMM reads (C++
    qsdp::tile_block_scales; torchao's is_swizzled_scales), for a 2-D CPU input (torchao's MX
    GEMM tiles the scales of a CUDA one itself). CPU and CUDA tensors (the result on input's
    device; CUDA: stream-ordered as all_gather_into_tensor). The exchanges are
    all_gather_into_tensor's: ranks may mix the two calls."""
    where = "qsdp.torch.all_gather_encoded"
    q = _mx_policy(policy, where)
    code = _values(input, "input", where)
    if input.dim() == 0 or input.shape[-1] % q.bucket_size:
        raise ValueError(f"{where}: input has shape {tuple(input.shape)}; expected its last "
                         f"dimension a multiple of the policy's bucket_size {q.bucket_size} (the "
                         "blocks run along it)")
    if tiled_scales and input.dim() != 2:
        raise ValueError(f"{where}: input has shape {tuple(input.shape)}; tiled_scales=True "
                         "takes a 2-D input (a weight's rows and columns)")
    if tiled_scales and input.is_cuda:
        raise ValueError(f"{where}: input is on {input.device}; tiled_scales=True tiles on the "
                         "host, for CPU tensors (torchao's MX GEMM tiles a CUDA MXTensor's "
                         "scales itself): pass tiled_scales=False")
    if as_mx_tensor:
        _torchao_mx_classes(where, ", or pass as_mx_tensor=False for the elements and scales as "
                            "uint8 tensors")
    comm = _communicator(group, where, input)
    world, count = comm.size, input.numel()
    elements = torch.empty(q._impl.block_scaled_element_bytes(world * count), dtype=torch.uint8,
                           device=input.device)
    scales = torch.empty(world * count // q.bucket_size, dtype=torch.uint8, device=input.device)
    impl, stream = _collective(q, comm, input, where)
    with _on(input):
        impl.all_gather_encoded(comm, code, input.data_ptr(), elements.data_ptr(),
                                scales.data_ptr(), count, *stream)
    shape = (world * input.shape[0], *input.shape[1:]) if input.dim() > 1 else (world * count,)
    scales = scales.view(*shape[:-1], -1)
    if tiled_scales:
        rows, cols = scales.shape
        tiled = torch.empty(_ext.tiled_block_scales_size(rows, cols), dtype=torch.uint8)
        _ext.tile_block_scales(scales.data_ptr(), rows, cols, tiled.data_ptr())
        scales = tiled.view(-(-rows // 128) * 32, -(-cols // 4) * 16)  # 512-byte tiles as rows
    if not as_mx_tensor:
        return elements, scales
    return _mx_tensor(q, elements.view(*shape[:-1], -1), scales, input.dtype,
                      tiled_scales=tiled_scales)


def _mx_policy(policy, where: str) -> Policy:
    q = _policy(policy, where)
    if q.family not in ("mxfp8", "mxfp6", "mxfp4") or q.rotated:
        raise ValueError(f"{where}: policy is {q!r}; expected an MX policy (qt.mxfp8, qt.mxfp6, "
                         "qt.mxfp4), not rotated: only their elements and scales are what an MX "
                         "GEMM reads")
    return q


def reduce_scatter_tensor(output: torch.Tensor, input: torch.Tensor, policy: Policy,
                          op="avg", group=None, async_op: bool = False, *,
                          min_compressed_bytes=0):
    """torch.distributed.reduce_scatter_tensor, compressed: input holds world chunks of
    output.numel() values; output gets the sum (op "sum") or mean ("avg") over ranks of this
    rank's chunk, each value quantized once and summed in float32. Chunks of fewer than
    min_compressed_bytes bytes move uncompressed (the size gate). async_op=True returns a
    torch.distributed Work at once; otherwise None, when the output is ready."""
    where = "qsdp.torch.reduce_scatter_tensor"
    q = _policy(policy, where)
    gate = _gate(min_compressed_bytes, where)
    code = _values(input, "input", where)
    _values(output, "output", where)
    _same_dtype(input, "input", output, "output", where)
    _same_device(input, "input", output, "output", where)
    op_code = _op_code(op, where)
    comm = _communicator(group, where, input)
    _world_times(input, "input", output, "output", comm.size, where)
    impl, stream = _collective(q, comm, input, where)
    return _issue(input, async_op, (output, input, impl, comm), [output],
                  lambda tail: impl.reduce_scatter(comm, code, input.data_ptr(), output.data_ptr(),
                                                   output.numel(), op_code, *stream, gate, *tail))


def all_reduce(tensor: torch.Tensor, policy: Policy, op="sum", group=None,
               async_op: bool = False, *, min_compressed_bytes=0):
    """torch.distributed.all_reduce, compressed and in place: reduce-scatter, then all-gather of
    the reduced chunks, so every rank ends with the same values. A tensor of fewer than
    min_compressed_bytes bytes is all-gathered uncompressed and summed in float32 (the size
    gate). async_op=True returns a torch.distributed Work at once; otherwise None."""
    where = "qsdp.torch.all_reduce"
    q = _policy(policy, where)
    gate = _gate(min_compressed_bytes, where)
    code = _values(tensor, "tensor", where)
    op_code = _op_code(op, where)
    comm = _communicator(group, where, tensor)
    impl, stream = _collective(q, comm, tensor, where)
    return _issue(tensor, async_op, (tensor, impl, comm), [tensor],
                  lambda tail: impl.all_reduce(comm, code, tensor.data_ptr(), tensor.numel(),
                                               op_code, *stream, gate, *tail))


def _policies(policy, n: int, where: str) -> list:
    """One policy per tensor: `policy` itself n times, or a sequence of n policies."""
    if isinstance(policy, Policy):
        return [policy] * n
    if isinstance(policy, (list, tuple)):
        if len(policy) != n:
            raise ValueError(f"{where}: {len(policy)} policies for {n} tensors; expected one "
                             "policy, or one per tensor")
        return [_policy(q, where) for q in policy]
    return [_policy(policy, where)] * n


def _tensor_list(tensors, name: str, where: str) -> list:
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{where}: {name} is {type(tensors).__name__}; expected a list of "
                        "torch.Tensor")
    return list(tensors)


def _coalesced(where: str, outputs, inputs, policy, group, gate, record, async_op=False):
    """Checks the lists, then records one call per pair in a qsdp group on the communicator and
    runs them at its end: one agreement and one exchange for all of them. Returns None when they
    are done, or with async_op a torch.distributed Work (_issue)."""
    outputs = _tensor_list(outputs, "outputs", where)
    inputs = _tensor_list(inputs, "inputs", where)
    if len(outputs) != len(inputs):
        raise ValueError(f"{where}: {len(outputs)} outputs for {len(inputs)} inputs; expected "
                         "one output per input")
    policies = _policies(policy, len(inputs), where)
    gate = _gate(gate, where)
    if not inputs:
        return _DoneWork([]) if async_op else None
    codes = []
    for i, (out, inp) in enumerate(zip(outputs, inputs)):
        codes.append(_values(inp, f"inputs[{i}]", where))
        _values(out, f"outputs[{i}]", where)
        _same_dtype(inp, f"inputs[{i}]", out, f"outputs[{i}]", where)
        _same_device(inp, f"inputs[{i}]", inputs[0], "inputs[0]", where)
        _same_device(out, f"outputs[{i}]", inputs[0], "inputs[0]", where)
    comm = _communicator(group, where, inputs[0])
    calls = [(record(i, comm), *_collective(q, comm, inputs[0], where))
             for i, q in enumerate(policies)]
    cuda = inputs[0].is_cuda
    stream = () if not cuda else (_stream(inputs[0]),)
    tail = () if cuda else (False,)  # recorded blocking: the group's end runs or starts them

    def run(end_tail):
        comm.group_start()
        try:
            for i, (check, impl, extra) in enumerate(calls):
                check(impl, codes[i], extra, tail)
        except BaseException:
            # The group still runs what was recorded, on every rank: the other ranks' group_end
            # then fails with the difference instead of waiting for this rank.
            with contextlib.suppress(Error):
                comm.group_end(*stream)
            raise
        if end_tail and end_tail[0]:
            return comm.group_end_async()
        comm.group_end(*stream)
        return None

    keep = (list(outputs), list(inputs), calls, comm)
    return _issue(inputs[0], async_op, keep, list(outputs), run)


def all_gather_into_tensor_coalesced(outputs, inputs, policy, group=None,
                                     async_op: bool = False, *, min_compressed_bytes=0):
    """all_gather_into_tensor over lists of tensors in one agreement and one exchange (a qsdp group,
    as torch.distributed's coalesced collectives and NCCL's groups): outputs[i] (world x
    inputs[i].numel() values) gets every rank's inputs[i]. The tensors may differ in size and dtype;
    all are on one device. `policy` is one policy for every tensor or a list of one per tensor. The
    size gate applies to the inputs' total bytes: below it every tensor moves uncompressed. Each
    output gets the bytes of the same single call made in its place, whenever the gate decides
    alike. async_op=True returns one torch.distributed Work for the group."""
    where = "qsdp.torch.all_gather_into_tensor_coalesced"

    def record(i, comm):
        out, inp = outputs[i], inputs[i]
        _world_times(out, f"outputs[{i}]", inp, f"inputs[{i}]", comm.size, where)

        def call(impl, code, extra, tail):
            impl.all_gather(comm, code, inp.data_ptr(), out.data_ptr(), inp.numel(), *extra,
                            gate, *tail)
        return call

    gate = _gate(min_compressed_bytes, where)
    return _coalesced(where, outputs, inputs, policy, group, gate, record, async_op)


def reduce_scatter_tensor_coalesced(outputs, inputs, policy, op="avg", group=None,
                                    async_op: bool = False, *, min_compressed_bytes=0):
    """reduce_scatter_tensor over lists of tensors in one agreement and one exchange (a qsdp
    group): inputs[i] holds world chunks of outputs[i].numel() values, and outputs[i] gets the sum
    or mean over ranks of this rank's chunk. Sizes and dtypes may differ; one device; `policy` one
    for all or one per tensor; one op. The size gate applies to the outputs' total bytes.
    async_op=True returns one torch.distributed Work for the group."""
    where = "qsdp.torch.reduce_scatter_tensor_coalesced"
    op_code = _op_code(op, where)

    def record(i, comm):
        out, inp = outputs[i], inputs[i]
        _world_times(inp, f"inputs[{i}]", out, f"outputs[{i}]", comm.size, where)

        def call(impl, code, extra, tail):
            impl.reduce_scatter(comm, code, inp.data_ptr(), out.data_ptr(), out.numel(), op_code,
                                *extra, gate, *tail)
        return call

    gate = _gate(min_compressed_bytes, where)
    return _coalesced(where, outputs, inputs, policy, group, gate, record, async_op)


def call_counters(group=None, device=None) -> dict:
    """What qsdp's collectives did on `group`'s communicator for `device` (None or "cpu": the host
    one; a CUDA device: that device's) since it was made: {"compressed_calls", "compressed_bytes",
    "gated_calls", "gated_bytes"}, bytes of values (what each rank sends each peer uncompressed);
    a call the size gate sent uncompressed counts as gated."""
    where = "qsdp.torch.call_counters"
    probe = None
    if device is not None and torch.device(device).type == "cuda":
        probe = torch.empty(0, device=device)
    comm = _communicator(group, where, probe)
    compressed_calls, compressed_bytes, gated_calls, gated_bytes = comm.counters
    return {"compressed_calls": compressed_calls, "compressed_bytes": compressed_bytes,
            "gated_calls": gated_calls, "gated_bytes": gated_bytes}


def call_timings(group=None) -> dict:
    """Where qsdp's collectives on CPU tensors of `group` spent their time since its communicator
    was made, in seconds summed over calls (C++'s qsdp::call_timings): "calls" inside the
    collectives, "encode" and "decode" the codec's share of it (decode: decoding or summing received
    packets), "exchange" the rest: torch's exchanges and waiting for the peers. Waits for the
    collectives started on the group first."""
    comm = _communicator(group, "qsdp.torch.call_timings")
    calls, encode, decode = comm.timings
    return {"calls": calls, "encode": encode, "decode": decode,
            "exchange": max(0.0, calls - encode - decode)}


class DeltaGather:
    """The weight-difference all-gather (qsdp::delta_gather<T>, SDP4Bit's weight differences): one
    object per rank and stream of gathers, keeping the last reconstruction of every rank's shard
    (count x world values of dtype: memory_bytes). Each call sends the quantized difference between
    this rank's shard and the reconstruction the others hold, so errors never accumulate; every
    rank's output is bit-identical. It fits where every rank keeps the full weights anyway (ZeRO-1/2,
    a distributed optimizer); under ZeRO-3 / FSDP it costs a full copy of the gathered weights.

        gather = qt.DeltaGather(count, dtype=torch.float32)
        gather.all_gather_into_tensor(output, input, qt.random_shift(bits=4, bucket_size=2048))

    Every rank must make every call (and reset together): a rank whose reconstruction has seen
    another number of calls, count or policy makes every rank raise qsdp.Error."""

    def __init__(self, count: int, dtype: torch.dtype = torch.float32, group=None):
        where = "qsdp.torch.DeltaGather"
        self.count = _integer("count", count, 0, 2**56, where)
        self.dtype = dtype
        self._comm = _communicator(group, where)
        self._impl = _ext.DeltaGather(_element_code(dtype, "dtype", where), self.count,
                                      self._comm.size)
        _native_owners.add(self)

    def _release(self) -> None:
        self._impl = self._comm = _RELEASED

    @property
    def calls(self) -> int:
        """Calls since construction or the last reset()."""
        return self._impl.calls

    @property
    def memory_bytes(self) -> int:
        """Bytes this object holds (the reconstruction and scratch; allocated by the first call)."""
        return self._impl.memory_bytes

    def reset(self) -> None:
        """Forgets the reconstruction (every rank must reset before the same call)."""
        self._impl.reset()

    def all_gather_into_tensor(self, output: torch.Tensor, input: torch.Tensor,
                               policy: Policy) -> None:
        """output (world * count values) gets every rank's reconstructed shard after this call."""
        where = "qsdp.torch.DeltaGather.all_gather_into_tensor"
        q = _policy(policy, where)
        _values(input, "input", where)
        _values(output, "output", where)
        for name, t in (("input", input), ("output", output)):
            if t.is_cuda:
                raise Error(f"{where}: {name} is on {t.device}; qsdp.torch.DeltaGather takes CPU "
                            "tensors (the device delta_gather is in the C++ library only: "
                            "qsdp::delta_gather with a stream)")
            if t.dtype != self.dtype:
                raise TypeError(f"{where}: {name} has dtype {t.dtype}; this DeltaGather was made "
                                f"for {self.dtype}")
        if input.numel() != self.count:
            raise ValueError(f"{where}: input has {input.numel()} values; this DeltaGather was "
                             f"made for count {self.count}")
        world = self._comm.size
        if output.numel() != self.count * world:
            raise ValueError(f"{where}: output has {output.numel()} values; expected world size "
                             f"{world} x count {self.count} = {self.count * world}")
        q._impl.delta_all_gather(self._impl, self._comm, input.data_ptr(), output.data_ptr())


#: FSDP2 (fully_shard) with these collectives: fsdp.compress(model, weights=..., grads=...).
fsdp = _fsdp.FsdpHooks(policy_type=Policy, delta_gather=DeltaGather,
                       compressed_size=compressed_size,
                       all_gather_into_tensor=all_gather_into_tensor,
                       all_gather_into_tensor_coalesced=all_gather_into_tensor_coalesced,
                       reduce_scatter_tensor=reduce_scatter_tensor,
                       sends_uncompressed=_sends_uncompressed, gate=_gate,
                       mx_policy=_mx_policy, mx_classes=_torchao_mx_classes,
                       encode_block_scaled=_encode_block_scaled, mx_tensor=_mx_tensor)
