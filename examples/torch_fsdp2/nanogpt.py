#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A nanoGPT-style character-level GPT trained with PyTorch FSDP2 (fully_shard) on CPU processes over
gloo, with qsdp.torch compressing the all-gather of weights and the reduce-scatter of gradients
(qt.fsdp.compress), side by side with the uncompressed run of the same seed. Run it with torchrun:

    torchrun --standalone --nproc-per-node 4 examples/torch_fsdp2/nanogpt.py --compress w8g8

The model is nanoGPT's: token and position embeddings, pre-norm blocks (c_attn, c_proj; c_fc, GELU,
c_proj), a final LayerNorm and an lm_head whose weight is the token embedding's (weight tying);
N(0, 0.02) initial weights, the residual projections scaled by 1/sqrt(2 x layers). AdamW takes two
parameter groups, as nanoGPT's configure_optimizers builds them: weight decay on the matrices and
embeddings, none on biases and LayerNorm weights; betas (0.9, 0.95), a linear warmup then a cosine
decay to a tenth, gradients clipped to norm 1; --accumulate N micro-batches per step, reduced once
(FSDP2's set_requires_gradient_sync). FSDP2 shards every block and the root; --mixed bf16 adds a
MixedPrecisionPolicy (bf16 parameters, fp32 gradient reduction).

--compress picks what qt.fsdp.compress installs:
    fp32      FSDP's own collectives, uncompressed (no second run)
    identity  qsdp's collectives with qt.identity(): the same bytes as FSDP's, through qsdp's hooks
    w8g8      weights random_shift<8>, gradients stochastic<8> (bucket 1024)
    w4g4      weights random_shift<4>, gradients stochastic<4> (bucket 1024): QSDP's plain 4 bits
    w4g4d     weights as 4-bit differences (qt.DeltaGather, random_shift<4>, bucket 1024), gradients
              hadamard<stochastic<4>> (bucket 256): SDP4Bit's two ideas

Unless --compress is fp32 or --no-reference is given, the same model is first trained uncompressed
with the same seed (initial weights, data order, dropout), and every evaluation line shows both runs.
Rank 0 prints progress and, at the end, the bytes each collective sent against FSDP's own, the largest
relative difference of the training loss between the two runs over every step (and over the last
tenth of the steps), and one line
"final: run R steps S train T val V ref_train T0 ref_val V0 max_step_diff D ag_ratio A rs_ratio B
step_s M ref_step_s M0 collective_s C"
(M, M0: the median seconds of a training step, slowest rank, evaluation not counted; C: seconds per
step inside qsdp's collectives, codec and wire, mean over ranks). --csv writes both runs' losses at
every step (rank 0: step,train,ref_train and, at evaluations, val,ref_val).
"""
from __future__ import annotations

import argparse
import gc
import math
import pathlib
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import qsdp.torch as qt

# The text, the batches and the reductions over ranks are train.py's, beside this file.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train import batch, load_text, max_over_ranks, mean_over_ranks  # noqa: E402

RUNS = ("fp32", "identity", "w8g8", "w4g4", "w4g4d")


class CausalSelfAttention(torch.nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.c_attn = torch.nn.Linear(width, 3 * width)
        self.c_proj = torch.nn.Linear(width, width)
        self.resid_dropout = torch.nn.Dropout(dropout)

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = self.c_attn(x).split(w, dim=2)
        shape = (b, t, self.heads, w // self.heads)
        q, k, v = (y.view(shape).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, w)))


class MLP(torch.nn.Module):
    def __init__(self, width: int, dropout: float):
        super().__init__()
        self.c_fc = torch.nn.Linear(width, 4 * width)
        self.c_proj = torch.nn.Linear(4 * width, width)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, dropout)
        self.ln_2 = torch.nn.LayerNorm(width)
        self.mlp = MLP(width, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(torch.nn.Module):
    def __init__(self, vocab: int, context: int, width: int, layers: int, heads: int,
                 dropout: float):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, width)
        self.wpe = torch.nn.Embedding(context, width)
        self.drop = torch.nn.Dropout(dropout)
        self.h = torch.nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(width)
        self.lm_head = torch.nn.Linear(width, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying: one parameter, two uses
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                torch.nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02
                torch.nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, tokens):
        x = self.drop(self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1])))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def optimizer(model, lr: float, weight_decay: float):
    """AdamW over nanoGPT's two parameter groups: decay for tensors of 2 or more dimensions
    (matrices, embeddings), none for the rest (biases, LayerNorm weights)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


def learning_rate(step: int, args) -> float:
    """Linear warmup over --warmup steps, then a cosine decay to a tenth of --lr at the last step
    (nanoGPT's)."""
    warmup = max(1, args.warmup if args.warmup is not None else args.steps // 10)
    if step < warmup:
        return args.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, args.steps - warmup)
    return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(progress, 1.0))))


