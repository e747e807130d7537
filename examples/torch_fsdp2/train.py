#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small character-level GPT trained with FSDP2 (torch.distributed.fsdp.fully_shard) on CPU
processes over gloo, with qsdp.torch compressing the all-gather of weights and the reduce-scatter of
gradients (qt.fsdp.compress). Run it with torchrun:

    torchrun --standalone --nproc-per-node 4 examples/torch_fsdp2/train.py --compress w8g8 \\
        --steps 400 --csv w8g8.csv

--compress picks the weight and gradient compression:
    fp32   FSDP's own collectives, uncompressed
    w8g8   weights random_shift<8>, gradients stochastic<8> (bucket 1024)
    w4g4   weights random_shift<4>, gradients stochastic<4> (bucket 1024): QSDP's plain 4 bits
    w4g4d  weights as 4-bit differences (qt.DeltaGather, random_shift<4>, bucket 1024), gradients
           hadamard<stochastic<4>> (bucket 256): SDP4Bit's two ideas
    mx8    weights mxfp8<e4m3>, gradients mxfp8<e4m3, stochastic> (blocks of 32)
    mx4d   weights as mxfp4 differences, gradients hadamard<mxfp4<stochastic>> (blocks of 32)
    nv4d   weights as nvfp4 differences, gradients hadamard<nvfp4<stochastic>> (blocks of 16)
    mx8e   the linear layers' weights gathered and kept mxfp8<e4m3>-encoded (qt.fsdp.keep_encoded):
           each layer computes as torchao's MX linear, its input cast to MXFP8 too; gradients
           mxfp8<e4m3, stochastic>
    mx4e   the same with mxfp4 weights and inputs; gradients hadamard<mxfp4<stochastic>>
    wire8  the wire-only ideal of w8g8: every collective moves, uncompressed, exactly the bytes
           w8g8's packets take, and nothing is encoded or decoded; the weights each rank gathers
           are its own shard repeated, so its losses mean nothing: only its step time, which
           bounds what any 8-bit codec can reach on these links
    wire4  the same for w4g4's bytes
The model (--layers 4 --width 128 --heads 4 --context 128), the initial weights and the data order
(--seed) are the same for every run. The text is Debian's fortunes package (examples/fsdp_train/
setup.sh installs it), 10 % held out. Rank 0 prints progress and, at the end, one line
"final: run R steps S train T val V seconds X ag_ratio A rs_ratio B step_s M collective_s C"
(M: the median seconds of a training step, slowest rank, evaluation not counted; C: seconds per step
inside the collectives, codec and wire, mean over ranks), and a line
"breakdown: run R step M compute P collectives C hooks H encode E decode D exchange W" of per-step
medians (slowest rank): compute is the step outside the collectives; hooks the collectives' time
outside qsdp's calls (the hooks' Python, copies and allocations); encode and decode qsdp's codec
(qt.call_timings); exchange the rest of qsdp's calls: the wire and waiting for the peers. Every
run times its collectives through FSDP2's custom collective hooks (fp32's call torch's own
collectives, as FSDP2 does).
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
from torch.distributed.fsdp import fully_shard

import qsdp.torch as qt

RUNS = ("fp32", "w8g8", "w4g4", "w4g4d", "mx8", "mx4d", "nv4d", "mx8e", "mx4e", "wire8", "wire4")


class Timed:
    """Seconds inside the collectives of the hooks below, summed (the step's breakdown), and the
    bytes they sent against the bytes of their values, per collective."""

    def __init__(self):
        self.seconds = 0.0
        self.bytes = {"all_gather": [0, 0], "reduce_scatter": [0, 0]}

    def ratio(self, name: str) -> float:
        sent, values = self.bytes[name]
        return sent / values if values else 1.0


