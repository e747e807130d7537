# SPDX-License-Identifier: Apache-2.0
"""qsdp.torch's policies and codec on CPU tensors: the C++ golden packets decoded (and, for the
policies that draw nothing, encoded) byte for byte, error bounds, and the errors bad input raises."""
import math
import pathlib
import re

import pytest
import torch

import qsdp
import qsdp.torch as qt

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden" / "packets.txt"
DTYPES = {"float": torch.float32, "bf16": torch.bfloat16, "half": torch.float16}


def _mix(v):
    v ^= v >> 16
    v = (v * 0x7FEB352D) & 0xFFFFFFFF
    v ^= v >> 15
    v = (v * 0x846CA68B) & 0xFFFFFFFF
    v ^= v >> 16
    return v


def golden_inputs(count, bucket):
    """tests/test_golden_packets.cpp's golden_inputs (every step exact in float32)."""
    x = []
    for i in range(count):
        h = _mix((i * 2654435761 + 12345) & 0xFFFFFFFF)
        unit = (h >> 8) * 2.0**-24
        b = i // bucket
        if b == 0:
            x.append((unit - 0.5) * float(1 << (h % 12)))
        elif b == 1:
            x.append(0.375)
        else:
            x.append(4.0 * unit - 2.0)
    if count > 2 * bucket + 3:
        x[2 * bucket + 3] = -0.0
    if count > 3 * bucket + 1:
        x[3 * bucket + 1] = math.nan
    if count > 4 * bucket + 2:
        x[4 * bucket + 2] = -math.inf
    return torch.tensor(x, dtype=torch.float32)


def policy_from(name, bucket):
    rotated = name.startswith("hadamard<")
    plain = name[len("hadamard<"):-1] if rotated else name
    if plain == "identity":
        return qt.identity()
    block_scaled = BLOCK_SCALED.fullmatch(plain)
    if block_scaled:
        family, element, rounding = block_scaled.groups()
        args = {"rounding": "stochastic" if rounding else "nearest", "bucket_size": bucket,
                "seed": 7}
        if element:
            args["element"] = element
        q = getattr(qt, family)(**args)
        return qt.hadamard(q, seed=7) if rotated else q
    family, bits = re.fullmatch(r"(\w+)<(\d)>", plain).groups()
    make = getattr(qt, family)
    args = {"bits": int(bits), "bucket_size": bucket}
    if family in ("stochastic", "random_shift"):
        args["seed"] = 7
    q = make(**args)
    return qt.hadamard(q, seed=7) if rotated else q


def golden_entries():
    entries = {}
    for line in GOLDEN.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        policy, dtype, _, count, _, bucket, kind, data = line.split()
        if dtype in DTYPES:
            entries.setdefault((policy, dtype, int(count), int(bucket)), {})[kind] = data
    return entries


def hex_of(t):
    return bytes(t.contiguous().view(torch.uint8).tolist()).hex()


# A block-scaled float policy's C++ name: family, element format, stochastic rounding.
BLOCK_SCALED = re.compile(r"(mxfp\d|nvfp4)(?:<(e\dm\d)?(?:, )?(stochastic)?>)?")


def test_golden_packets_decode_byte_for_byte():
    entries = golden_entries()
    assert len(entries) > 100  # every policy, width and type of the C++ golden file
    decoded = 0
    for (name, dtype, count, bucket), data in entries.items():
        decoded += 1
        q = policy_from(name, bucket)
        packet = torch.tensor(list(bytes.fromhex(data["packet"])), dtype=torch.uint8)
        out = torch.empty(count, dtype=DTYPES[dtype])
        qt.decode(q, packet, out)
        assert hex_of(out) == data["decoded"], (name, dtype, count, bucket)
    # 31 integer policies and identity in 2 cases, 5 rotated ones in 1; 4 block-scaled float
    # policies in 2, 1 rotated in 1; for each dtype here.
    assert decoded == (32 * 2 + 5 + 4 * 2 + 1) * len(DTYPES)


def test_deterministic_policies_encode_the_golden_packets():
    checked = 0
    for (name, dtype, count, bucket), data in golden_entries().items():
        if not re.fullmatch(r"(uniform|symmetric)<\d>|identity|mxfp8<e4m3>|nvfp4", name):
            continue
        x = golden_inputs(count, bucket).to(DTYPES[dtype])
        if dtype != "float":  # the C++ test's NaN (torch's conversion may set other payload bits)
            x.view(torch.int16)[torch.isnan(x)] = 0x7FC0 if dtype == "bf16" else 0x7E00
        assert hex_of(qt.encode(policy_from(name, bucket), x)) == data["packet"], (name, dtype)
        checked += 1
    assert checked >= 2 * 3 * 19


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("family,bits", [(f, b) for f in ("uniform", "stochastic", "symmetric")
                                         for b in range(1, 9)] +
                         [("random_shift", b) for b in range(2, 9)])
