# SPDX-License-Identifier: Apache-2.0
"""examples/torch_fsdp2/nanogpt.py's GPT (weight tying, AdamW parameter groups, gradient
clipping) under FSDP2 on 4 gloo processes, in fp32, with a bf16 MixedPrecisionPolicy and with
gradient accumulation over micro-batches (set_requires_gradient_sync): with
qt.identity() policies qt.fsdp.compress gives plain FSDP2's training loss at every step, and W8G8
tracks it closely at every step, not only at the end."""
import argparse
import importlib.util
import pathlib

import pytest
import torch

from conftest import run_ranks

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "torch_fsdp2" / "nanogpt.py"


def _example():
    spec = importlib.util.spec_from_file_location("torch_fsdp2_train", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text(n=60_000):
    """Tokens from a fixed random bigram table: learnable structure without a data file."""
    g = torch.Generator().manual_seed(5)
    table = torch.softmax(3 * torch.randn(96, 96, generator=g), dim=1)
    tokens = torch.empty(n, dtype=torch.long)
    tokens[0] = 0
    choices = torch.multinomial(table, n, replacement=True, generator=g)  # [96, n]
    for i in range(1, n):
        tokens[i] = choices[tokens[i - 1], i]
    split = int(n * 0.9)
    return tokens[:split], tokens[split:]


def _args(mixed, accumulate):
    return argparse.Namespace(steps=20, batch=4, accumulate=accumulate, context=32, width=64,
                              layers=2, heads=2, dropout=0.0, lr=3e-3, warmup=None,
                              weight_decay=0.1, seed=3, eval_every=10, val_windows=8, mixed=mixed)


def _tracks(rank, world, mixed, accumulate):
    example = _example()
    data = _text()
    args = _args(mixed, accumulate)
    quiet = lambda *a, **k: None  # noqa: E731
    plain = example.train(args, "fp32", data, rank, world, quiet, "")[0]
    identity = example.train(args, "identity", data, rank, world, quiet, "")[0]
    w8g8 = example.train(args, "w8g8", data, rank, world, quiet, "")[0]
    assert len(plain) == len(identity) == len(w8g8) == args.steps
    # Identity moves the values as they are and sums them in fp32 in rank order: the same losses
    # as FSDP2's own collectives, up to the order of a reduction.
    for step, (a, b) in enumerate(zip(identity, plain), start=1):
        assert abs(a - b) <= 1e-5 * abs(b), (mixed, step, a, b)
    # 8 bits: close at every step. A defect in scale or accumulation through the hooks' buffers
    # (a sum for an average, gradients added twice, a stale buffer) breaks this within a few steps.
    for step, (a, b) in enumerate(zip(w8g8, plain), start=1):
        assert abs(a - b) <= 0.02 * abs(b), (mixed, step, a, b)
    # And training happened: the loss fell.
    assert plain[-1] < 0.9 * plain[0]


@pytest.mark.parametrize("mixed,accumulate", [("fp32", 1), ("bf16", 1), ("fp32", 2)])
def test_identity_matches_fsdp2_and_w8g8_tracks_it_at_every_step(mixed, accumulate):
    run_ranks(4, _tracks, mixed, accumulate, timeout=300)