class PlainAllGather:
    """FSDP2's all-gather as FSDP2 runs it (torch's collective), timed; with `wire_bytes` the
    wire-only ideal: an all-gather of that many bytes per rank, no codec, and the output filled with
    this rank's shard (timing only)."""

    def __init__(self, timed: Timed, wire_bytes=None):
        self.timed, self.wire_bytes = timed, wire_bytes

    def allocate(self, size, *, dtype, device):
        return torch.empty(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        start = time.perf_counter()
        values = input_tensor.numel() * input_tensor.element_size()
        if self.wire_bytes is None:
            dist.all_gather_into_tensor(output_tensor, input_tensor, group=group)
            n = values
        else:
            n = self.wire_bytes(input_tensor)
            send = torch.empty(n, dtype=torch.uint8)
            dist.all_gather_into_tensor(torch.empty(n * group.size(), dtype=torch.uint8), send,
                                        group=group)
            # FSDP2 hands over the input in place, inside the output: a copy first
            output_tensor.view(group.size(), -1).copy_(input_tensor.clone().view(1, -1))
        self.timed.seconds += time.perf_counter() - start
        self.timed.bytes["all_gather"][0] += n
        self.timed.bytes["all_gather"][1] += values
        return None


class PlainReduceScatter:
    """FSDP2's reduce-scatter as FSDP2 runs it, timed; with `wire_bytes` the wire-only ideal: an
    all-to-all of that many bytes per peer (a compressed reduce-scatter's exchange), no codec, and
    this rank's own chunk as the output (timing only)."""

    def __init__(self, timed: Timed, wire_bytes=None):
        self.timed, self.wire_bytes = timed, wire_bytes

    def allocate(self, size, *, dtype, device):
        return torch.empty(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        start = time.perf_counter()
        world = group.size()
        values = output_tensor.numel() * output_tensor.element_size()
        if self.wire_bytes is None:
            dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group)
            n = values
        else:
            n = self.wire_bytes(output_tensor)
            dist.all_to_all_single(torch.empty(n * world, dtype=torch.uint8),
                                   torch.empty(n * world, dtype=torch.uint8), group=group)
            output_tensor.copy_(input_tensor.view(world, -1)[group.rank()])
        self.timed.seconds += time.perf_counter() - start
        self.timed.bytes["reduce_scatter"][0] += n
        self.timed.bytes["reduce_scatter"][1] += values
        return None


def time_plain_collectives(model, timed: Timed, weights=None, grads=None) -> None:
    """Installs the timed plain hooks on every FSDPModule of the model; weights / grads: the
    policies whose packet sizes the wire-only ideal sends (None: the real collective)."""
    from torch.distributed.fsdp import FSDPModule

    def packet_bytes(policy):
        """The bytes qt.fsdp.compress sends per peer for tensor t: packets, or the values of a
        buffer below its default size gate."""
        if policy is None:
            return None

        def sent(t):
            values = t.numel() * t.element_size()
            if values < qt.RECOMMENDED_MIN_COMPRESSED_BYTES:
                return values
            return qt.compressed_size(policy, t.numel(), t.dtype)
        return sent

    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_custom_all_gather(PlainAllGather(timed, packet_bytes(weights)))
            m.set_custom_reduce_scatter(PlainReduceScatter(timed, packet_bytes(grads)))


def load_text(path: str, validation_fraction: float = 0.1):
    """Characters of every text file under `path` as tokens 0..95 ('\\n' 0, ' '..'~' 1..95; tabs as
    spaces; other bytes dropped), as examples/fsdp_train reads them."""
    root = pathlib.Path(path)
    files = sorted(p for p in root.iterdir() if p.is_file() and not p.is_symlink()) \
        if root.is_dir() else [root]
    if not files or not files[0].exists():
        raise SystemExit(f"--data {path}: no such file or directory "
                         "(examples/fsdp_train/setup.sh installs the default text)")
    table = bytearray(256)
    keep = bytearray(256)
    for b in range(256):
        c = 32 if b == 9 else b
        if b == 10:
            table[b], keep[b] = 0, 1
        elif 32 <= c <= 126:
            table[b], keep[b] = c - 31, 1
    tokens = bytearray()
    for f in files:
        data = f.read_bytes()
        if b"\0" in data:  # fortune's .dat indexes
            continue
        tokens += bytes(table[b] for b in data if keep[b])
    if len(tokens) < 100_000:
        raise SystemExit(f"--data {path}: {len(tokens)} usable characters; expected >= 100000")
    t = torch.tensor(list(tokens), dtype=torch.long)
    split = int(len(t) * (1 - validation_fraction))
    return t[:split], t[split:]


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(w, dim=2)
        shape = (b, t, self.heads, w // self.heads)
        q, k, v = (y.view(shape).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, w))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class GPT(torch.nn.Module):
    def __init__(self, vocab: int, context: int, width: int, layers: int, heads: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.position = torch.nn.Embedding(context, width)
        self.blocks = torch.nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def batch(data, rows, context, generator):
    starts = torch.randint(0, len(data) - context - 1, (rows,), generator=generator)
    x = torch.stack([data[s:s + context] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + context + 1] for s in starts.tolist()])
    return x, y


def mean_over_ranks(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t) / dist.get_world_size()


def max_over_ranks(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


@torch.no_grad()
def validation_loss(model, windows_x, windows_y, rank, world):
    """The mean loss over the fixed validation windows, each rank evaluating its share."""
    mine = range(rank, len(windows_x), world)
    total = 0.0
    for i in mine:
        logits = model(windows_x[i:i + 1])
        total += float(F.cross_entropy(logits.view(-1, logits.shape[-1]), windows_y[i].view(-1)))
    t = torch.tensor([total, len(mine)], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t[0] / t[1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compress", choices=RUNS, default="fp32")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=8, help="windows per rank and step")
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--val-windows", type=int, default=64)
    p.add_argument("--data", default="/usr/share/games/fortunes")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--csv", help="CSV (step,train,val,seconds; rank 0) for examples/fsdp_train/plot_losses.py")
    args = p.parse_args()
    for name in ("steps", "batch", "context", "width", "layers", "heads", "eval_every",
                 "val_windows", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} is {getattr(args, name)}; expected >= 1")
    if args.width % args.heads:
        p.error(f"--width {args.width} is not a multiple of --heads {args.heads}")

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    say = print if rank == 0 else (lambda *a, **k: None)

    train_data, val_data = load_text(args.data)
    torch.manual_seed(args.seed)  # the same initial weights on every rank and in every run
    model = GPT(96, args.context, args.width, args.layers, args.heads)
    parameters = sum(p.numel() for p in model.parameters())
    if args.compress in ("mx8e", "mx4e"):  # before fully_shard, which shards what it wraps
        qt.fsdp.keep_encoded(model, qt.mxfp8() if args.compress == "mx8e" else qt.mxfp4())
    mesh = init_device_mesh("cpu", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    handle = None
    if args.compress == "w8g8":
        handle = qt.fsdp.compress(model, weights=qt.random_shift(bits=8, seed=11),
                                  grads=qt.stochastic(bits=8, seed=12))
    elif args.compress == "w4g4":
        handle = qt.fsdp.compress(model, weights=qt.random_shift(bits=4, seed=11),
                                  grads=qt.stochastic(bits=4, seed=12))
    elif args.compress == "w4g4d":
        handle = qt.fsdp.compress(
            model, weights=qt.random_shift(bits=4, seed=11),
            grads=qt.hadamard(qt.stochastic(bits=4, bucket_size=256, seed=12)),
            weight_deltas=True)
    elif args.compress == "mx8":
        handle = qt.fsdp.compress(model, weights=qt.mxfp8(),
                                  grads=qt.mxfp8(rounding="stochastic", seed=12))
    elif args.compress in ("mx4d", "nv4d"):
        fp4 = qt.mxfp4 if args.compress == "mx4d" else qt.nvfp4
        handle = qt.fsdp.compress(model, weights=fp4(),
                                  grads=qt.hadamard(fp4(rounding="stochastic", seed=12)),
                                  weight_deltas=True)
    elif args.compress in ("mx8e", "mx4e"):
        # identity: the hooks count and time every gather; the encoded weights go as they are
        grads = qt.mxfp8(rounding="stochastic", seed=12) if args.compress == "mx8e" else \
            qt.hadamard(qt.mxfp4(rounding="stochastic", seed=12))
        handle = qt.fsdp.compress(model, weights=qt.identity(), grads=grads)
    plain = Timed()
    if args.compress == "fp32":
        time_plain_collectives(model, plain)
    elif args.compress in ("wire8", "wire4"):
        bits = 8 if args.compress == "wire8" else 4
        time_plain_collectives(model, plain, weights=qt.random_shift(bits=bits),
                               grads=qt.stochastic(bits=bits))

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 1.0 - 0.9 * min(s, args.steps) / args.steps)  # linear to a tenth
    g = torch.Generator().manual_seed(1000 * args.seed + rank)
    vg = torch.Generator().manual_seed(args.seed)  # the same windows on every rank and run
    val_x, val_y = batch(val_data, args.val_windows, args.context, vg)
    say(f"torch_fsdp2: run {args.compress}, {world} ranks, {parameters} parameters, "
        f"{len(train_data)} training characters, {args.steps} steps of {args.batch} x "
        f"{args.context} characters per rank")
    log = open(args.csv, "w") if args.csv and rank == 0 else None
    if log:
        log.write("step,train,val,seconds\n")
    start = time.perf_counter()
    train_loss = math.nan
    recent = []
    step_seconds = []  # forward, backward and optimizer of each step, evaluation not counted
    parts = {"collectives": [], "calls": [], "encode": [], "decode": []}  # seconds of each step

    def totals():
        """Seconds inside the collectives since the run began, inside qsdp's calls (torch's own
        collectives for the runs without qsdp), and qsdp's encode and decode share."""
        inside = plain.seconds
        if handle is None:
            return inside, inside, 0.0, 0.0
        inside += sum(s["seconds"] for s in handle.stats().values())
        t = qt.call_timings(mesh.get_group())
        return inside, t["calls"], t["encode"], t["decode"]

    for step in range(1, args.steps + 1):
        before = totals()
        step_start = time.perf_counter()
        x, y = batch(train_data, args.batch, args.context, g)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        schedule.step()
        recent.append(loss.item())
        step_seconds.append(time.perf_counter() - step_start)
        for key, now, then in zip(parts, totals(), before):
            parts[key].append(now - then)
        if step % args.eval_every == 0 or step == args.steps:
            train_loss = mean_over_ranks(sum(recent) / len(recent))
            recent = []
            val = validation_loss(model, val_x, val_y, rank, world)
            seconds = time.perf_counter() - start
            say(f"step {step}/{args.steps}: train {train_loss:.4f} val {val:.4f} "
                f"({seconds:.0f} s)", flush=True)
            if log:
                log.write(f"{step},{train_loss:.6f},{val:.6f},{seconds:.3f}\n")
                log.flush()
    seconds = time.perf_counter() - start
    ratios = {}
    if handle is not None:
        for name, s in handle.stats().items():
            ratios[name] = s["bytes"] / s["uncompressed_bytes"] if s["uncompressed_bytes"] else 1
    else:
        ratios = {name: plain.ratio(name) for name in plain.bytes}
    collective_seconds = mean_over_ranks(sum(parts["collectives"])) / args.steps
    # The median step of the slowest rank: the first steps (allocation, warm-up) and the odd slow
    # one do not move it.
    step_median = max_over_ranks(statistics.median(step_seconds))
    say(f"final: run {args.compress} steps {args.steps} train {train_loss:.4f} val {val:.4f} "
        f"seconds {seconds:.1f} ag_ratio {ratios.get('all_gather', 1.0):.3f} "
        f"rs_ratio {ratios.get('reduce_scatter', 1.0):.3f} step_s {step_median:.4f} "
        f"collective_s {collective_seconds:.4f}", flush=True)
    # Per-step medians, slowest rank: the step, the part outside the collectives, the collectives,
    # and their codec and exchange shares.
    medians = {key: max_over_ranks(statistics.median(v)) for key, v in parts.items()}
    compute = max_over_ranks(statistics.median(
        [s - c for s, c in zip(step_seconds, parts["collectives"])]))
    hooks = max_over_ranks(statistics.median(
        [c - q for c, q in zip(parts["collectives"], parts["calls"])]))
    exchange = max_over_ranks(statistics.median(
        [q - e - d for q, e, d in zip(parts["calls"], parts["encode"], parts["decode"])]))
    say(f"breakdown: run {args.compress} step {step_median:.4f} compute {compute:.4f} "
        f"collectives {medians['collectives']:.4f} hooks {hooks:.4f} "
        f"encode {medians['encode']:.4f} "
        f"decode {medians['decode']:.4f} exchange {exchange:.4f}", flush=True)
    if log:
        log.close()
    # Drop everything that holds the process group before destroying it: a ProcessGroup that
    # outlives destroy_process_group is torn down at interpreter exit, after gloo's threads, which
    # aborts the process ("terminate called without an active exception").
    del model, opt, schedule, handle, mesh
    gc.collect()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
