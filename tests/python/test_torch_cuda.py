# SPDX-License-Identifier: Apache-2.0
"""qsdp.torch on CUDA tensors (qsdp._ext_cuda): the device codec byte-identical to the host codec
for every family, width and dtype (the MX and NVFP4 ones too), one call counter per policy across devices, the device
collectives equal to the host ones (4 gloo ranks sharing one GPU; one NCCL rank), bad packets
raised, bad tensors named. Needs a GPU and the CUDA extension: reported as skipped without them."""
import pytest
import torch
import torch.distributed as dist

import qsdp
import qsdp.torch as qt
from conftest import run_ranks

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
needs_extension = pytest.mark.skipif(qt.cuda_extension() != "built",
                                     reason=f"qsdp's CUDA extension: {qt.cuda_extension()}")
pytestmark = [needs_gpu, needs_extension]

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
FAMILIES = [("stochastic", 1), ("uniform", 1), ("symmetric", 1), ("random_shift", 2)]


def _make(family, bits, bucket_size=256, seed=5, rotated=False):
    q = getattr(qt, family)(bits=bits, bucket_size=bucket_size,
                            **({"seed": seed} if family in ("stochastic", "random_shift") else {}))
    return qt.hadamard(q, seed=seed) if rotated else q


def _data(count, dtype, seed=0):
    x = torch.randn(count, generator=torch.Generator().manual_seed(seed))
    x[::97] *= 50.0
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rotated", [False, True], ids=["plain", "hadamard"])
@pytest.mark.parametrize("family,min_bits", FAMILIES)
def test_device_packets_equal_host_packets(family, min_bits, rotated, dtype):
    count = 5000 + 7
    x = _data(count, dtype)
    for bits in range(min_bits, 9):
        host_q, device_q = _make(family, bits, rotated=rotated), _make(family, bits, rotated=rotated)
        for call in range(2):  # the second call draws other random numbers, alike on both
            host = qt.encode(host_q, x)
            device = qt.encode(device_q, x.cuda())
            assert device.device.type == "cuda"
            assert torch.equal(host, device.cpu()), (family, bits, call)
            out_host = qt.decode(host_q, host, torch.empty_like(x))
            out_device = qt.decode(device_q, device, torch.empty_like(x, device="cuda"))
            assert torch.equal(out_host.view(torch.uint8), out_device.cpu().view(torch.uint8))
    ident = qt.identity()
    assert torch.equal(qt.decode(ident, qt.encode(ident, x.cuda()), torch.empty_like(x).cuda()),
                       x.cuda())


