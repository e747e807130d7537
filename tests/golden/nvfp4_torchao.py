#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes tests/golden/nvfp4_torchao.txt: torchao's NVFP4 reference conversion of fixed inputs.

The inputs are mx_torchao.py's (the same seven classes, float32 and bfloat16), plus a class whose
blocks sit at every power of two between the tensor's largest magnitude and 2^-24 of it (block
scales across E4M3's range, including the clamp at its smallest normal). For each, torchao's
`NVFP4Tensor.to_nvfp4` (block 16, per-tensor scale `per_tensor_amax_to_scale(amax)`, amax the
largest finite magnitude) gives the tensor scale, the E4M3 block scales and the E2M1 codes, and its
`dequantize` the values they decode to in float32. tests/test_microscaling.cpp encodes the same
inputs with qsdp::nvfp4 and compares all four bit for bit.

    python3 -m venv build/torchao-venv && build/torchao-venv/bin/pip install torch torchao numpy
    build/torchao-venv/bin/python tests/golden/nvfp4_torchao.py > tests/golden/nvfp4_torchao.txt

Lines: `input <class> <dtype> count <n> <hex>`, then `nvfp4 <class> <dtype> tensor_scale|scales|
codes|decoded <hex>`; inputs, the tensor scale and decoded values as little-endian float32 bits
(bfloat16 inputs widened to float32), scales one byte per block, codes one byte per element.
"""
import sys

import numpy as np
import torch
import torchao
from torchao.prototype.mx_formats.kernels import unpack_uint4
from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

from mx_torchao import hexbytes, input_classes

BLOCK = 16


def spread_blocks(rng):
    """Blocks of normal values at 2^0, 2^-1, ..., 2^-24 of the largest (the first block's)."""
    n = 512
    values = rng.standard_normal(n)
    for b in range(n // BLOCK):
        values[b * BLOCK : (b + 1) * BLOCK] *= 2.0 ** -(b % 25)
    return values


def main():
    rng = np.random.default_rng(20261207)
    out = sys.stdout
    out.write(f"# torchao {torchao.__version__}, torch {torch.__version__}: tests/golden/nvfp4_torchao.py\n")
    classes = input_classes(np.random.default_rng(20261206)) + [("spread", spread_blocks(rng))]
    for cls, values in classes:
        values = np.asarray(values, dtype=np.float32)
        for dtype_name, dtype in (("float", torch.float32), ("bf16", torch.bfloat16)):
            x = torch.from_numpy(values.copy()).to(dtype)
            widened = x.to(torch.float32)
            finite = widened[torch.isfinite(widened)]
            amax = finite.abs().max() if finite.numel() else torch.tensor(0.0)
            scale = per_tensor_amax_to_scale(amax)
            t = NVFP4Tensor.to_nvfp4(x.reshape(1, -1), BLOCK, per_tensor_scale=scale)
            decoded = t.dequantize(torch.float32).reshape(-1)
            codes = unpack_uint4(t.qdata.contiguous().view(torch.uint8)).reshape(-1)
            out.write(f"input {cls} {dtype_name} count {len(values)} {hexbytes(widened.numpy().view(np.uint32))}\n")
            head = f"nvfp4 {cls} {dtype_name}"
            out.write(f"{head} tensor_scale {hexbytes(scale.reshape(1).numpy().view(np.uint32))}\n")
            out.write(f"{head} scales {hexbytes(t.scale.view(torch.uint8).reshape(-1).numpy())}\n")
            out.write(f"{head} codes {hexbytes(codes.numpy().astype(np.uint8))}\n")
            out.write(f"{head} decoded {hexbytes(decoded.numpy().view(np.uint32))}\n")


if __name__ == "__main__":
    main()