@torch.no_grad()
def validation_loss(model, windows_x, windows_y, rank, world):
    """The mean loss over the fixed validation windows, each rank evaluating its share."""
    model.eval()
    mine = range(rank, len(windows_x), world)
    total = 0.0
    for i in mine:
        logits = model(windows_x[i:i + 1])
        total += float(F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                                       windows_y[i].view(-1)))
    model.train()
    t = torch.tensor([total, len(mine)], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t[0] / t[1])


def compress(model, run: str):
    """What --compress installs (None for fp32)."""
    if run == "identity":
        return qt.fsdp.compress(model, weights=qt.identity(), grads=qt.identity())
    if run == "w8g8":
        return qt.fsdp.compress(model, weights=qt.random_shift(bits=8, seed=11),
                                grads=qt.stochastic(bits=8, seed=12))
    if run == "w4g4":
        return qt.fsdp.compress(model, weights=qt.random_shift(bits=4, seed=11),
                                grads=qt.stochastic(bits=4, seed=12))
    if run == "w4g4d":
        return qt.fsdp.compress(
            model, weights=qt.random_shift(bits=4, seed=11),
            grads=qt.hadamard(qt.stochastic(bits=4, bucket_size=256, seed=12)),
            weight_deltas=True)
    return None


def train(args, run: str, data, rank: int, world: int, say, progress_prefix: str):
    """One training run from --seed; returns its per-step training losses (rank 0's batch), the
    evaluations {step: (mean train loss over ranks, validation loss)}, the median step seconds
    (slowest rank), qsdp's statistics (None for fp32) and the wall seconds."""
    train_data, val_data = data
    torch.manual_seed(args.seed)  # the same initial weights and dropout masks in every run
    model = GPT(96, args.context, args.width, args.layers, args.heads, args.dropout)
    mesh = init_device_mesh("cpu", (world,))
    mixed = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if args.mixed == "bf16" else MixedPrecisionPolicy()
    for block in model.h:
        fully_shard(block, mesh=mesh, mp_policy=mixed)
    fully_shard(model, mesh=mesh, mp_policy=mixed)
    handle = compress(model, run)
    opt = optimizer(model, args.lr, args.weight_decay)
    g = torch.Generator().manual_seed(1000 * args.seed + rank)
    vg = torch.Generator().manual_seed(args.seed)  # the same windows on every rank and run
    val_x, val_y = batch(val_data, args.val_windows, args.context, vg)
    torch.manual_seed(args.seed + 1 + rank)  # dropout: per rank, the same in every run
    losses, evaluations, step_seconds, recent = [], {}, [], []
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        step_start = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = learning_rate(step - 1, args)
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for micro in range(args.accumulate):
            # FSDP2's no_sync: the micro-batches' gradients add up unsharded, and only the last
            # one's backward reduce-scatters them.
            model.set_requires_gradient_sync(micro == args.accumulate - 1)
            x, y = batch(train_data, args.batch, args.context, g)
            logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))
            (loss / args.accumulate).backward()
            loss_sum += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss_sum / args.accumulate)
        recent.append(losses[-1])
        step_seconds.append(time.perf_counter() - step_start)
        if step % args.eval_every == 0 or step == args.steps:
            train_loss = mean_over_ranks(sum(recent) / len(recent))
            recent = []
            val = validation_loss(model, val_x, val_y, rank, world)
            evaluations[step] = (train_loss, val)
            say(f"{progress_prefix}step {step}/{args.steps}: train {train_loss:.4f} val {val:.4f} "
                f"({time.perf_counter() - start:.0f} s)", flush=True)
    seconds = time.perf_counter() - start
    stats = handle.stats() if handle is not None else None
    step_median = max_over_ranks(statistics.median(step_seconds))
    # Drop what holds the process group's collectives before the next run or the group's end.
    del model, opt, handle, mesh
    gc.collect()
    return losses, evaluations, step_median, stats, seconds


def relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else abs(a - b)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compress", choices=RUNS, default="w8g8")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the uncompressed run of the same seed")
    p.add_argument("--mixed", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch", type=int, default=8, help="windows per rank and micro-batch")
    p.add_argument("--accumulate", type=int, default=1,
                   help="micro-batches per step (gradient accumulation, reduced once per step)")
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=None,
                   help="steps of linear warmup (default: a tenth of --steps; nanoGPT's is 2000)")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--val-windows", type=int, default=64)
    p.add_argument("--data", default="/usr/share/games/fortunes")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--csv", help="CSV of both runs' losses at every step (rank 0)")
    args = p.parse_args()
    for name in ("steps", "batch", "accumulate", "context", "width", "layers", "heads", "eval_every",
                 "val_windows", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} is {getattr(args, name)}; expected >= 1")
    if args.width % args.heads:
        p.error(f"--width {args.width} is not a multiple of --heads {args.heads}")
    if not 0.0 <= args.dropout < 1.0:
        p.error(f"--dropout {args.dropout}; expected 0 <= p < 1")

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    say = print if rank == 0 else (lambda *a, **k: None)
    data = load_text(args.data)
    reference = args.compress != "fp32" and not args.no_reference
    say(f"torch_fsdp2: run {args.compress} ({args.mixed}), {world} ranks, {args.layers} layers x "
        f"{args.width}, {args.steps} steps of {args.batch} x {args.context} characters per rank"
        + (", after the uncompressed run of the same seed" if reference else ""), flush=True)
    ref = None
    if reference:
        ref = train(args, "fp32", data, rank, world, say, "uncompressed: ")
    losses, evaluations, step_median, stats, seconds = train(args, args.compress, data, rank,
                                                             world, say, f"{args.compress}: ")
    ratios = {}
    collective_seconds = math.nan
    if stats is not None:
        for name, s in stats.items():
            ratios[name] = s["bytes"] / s["uncompressed_bytes"] if s["uncompressed_bytes"] else 1
        collective_seconds = mean_over_ranks(sum(s["seconds"] for s in stats.values())) / args.steps
    train_loss, val = evaluations[args.steps]
    ref_train = ref_val = ref_step = max_diff = tail_diff = math.nan
    if ref is not None:
        ref_losses, ref_evaluations, ref_step = ref[0], ref[1], ref[2]
        ref_train, ref_val = ref_evaluations[args.steps]
        diffs = [relative(a, b) for a, b in zip(losses, ref_losses)]
        max_diff = max(diffs)
        tail_diff = max(diffs[-max(1, len(diffs) // 10):])
        say(f"{'step':>6} {'train':>8} {'uncompr.':>8} {'diff':>8} {'val':>8} {'uncompr.':>8} "
            f"{'diff':>8}")
        for step, (t, v) in sorted(evaluations.items()):
            t0, v0 = ref_evaluations[step]
            say(f"{step:>6} {t:>8.4f} {t0:>8.4f} {100 * (t - t0) / t0:>+7.2f}% {v:>8.4f} "
                f"{v0:>8.4f} {100 * (v - v0) / v0:>+7.2f}%")
        say(f"training loss, every step: largest relative difference {100 * max_diff:.3f} %, "
            f"{100 * tail_diff:.3f} % over the last tenth of the steps")
    if stats is not None:
        for name, s in stats.items():
            saved = s["uncompressed_bytes"] - s["bytes"]
            say(f"{name}: {s['calls']} calls, {s['bytes'] / 2**20:.2f} MiB sent of "
                f"{s['uncompressed_bytes'] / 2**20:.2f} MiB uncompressed ({ratios[name]:.3f}; "
                f"{saved / 2**20:.2f} MiB saved), {s['gated_calls']} below the size gate")
    say(f"final: run {args.compress} steps {args.steps} train {train_loss:.4f} val {val:.4f} "
        f"ref_train {ref_train:.4f} ref_val {ref_val:.4f} max_step_diff {max_diff:.5f} "
        f"ag_ratio {ratios.get('all_gather', 1.0):.3f} rs_ratio {ratios.get('reduce_scatter', 1.0):.3f} "
        f"step_s {step_median:.4f} ref_step_s {ref_step:.4f} collective_s {collective_seconds:.4f} "
        f"seconds {seconds:.1f}", flush=True)
    if args.csv and rank == 0:
        with open(args.csv, "w") as log:
            log.write("step,train,ref_train,val,ref_val\n")
            ref_losses = ref[0] if ref else [math.nan] * len(losses)
            ref_evaluations = ref[1] if ref else {}
            for step, (t, t0) in enumerate(zip(losses, ref_losses), start=1):
                v = evaluations.get(step, (math.nan, math.nan))[1]
                v0 = ref_evaluations.get(step, (math.nan, math.nan))[1]
                log.write(f"{step},{t:.6f},{t0:.6f},{v:.6f},{v0:.6f}\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