def test_round_trip_within_the_policy_bound(family, bits, dtype):
    torch.manual_seed(bits)
    bucket = 256
    x = torch.randn(3 * bucket + 77).to(dtype)
    q = getattr(qt, family)(bits=bits, bucket_size=bucket)
    packet = qt.encode(q, x)
    assert packet.dtype == torch.uint8 and packet.dim() == 1
    assert packet.numel() == qt.compressed_size(q, x.numel(), dtype=dtype)
    y = torch.empty_like(x)
    assert qt.decode(q, packet, y) is y
    xf, yf = x.float(), y.float()
    levels = 2**bits - 1
    for start in range(0, x.numel(), bucket):
        xb, yb = xf[start:start + bucket], yf[start:start + bucket]
        spread = float(xb.max() - xb.min())
        amax = float(xb.abs().max())
        if family == "uniform":  # qsdp/quantizers.hpp's bounds
            bound = spread / levels / 2
        elif family == "stochastic":
            bound = spread / levels
        elif family == "random_shift":
            bound = spread / (2**bits - 2) / 2
        elif bits == 1:  # symmetric<1>: sign * abs_max
            bound = amax
        else:
            bound = amax / (2**(bits - 1) - 1) / 2
        # plus the rounding of the element type (the decoded value is stored as dtype)
        slack = 1e-6 * amax if dtype == torch.float32 else 2**-7 * amax
        err = float((xb - yb).abs().max())
        assert err <= bound + slack, (family, bits, dtype, start, err, bound)


def test_identity_is_bit_exact_and_nonfinite_values_stay_nan():
    x = torch.randn(1000)
    y = torch.empty_like(x)
    qt.decode(qt.identity(), qt.encode(qt.identity(), x), y)
    assert torch.equal(x, y)
    x[500] = math.inf
    q = qt.stochastic(bits=4, bucket_size=100)
    qt.decode(q, qt.encode(q, x), y)
    assert torch.isnan(y[500:600]).all() and torch.isfinite(y[:500]).all()


def test_calls_draw_fresh_numbers_reproducibly():
    x = torch.randn(4096)
    a, b = qt.stochastic(bits=2, seed=5), qt.stochastic(bits=2, seed=5)
    first = qt.encode(a, x)
    assert a.next_call == 1
    assert not torch.equal(first, qt.encode(a, x))  # the second call draws other numbers
    assert torch.equal(first, qt.encode(b, x))  # the same seed and call: the same packet


def test_hadamard_lowers_the_error_on_data_with_outliers():
    torch.manual_seed(0)
    x = torch.randn(1 << 16)
    x[torch.randint(0, x.numel(), (64,))] *= 100.0  # one outlier in a thousand
    def rel_error(q):
        y = torch.empty_like(x)
        qt.decode(q, qt.encode(q, x), y)
        return float((y - x).norm() / x.norm())
    plain = rel_error(qt.stochastic(bits=4, bucket_size=256, seed=3))
    rotated = rel_error(qt.hadamard(qt.stochastic(bits=4, bucket_size=256, seed=3)))
    assert rotated * 3 < plain, (plain, rotated)


def test_bad_arguments_name_what_is_wrong():
    with pytest.raises(ValueError, match="bits is 9; expected 1..8"):
        qt.stochastic(bits=9)
    with pytest.raises(ValueError, match="random_shift: bits is 1; expected 2..8"):
        qt.random_shift(bits=1)
    with pytest.raises(TypeError, match="bits is 4.0; expected an integer"):
        qt.uniform(bits=4.0)
    with pytest.raises(ValueError, match="bucket_size is 0"):
        qt.uniform(bits=4, bucket_size=0)
    with pytest.raises(qsdp.Error, match="bucket_size is 100; hadamard<stochastic> needs a power"):
        qt.hadamard(qt.stochastic(bits=4, bucket_size=100))
    with pytest.raises(ValueError, match="rotated already"):
        qt.hadamard(qt.hadamard(qt.stochastic(bits=4, bucket_size=256)))
    q = qt.stochastic(bits=8)
    with pytest.raises(TypeError, match="x has dtype torch.int32"):
        qt.encode(q, torch.zeros(10, dtype=torch.int32))
    with pytest.raises(ValueError, match="x is not contiguous"):
        qt.encode(q, torch.zeros(10, 10).t())
    with pytest.raises(TypeError, match="policy is 8"):
        qt.encode(8, torch.zeros(10))
    packet = qt.encode(q, torch.zeros(100))
    with pytest.raises(ValueError, match="packet holds .* bytes; stochastic<8> packs 50 values"):
        qt.decode(q, packet, torch.empty(50))
    with pytest.raises(qsdp.Error, match="packet holds 100 values, decoder was asked for 99"):
        qt.decode(q, packet, torch.empty(99))  # a packet of the same size: its header says so
    with pytest.raises(qsdp.Error, match="encoded by quantizer 'stochastic'.*decoder uses 'uniform'"):
        qt.decode(qt.uniform(bits=8), packet, torch.empty(100))
    with pytest.raises(TypeError, match="expected a 1-D torch.uint8 tensor"):
        qt.decode(q, packet.float(), torch.empty(100))
    assert issubclass(qsdp.Error, RuntimeError)