BLOCK_SCALED = [lambda: qt.mxfp8(), lambda: qt.mxfp8("e5m2", "stochastic", seed=5),
                lambda: qt.mxfp6("e3m2"), lambda: qt.mxfp6("e2m3", "stochastic", seed=5),
                lambda: qt.mxfp4(), lambda: qt.mxfp4("stochastic", seed=5),
                lambda: qt.nvfp4(), lambda: qt.nvfp4("stochastic", seed=5),
                lambda: qt.hadamard(qt.mxfp4("stochastic", seed=5)),
                lambda: qt.hadamard(qt.nvfp4("stochastic", seed=5))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("make", BLOCK_SCALED, ids=lambda make: make().name)
def test_block_scaled_device_packets_equal_host_packets(make, dtype):
    x = _data(5000 + 7, dtype)
    host_q, device_q = make(), make()
    for call in range(2):
        host = qt.encode(host_q, x)
        device = qt.encode(device_q, x.cuda())
        assert torch.equal(host, device.cpu()), (host_q.name, call)
        out_host = qt.decode(host_q, host, torch.empty_like(x))
        out_device = qt.decode(device_q, device, torch.empty_like(x, device="cuda"))
        assert torch.equal(out_host.view(torch.uint8), out_device.cpu().view(torch.uint8))


def test_one_call_counter_per_policy_across_devices():
    x = _data(3000, torch.float32)
    mixed, host_only = qt.stochastic(bits=4, seed=3), qt.stochastic(bits=4, seed=3)
    packets = [qt.encode(mixed, x), qt.encode(mixed, x.cuda()).cpu(), qt.encode(mixed, x)]
    expected = [qt.encode(host_only, x) for _ in range(3)]
    assert mixed.next_call == 3
    for got, want in zip(packets, expected):
        assert torch.equal(got, want)
    assert not torch.equal(packets[0], packets[1])


def test_bad_device_packet_is_raised():
    q = qt.stochastic(bits=8)
    x = _data(4096, torch.float32).cuda()
    packet = qt.encode(q, x)
    packet[0] ^= 0xFF  # the header's magic
    out = qt.decode(q, packet, torch.empty_like(x))
    with pytest.raises(qsdp.Error, match="packet"):
        qt.synchronize()
    assert torch.isnan(out).all()
    qt.synchronize()  # reported once


def test_bad_cuda_tensors_are_named():
    q = qt.stochastic(bits=8)
    x = torch.zeros(100, device="cuda")
    with pytest.raises(ValueError, match="packet is on cpu, out on cuda"):
        qt.decode(q, qt.encode(q, x).cpu(), torch.empty_like(x))
    with pytest.raises(ValueError, match="x is not contiguous"):
        qt.encode(q, torch.zeros(10, 10, device="cuda").t())


def _device_collectives_equal_host(rank, world):
    # gloo moves CUDA tensors too (through host memory), ordered on torch's current stream like
    # NCCL: enough to run the device collectives' multi-rank pipeline with several ranks on one GPU.
    for dtype in DTYPES:
        count = 4096 + 33
        x = _data(count, dtype, seed=rank)
        full = _data(world * count, dtype, seed=10 + rank)
        results = {}
        for where in ("cpu", "cuda"):
            w = qt.random_shift(bits=4, bucket_size=512, seed=1)
            g = qt.hadamard(qt.stochastic(bits=4, bucket_size=256, seed=2))
            gathered = torch.empty(world * count, dtype=dtype, device=where)
            qt.all_gather_into_tensor(gathered, x.to(where), w)
            reduced = torch.empty(count, dtype=dtype, device=where)
            qt.reduce_scatter_tensor(reduced, full.to(where), g, op="avg")
            summed = full.to(where).clone()
            qt.all_reduce(summed, qt.stochastic(bits=8, seed=3), op="sum")
            mx_gathered = torch.empty(world * count, dtype=dtype, device=where)
            qt.all_gather_into_tensor(mx_gathered, x.to(where), qt.mxfp8())
            fp4_reduced = torch.empty(count, dtype=dtype, device=where)
            qt.reduce_scatter_tensor(fp4_reduced, full.to(where), qt.nvfp4("stochastic", seed=4),
                                     op="avg")
            results[where] = [t.cpu() for t in (gathered, reduced, summed, mx_gathered,
                                                fp4_reduced)]
        for h, d in zip(results["cpu"], results["cuda"]):
            assert torch.equal(h.view(torch.uint8), d.view(torch.uint8)), dtype
    qt.synchronize()
    # a rank that calls differently: every rank raises, on the device path too
    count = 1000 if rank != 1 else 999
    with pytest.raises(qsdp.Error, match="count"):
        qt.all_gather_into_tensor(torch.empty(world * count, device="cuda"),
                                  torch.zeros(count, device="cuda"), qt.stochastic(bits=8))
    dist.barrier()


def test_device_collectives_equal_host_collectives():
    run_ranks(4, _device_collectives_equal_host, timeout=300)


def _device_coalesced_equal_host(rank, world):
    # A coalesced call is a device group: its outputs are the host group's, byte for byte.
    sizes = [(1000, torch.float32), (4096 + 7, torch.bfloat16), (300, torch.float16)]
    inputs = [_data(n, dtype, seed=rank + i) for i, (n, dtype) in enumerate(sizes)]
    grads = [_data(world * n, dtype, seed=20 + rank + i) for i, (n, dtype) in enumerate(sizes)]
    results = {}
    for where in ("cpu", "cuda"):
        group = dist.new_group()  # call indices from 0 on both sides
        w = [qt.random_shift(bits=8, bucket_size=128, seed=1), qt.uniform(bits=4),
             qt.stochastic(bits=6, seed=2)]
        g = qt.hadamard(qt.stochastic(bits=4, bucket_size=256, seed=3))
        gathered = [torch.empty(world * n, dtype=dtype, device=where) for n, dtype in sizes]
        qt.all_gather_into_tensor_coalesced(gathered, [x.to(where) for x in inputs], w,
                                            group=group)
        reduced = [torch.empty(n, dtype=dtype, device=where) for n, dtype in sizes]
        qt.reduce_scatter_tensor_coalesced(reduced, [x.to(where) for x in grads], g, op="avg",
                                           group=group)
        results[where] = [t.cpu() for t in gathered + reduced]
    for h, d in zip(results["cpu"], results["cuda"]):
        assert torch.equal(h.view(torch.uint8), d.view(torch.uint8))
    qt.synchronize()
    dist.barrier()


def test_device_coalesced_calls_equal_host_ones():
    run_ranks(4, _device_coalesced_equal_host, timeout=300)


def _nccl_world_of_one(rank, world):
    # The NCCL path proper needs a GPU per rank; a world of one still runs it end to end.
    nccl = dist.new_group([0], backend="nccl")
    x = _data(10000, torch.bfloat16).cuda()
    out = torch.empty_like(x)
    qt.all_gather_into_tensor(out, x, qt.identity(), group=nccl)
    assert torch.equal(out, x)
    qt.reduce_scatter_tensor(out, x, qt.stochastic(bits=8, seed=4), op="sum", group=nccl)
    assert out.isfinite().all()
    assert (out.float() - x.float()).norm() <= 0.02 * x.float().norm()
    qt.synchronize()


@pytest.mark.skipif(not dist.is_nccl_available(), reason="torch without NCCL")
def test_nccl_world_of_one():
    run_ranks(1, _nccl_world_of_one, timeout=120)


MX = [lambda: qt.mxfp8(), lambda: qt.mxfp6("e3m2", "stochastic", seed=6), lambda: qt.mxfp4()]


def _device_encoded_gather_equals_host(rank, world):
    x = _data(6 * 64, torch.bfloat16, seed=rank).reshape(6, 64)
    for make in MX:
        host_q, device_q = make(), make()
        host = qt.all_gather_encoded(x, host_q, as_mx_tensor=False)
        device = qt.all_gather_encoded(x.cuda(), device_q, as_mx_tensor=False)
        assert device[0].is_cuda and device[1].is_cuda
        for h, d in zip(host, device):
            assert torch.equal(h, d.cpu()), host_q.name
    with pytest.raises(ValueError, match="tiled_scales=True tiles on the host"):
        qt.all_gather_encoded(x.cuda(), qt.mxfp8(), tiled_scales=True)
    qt.synchronize()
    dist.barrier()


def test_device_encoded_all_gather_equals_the_hosts():
    run_ranks(2, _device_encoded_gather_equals_host, timeout=300)


def _keep_encoded_on_cuda(rank, world):
    pytest.importorskip("torchao.prototype.mx_formats")
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    from torchao.prototype.mx_formats.mx_tensor import MXTensor

    nccl = dist.new_group([0], backend="nccl")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 64)).cuda()
    whole = [model[i].weight.detach().clone() for i in (0, 2)]
    handle = qt.fsdp.keep_encoded(model, qt.mxfp8())
    fully_shard(model, mesh=DeviceMesh.from_group(nccl, "cuda"))
    seen = []

    def look(m, args, w):
        expected = MXTensor.to_mx(w, torch.float8_e4m3fn, 32)
        assert m.weight.mx.qdata.is_cuda
        assert torch.equal(m.weight.mx.qdata.view(torch.uint8), expected.qdata.view(torch.uint8))
        assert torch.equal(m.weight.mx.scale.view(torch.uint8), expected.scale.view(torch.uint8))
        seen.append(True)

    for i, w in zip((0, 2), whole):
        model[i].register_forward_pre_hook(lambda m, a, w=w: look(m, a, w))
    y = model(torch.randn(8, 64, device="cuda"))
    y.float().sum().backward()
    assert len(seen) == 2 and model[0].weight.grad is not None
    assert handle.stats()["calls"] >= 2
    qt.synchronize()


@pytest.mark.skipif(not dist.is_nccl_available(), reason="torch without NCCL")
def test_keep_encoded_on_cuda_gathers_to_mx_of_the_weight():
    run_ranks(1, _keep_encoded_on_cuda, timeout=180)
