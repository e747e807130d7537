# SPDX-License-Identifier: Apache-2.0
"""qsdp.torch's block-scaled float policies against the installed torchao, live: qt.mxfp8, qt.mxfp6,
qt.mxfp4 and qt.nvfp4 with round-to-nearest decode what torchao's MXTensor.to_mx and
NVFP4Tensor.to_nvfp4 dequantize to, bit for bit, on float32 and bfloat16 inputs of every finite
class (normal at many scales, subnormal, zero, the largest magnitudes, random bits), and
qt.all_gather_encoded hands over the MXTensor that to_mx makes of the gathered values. Skipped
where torchao is not installed. (tests/golden/*_torchao.txt pin one torchao run, non-finite inputs
included, for the C++ tests, which also compare the scale and element bytes.)"""
import pytest
import torch
import torch.distributed as dist

import qsdp.torch as qt
from conftest import run_ranks

mx_formats = pytest.importorskip("torchao.prototype.mx_formats")
from torchao.prototype.mx_formats import constants  # noqa: E402
from torchao.prototype.mx_formats.mx_tensor import MXTensor  # noqa: E402
from torchao.prototype.mx_formats.nvfp4_tensor import (  # noqa: E402
    NVFP4Tensor, per_tensor_amax_to_scale)

MX = [
    (lambda: qt.mxfp8("e4m3"), torch.float8_e4m3fn),
    (lambda: qt.mxfp8("e5m2"), torch.float8_e5m2),
    (lambda: qt.mxfp6("e3m2"), constants.DTYPE_FP6_E3M2),
    (lambda: qt.mxfp6("e2m3"), constants.DTYPE_FP6_E2M3),
    (lambda: qt.mxfp4(), torch.float4_e2m1fn_x2),
]
ROWS, COLUMNS = 16, 256  # 128 MX blocks, 256 NVFP4 blocks per class


