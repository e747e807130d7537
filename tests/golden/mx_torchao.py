#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes tests/golden/mx_torchao.txt: torchao's MX reference conversion of fixed inputs.

For every element format (e4m3, e5m2, e3m2, e2m3, e2m1), input class (normal, subnormal, zero,
max-magnitude, ties, inf/NaN, random bits) and input dtype (float32, bfloat16), torchao's `to_mx`
(block 32, FLOOR scale: the OCP spec's round-to-nearest conversion) gives the E8M0 scales and the
element codes, and its `to_dtype` the values they decode to in float32. tests/test_microscaling.cpp
encodes the same inputs with qsdp's mx policies and compares all three bit for bit.

    python3 -m venv build/torchao-venv && build/torchao-venv/bin/pip install torch torchao numpy
    build/torchao-venv/bin/python tests/golden/mx_torchao.py > tests/golden/mx_torchao.txt

Lines: `input <class> <dtype> count <n> <hex>`, then `<format> <class> <dtype> scales|codes|decoded
<hex>` for each format; inputs and decoded values as little-endian float32 bits (bfloat16 inputs
widened to float32), scales one byte per block, codes one byte per element (its bits in the low
bits).
"""
import sys

import numpy as np
import torch
import torchao
from torchao.prototype.mx_formats import constants
from torchao.prototype.mx_formats.kernels import unpack_uint4
from torchao.prototype.mx_formats.mx_tensor import ScaleCalculationMode, to_dtype, to_mx

BLOCK = 32
BLOCKS = 8  # per class: 256 values
FORMATS = [
    ("e4m3", torch.float8_e4m3fn),
    ("e5m2", torch.float8_e5m2),
    ("e3m2", constants.DTYPE_FP6_E3M2),
    ("e2m3", constants.DTYPE_FP6_E2M3),
    ("e2m1", torch.float4_e2m1fn_x2),
]


def from_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def input_classes(rng):
    n = BLOCK * BLOCKS
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0).astype(np.float32)
    # Normal values, each block at its own power of two.
    normal = (rng.standard_normal(n) * np.repeat(2.0 ** rng.integers(-30, 30, BLOCKS), BLOCK))
    # float32 subnormals, some blocks with small normals beside them.
    subnormal = from_bits(rng.integers(1, 0x800000, n)) * sign
    subnormal[: n // 2 : 3] = from_bits(rng.integers(0x800000, 0x1000000, len(subnormal[: n // 2 : 3])))
    # Zeros of both signs, one block with a single nonzero value.
    zero = np.zeros(n, dtype=np.float32)
    zero[BLOCK : 2 * BLOCK] = -0.0
    zero[2 * BLOCK : 3 * BLOCK : 2] = -0.0
    zero[3 * BLOCK + 7] = 3.5
    # Largest magnitudes: next to FLT_MAX, and abs_max exactly the element maxima times powers of two.
    top = from_bits(rng.integers(0x7F000000, 0x7F800000, n)) * sign
    maxima = np.array([448.0, 57344.0, 28.0, 7.5, 6.0], dtype=np.float32)
    for b in range(BLOCKS // 2, BLOCKS):
        top[b * BLOCK] = maxima[b % 5] * np.float32(2.0 ** rng.integers(-20, 20))
        top[b * BLOCK + 1 : (b + 1) * BLOCK] *= np.float32(2.0 ** -120)
    # Few significant bits: many values land exactly between two elements.
    ties = (rng.integers(-64, 65, n) * np.repeat(2.0 ** rng.integers(-8, 8, BLOCKS), BLOCK)) / 16.0
    # Non-finite values in some blocks (torchao gives them the NaN scale 0xFF).
    nonfinite = rng.standard_normal(n).astype(np.float32)
    nonfinite[5] = np.nan
    nonfinite[BLOCK + 9] = np.inf
    nonfinite[2 * BLOCK + 30] = -np.inf
    # Any finite bit pattern.
    bits = rng.integers(0, 0x7F800000, n) | np.where(rng.random(n) < 0.5, 0x80000000, 0)
    random_bits = from_bits(bits)
    return [
        ("normal", normal),
        ("subnormal", subnormal),
        ("zero", zero),
        ("max", top),
        ("ties", ties),
        ("nonfinite", nonfinite),
        ("random", random_bits),
    ]


def hexbytes(a):
    return np.ascontiguousarray(a).tobytes().hex()


def element_codes(data_lp, elem_dtype):
    if elem_dtype == torch.float4_e2m1fn_x2:
        return unpack_uint4(data_lp.view(torch.uint8)).reshape(-1).numpy().astype(np.uint8)
    return data_lp.view(torch.uint8).reshape(-1).numpy()


def main():
    rng = np.random.default_rng(20261206)
    out = sys.stdout
    out.write(f"# torchao {torchao.__version__}, torch {torch.__version__}: tests/golden/mx_torchao.py\n")
    for cls, values in input_classes(rng):
        values = np.asarray(values, dtype=np.float32)
        for dtype_name, dtype in (("float", torch.float32), ("bf16", torch.bfloat16)):
            x = torch.from_numpy(values.copy()).to(dtype)
            widened = x.to(torch.float32).numpy()
            out.write(f"input {cls} {dtype_name} count {len(values)} {hexbytes(widened.view(np.uint32))}\n")
            for name, elem_dtype in FORMATS:
                scale, data_lp = to_mx(x, elem_dtype, BLOCK, ScaleCalculationMode.FLOOR)
                decoded = to_dtype(data_lp, scale, elem_dtype, BLOCK, torch.float32)
                head = f"{name} {cls} {dtype_name}"
                out.write(f"{head} scales {hexbytes(scale.view(torch.uint8).numpy())}\n")
                out.write(f"{head} codes {hexbytes(element_codes(data_lp, elem_dtype))}\n")
                out.write(f"{head} decoded {hexbytes(decoded.numpy().view(np.uint32))}\n")


if __name__ == "__main__":
    main()