def test_block_scaled_policies_name_themselves_and_their_bad_arguments():
    made = [qt.mxfp8(), qt.mxfp8("e5m2", "stochastic", seed=3), qt.mxfp6(), qt.mxfp6("e3m2"),
            qt.mxfp4(bucket_size=64), qt.nvfp4("stochastic"),
            qt.hadamard(qt.nvfp4("stochastic", seed=4)), qt.hadamard(qt.mxfp4(), seed=2)]
    assert [q.name for q in made] == [
        "mxfp8<e4m3>", "mxfp8<e5m2, stochastic>", "mxfp6<e2m3>", "mxfp6<e3m2>", "mxfp4",
        "nvfp4<stochastic>", "hadamard<nvfp4<stochastic>>", "hadamard<mxfp4>"]
    assert [repr(q) for q in made[:2] + made[5:7]] == [
        "qt.mxfp8(element='e4m3', rounding='nearest', bucket_size=32)",
        "qt.mxfp8(element='e5m2', rounding='stochastic', bucket_size=32, seed=3)",
        "qt.nvfp4(rounding='stochastic', bucket_size=16, seed=0)",
        "qt.hadamard(qt.nvfp4(rounding='stochastic', bucket_size=16, seed=4))"]
    assert [(q.bits, q.bucket_size, q.element) for q in made[2:6]] == [
        (6, 32, "e2m3"), (6, 32, "e3m2"), (4, 64, "e2m1"), (4, 16, "e2m1")]
    # 32 elements and one scale byte per block, the 16-byte tensor record and the frame beside.
    assert qt.compressed_size(qt.mxfp8(), 32 * 1000) - qt.compressed_size(qt.mxfp8(), 0) >= 33000
    with pytest.raises(ValueError, match="mxfp8: element is 'e2m1'; expected 'e4m3' or 'e5m2'"):
        qt.mxfp8("e2m1")
    with pytest.raises(ValueError, match="mxfp4: rounding is 'up'; expected 'nearest' or"):
        qt.mxfp4(rounding="up")
    with pytest.raises(ValueError, match="nvfp4: bucket_size is 0"):
        qt.nvfp4(bucket_size=0)
    with pytest.raises(qsdp.Error, match="bucket_size is 48; hadamard<mxfp4> needs a power"):
        qt.hadamard(qt.mxfp4(bucket_size=48))
    packet = qt.encode(qt.mxfp8(), torch.ones(64))
    with pytest.raises(qsdp.Error, match="encoded by quantizer 'mxfp8<e4m3>'.*decoder uses "
                                         "'mxfp8<e5m2>'"):
        qt.decode(qt.mxfp8("e5m2"), packet, torch.empty(64))


def test_block_scaled_nan_and_inf_decode_to_nan_in_their_blocks():
    for q in (qt.mxfp8(), qt.mxfp4("stochastic"), qt.nvfp4()):
        x = torch.linspace(-3, 3, 96)
        x[5], x[40] = float("nan"), float("inf")
        y = torch.empty_like(x)
        qt.decode(q, qt.encode(q, x), y)
        block = q.bucket_size
        bad = {5 // block, 40 // block}
        for b in range(96 // block):
            part = y[b * block:(b + 1) * block]
            if b in bad:
                assert torch.isnan(part).all(), (q.name, b)
            else:
                assert torch.isfinite(part).all(), (q.name, b)


def test_tensors_elsewhere_than_cpu_and_cuda_are_named():
    q = qt.stochastic(bits=8)
    with pytest.raises(ValueError, match="x is on meta; expected a CPU or CUDA tensor"):
        qt.encode(q, torch.empty(10, device="meta"))
    with pytest.raises(ValueError, match="packet is on meta; expected a CPU or CUDA tensor"):
        qt.decode(q, torch.empty(qt.compressed_size(q, 10), dtype=torch.uint8, device="meta"),
                  torch.empty(10))


def test_a_missing_cuda_extension_says_why(monkeypatch):
    # What a CUDA tensor meets where nvcc was not found at install time (simulated: this test needs
    # no GPU, so the tensor that stands for a CUDA one is a meta tensor).
    monkeypatch.setattr(qt._ext, "cuda_extension",
                        "not built: no CUDA compiler (nvcc) was found when qsdp was installed")
    monkeypatch.setattr(qt, "_cuda_module", None)
    with pytest.raises(qsdp.Error, match=r"x is on meta, and this installation of qsdp has no CUDA "
                                         r"extension \(not built: no CUDA compiler.*reinstall"):
        qt._cuda(torch.empty(1, device="meta"), "x", "qsdp.torch.encode")
    assert qt.cuda_extension().startswith("not built")
    qt.synchronize()  # nothing to wait for: no error