def input_classes(dtype):
    """Finite inputs of every class, one (ROWS, COLUMNS) tensor each, in dtype."""
    g = torch.Generator().manual_seed(40)
    n = ROWS * COLUMNS

    def from_bits(lo, hi, size=n):  # float32 values of bit patterns drawn from [lo, hi)
        return torch.randint(lo, hi, (size,), generator=g, dtype=torch.int64).to(
            torch.int32).view(torch.float32)

    sign = torch.randint(0, 2, (n,), generator=g).float() * 2 - 1
    scales = 2.0 ** torch.randint(-40, 40, (ROWS,), generator=g).float()
    normal = torch.randn(n, generator=g) * scales.repeat_interleave(COLUMNS)
    # float32 subnormals, each block with one value from 2^-110 to 2^-100 that sets a normal
    # scale for every format (a block of nothing larger gets E8M0's smallest scale, 2^-127, where
    # torchao 0.18 encodes at 2^-126 and decodes at 2^-127; the C++ tests cover that case).
    subnormal = from_bits(1, 0x800000) * sign
    subnormal[::16] = 2.0 ** (torch.rand(n // 16, generator=g) * 10 - 110)
    zero = torch.zeros(n)
    zero[COLUMNS: 2 * COLUMNS] = -0.0
    zero[3 * COLUMNS + 7] = 3.5
    top = from_bits(0x7E000000, 0x7F7F8000) * sign  # bfloat16 rounds these finite
    random_bits = from_bits(0, 0x7F800000) * sign  # every exponent but the top one: finite
    classes = {"normal": normal, "subnormal": subnormal, "zero": zero, "max-magnitude": top,
               "random-bits": random_bits}
    out = {}
    for name, x in classes.items():
        x = x.to(dtype).reshape(ROWS, COLUMNS)
        assert torch.isfinite(x).all(), name
        out[name] = x
    return out


def qsdp_decoded(q, x):
    y = torch.empty_like(x)
    qt.decode(q, qt.encode(q, x), y)
    return y


def same_bits(a, b):
    """Equal bit patterns, -0.0 and 0.0 told apart; the count of values that differ."""
    ints = {torch.float32: torch.int32, torch.bfloat16: torch.int16}[a.dtype]
    return int((a.contiguous().view(ints) != b.contiguous().view(ints)).sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("make,elem_dtype", MX, ids=["e4m3", "e5m2", "e3m2", "e2m3", "e2m1"])
def test_mx_nearest_decodes_as_torchao(make, elem_dtype, dtype):
    q = make()
    assert q.bucket_size == 32 and q.rounding == "nearest"
    for name, x in input_classes(dtype).items():
        reference = MXTensor.to_mx(x, elem_dtype, block_size=32).dequantize(dtype)
        differ = same_bits(qsdp_decoded(q, x), reference)
        assert differ == 0, f"{q.name} {dtype} {name}: {differ} of {x.numel()} values differ"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nvfp4_nearest_decodes_as_torchao(dtype):
    q = qt.nvfp4()
    assert q.bucket_size == 16 and q.name == "nvfp4"
    compared = 0
    for name, x in input_classes(dtype).items():
        amax = x.float().abs().max()
        if amax / 2688 < 2.0**-120:  # torchao's 1 / scale overflows; qsdp keeps 2^-120 instead
            continue
        compared += 1
        t = NVFP4Tensor.to_nvfp4(x, 16, per_tensor_scale=per_tensor_amax_to_scale(amax))
        reference = t.dequantize(dtype)
        differ = same_bits(qsdp_decoded(q, x), reference)
        assert differ == 0, f"nvfp4 {dtype} {name}: {differ} of {x.numel()} values differ"
    assert compared == 5


@pytest.mark.parametrize("make", [lambda: qt.mxfp8("e4m3", "stochastic", seed=5),
                                  lambda: qt.mxfp4("stochastic", seed=5),
                                  lambda: qt.nvfp4("stochastic", seed=5)],
                         ids=["mxfp8", "mxfp4", "nvfp4"])
def test_stochastic_rounding_is_unbiased(make):
    """The stochastic policies (which torchao does not offer): the mean over many calls approaches
    the input, each call drawing afresh."""
    q = make()
    torch.manual_seed(3)
    x = torch.randn(ROWS, COLUMNS)
    total = torch.zeros_like(x)
    calls = 200
    for _ in range(calls):
        total += qsdp_decoded(q, x)
    mean_error = float((total / calls - x).norm() / x.norm())
    single_error = float((qsdp_decoded(q, x) - x).norm() / x.norm())
    # Independent draws: the mean's error shrinks as 1 / sqrt(calls), 0.07 of one call's here.
    assert mean_error < 0.15 * single_error, (q.name, mean_error, single_error)
    assert q.next_call == calls + 1


def _gathered_encoded_is_torchao_to_mx(rank, world):
    rows, columns = 6, 96
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator().manual_seed(rank)
        x = (torch.randn(rows, columns, generator=g) * 2.0 ** (4 * rank - 6)).to(dtype)
        x[1, 5] = float("nan")  # its block's scale is NaN in both
        full = torch.empty(world * rows, columns, dtype=dtype)
        dist.all_gather_into_tensor(full, x)
        for make, elem_dtype in MX:
            q = make()
            got = qt.all_gather_encoded(x, q)
            want = MXTensor.to_mx(full, elem_dtype, block_size=32)
            assert isinstance(got, MXTensor) and got.shape == full.shape, (q.name, got.shape)
            assert got.qdata.dtype == want.qdata.dtype and got.qdata.shape == want.qdata.shape
            assert got.scale.dtype == want.scale.dtype and got.scale.shape == want.scale.shape
            assert torch.equal(got.scale.view(torch.uint8), want.scale.view(torch.uint8)), q.name
            # The NaN block: scale 0xFF in both, so all its values decode to NaN; qsdp's elements
            # are 0 there, torchao's keep the signs and a NaN element. Every other byte is equal.
            nan_blocks = got.scale.view(torch.uint8) == 0xFF
            per_block = got.qdata.shape[-1] // got.scale.shape[-1]
            finite = ~nan_blocks.repeat_interleave(per_block, dim=-1)
            assert torch.equal(got.qdata.view(torch.uint8)[finite],
                               want.qdata.view(torch.uint8)[finite]), q.name
            assert int((~finite).sum()) == per_block * world, q.name  # one NaN block per rank
            # and what a decoding all-gather gives, where the scale is finite
            decoded = torch.empty_like(full)
            qt.all_gather_into_tensor(decoded, x, q)
            values = got.dequantize(dtype)
            assert torch.equal(torch.isnan(values), torch.isnan(decoded)), q.name
            finite = ~torch.isnan(decoded)
            assert torch.equal(values[finite], decoded[finite]), q.name
        elements, scales = qt.all_gather_encoded(x, qt.mxfp4(), as_mx_tensor=False)
        assert elements.dtype == torch.uint8 and elements.numel() == world * rows * columns // 2
        assert scales.shape == (world * rows, columns // 32)
        # cuBLAS's tiled scales, as torchao swizzles them
        tiled = qt.all_gather_encoded(x, qt.mxfp8(), tiled_scales=True)
        want = MXTensor.to_mx(full, torch.float8_e4m3fn, block_size=32, is_swizzled_scales=True)
        assert tiled.is_swizzled_scales and tiled.scale.shape == want.scale.shape
        assert torch.equal(tiled.scale.view(torch.uint8), want.scale.view(torch.uint8))
        plain = qt.all_gather_encoded(x, qt.mxfp8())
        assert torch.equal(tiled.qdata.view(torch.uint8), plain.qdata.view(torch.uint8))
    with pytest.raises(ValueError, match="expected its last dimension a multiple of the "
                                         "policy's bucket_size 32"):
        qt.all_gather_encoded(torch.zeros(4, 40), qt.mxfp8())
    with pytest.raises(ValueError, match="expected an MX policy"):
        qt.all_gather_encoded(torch.zeros(4, 32), qt.nvfp4())
    with pytest.raises(ValueError, match="expected an MX policy"):
        qt.all_gather_encoded(torch.zeros(4, 32), qt.hadamard(qt.mxfp4()))


def test_all_gather_encoded_is_torchao_to_mx_of_the_gathered_values():
    run_ranks(3, _gathered_encoded_is_torchao_to_mx)
