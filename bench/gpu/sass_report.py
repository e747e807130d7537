#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The device codec's instruction budget, read from its sm_90 machine code (no GPU needed).

Builds the hot kernels of include/qsdp/detail/cuda/codec_kernels.cuh for sm_90 (every built-in
grid policy at 8, 4 and 2 bits, and mxfp8, mxfp4 and nvfp4 with either rounding, for bf16 and
fp32),
disassembles them with nvdisasm, finds each kernel's
steady-state loop and prints, per kernel: registers, stack frame, spill bytes, local-memory
instructions in the whole kernel, the global load/store widths of one loop iteration, thread
instructions per value by class, and the issue-bound ceiling

    ceiling = (128 / i) * b / 16.45

as a fraction of device-copy bandwidth: an H200 SM dispatches 4 warp-instructions (128 thread
instructions) per clock, and a device-to-device copy moves ~4.3 TB/s (read + write) over 132 SMs at
1.98 GHz = 16.45 B per clock per SM; `i` is thread instructions per value and `b` the bytes a value
moves through memory (read + write). A kernel cannot run faster than its ceiling whatever the memory
does; at or above 1.0 it can reach copy speed.

One iteration of the steady-state loop (the outermost loop that stores to global memory; its latch is
a conditional branch back; of several such loops, the one with the widest stores: the span decoders
have one for 16-byte aligned output and one for skewed output, reported as `decode skewed`) is one
path through its blocks. Of all paths the script takes the one that (1) enters the counted inner
loop, if the kernel has one, (2) makes the most stores of the loop's widest store width, (3) the
widest global loads (width counts as bytes - 1 per load), (4) the most value conversions
(conversion instructions, and arithmetic rounded toward an infinity or zero), and (5)
issues the fewest instructions. So byte-wise loads (what the unaligned and cut-tail paths do) and
narrower stores (a lane's metadata bytes, the 2-byte stores that end a run of skewed decode spans)
are no work: the path found is the full-group vector path, not a cut tail's, a flagged bucket's, a
peeled end's or a diverged warp's.
The counted inner loop runs a known number of times per iteration: the decoders'
packet loop once per packet (the fused reduce-scatter decode is reported for 2, 4 and 8 ranks), the
metadata kernel's lane loop (bucket / 32) / (values it loads per pass) times. Any other inner loop in
the steady-state loop may run any number of times, or be skipped by the counted path: such a kernel
is marked `*`, its figure is a lower bound, and it is not within budget. Predicated instructions
count as issued. Known undercount: a store that only some lanes make byte by byte (the lane-0
metadata stores) is not on the path. `--explain` prints the counted path instruction by
instruction; docs/benchmarks/gpu.md compares one kernel counted by hand with this count.

    python3 bench/gpu/sass_report.py                 # build (cached in build/sass), report
    python3 bench/gpu/sass_report.py --report-only   # exit 0 even when kernels miss the budget
    python3 bench/gpu/sass_report.py --markdown F    # also write the table as Markdown to F

The last line is `sass budget: K of N hot kernels within budget`; the exit status is 0 only when all
are (or with --report-only). nvdisasm comes from the CUDA toolkit when it has one, else from PyPI's
nvidia-cuda-nvdisasm wheel, installed into build/sass/tools (pip; once).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# ---- the machine model (see the module docstring) ------------------------------------------------
ISSUE_PER_CLOCK = 128.0  # thread instructions per clock per SM (4 schedulers x 32 lanes)
COPY_BYTES_PER_CLOCK = 16.45  # device copy, read + write, per clock per SM

# ---- the budget ---------------------------------------------------------------------------------
# Minimum ceilings at 8 and 4 bits; 2-bit kernels must reach 80 % of them. Every hot kernel also
# needs a zero stack frame and no spills.
BUDGET = {
    "encode": 1.2,  # deterministic one-pass encoders
    "encode_randomized": 0.9,  # stochastic and random_shift
    "decode": 1.2,
    "decode_accumulate": 1.0,
    "reduce_scatter": 1.0,  # at 4 and 8 ranks; 2 ranks is reported, not budgeted
}
TWO_BIT_FACTOR = 0.8
BUCKET = 1024  # metadata bytes per value are counted for this bucket size

POLICIES = {  # name: (metadata bytes, randomized encode, lowest bits)
    "uniform": (8, False, 1),
    "stochastic": (8, True, 1),
    "symmetric": (4, False, 1),
    "random_shift": (12, True, 2),
}
BITS = (8, 4, 2)
# The OCP Microscaling policies (quantizers.hpp, mx<Element, R>): one E8M0 byte per block of 32,
# which the span kernels take with one thread per block (the round-to-nearest encoders in their
# instantiation for spans that are whole buckets, which reduces nothing across lanes); blocks of 32
# never take the decoders' shuffled table. Their kernels are budgeted as the grid policies'. (Their
# round-to-nearest encode converts nothing, so rule (4) could not tell its path from a flagged
# bucket's: it encodes every bucket, the flagged ones too, and has one path.)
# NVFP4 (nvfp4<R>: an E4M3 byte per block and a tensor scale per packet, which each kernel loads
# once) is reported at blocks of 32 too, the smallest the span kernels take ("nvfp4/32"; its own
# blocks of 16 run the general kernels), and not budgeted.
MX_BUCKET = 32
# The C++ types are spelled as c++filt prints them (rounding 0 is nearest, 1 stochastic), so that
# the kernels are found by name in the machine code.
MX_POLICIES = {  # name: (C++ type, bits, randomized encode)
    "mxfp8": ("qsdp::mx<qsdp::e4m3, (qsdp::rounding)0>", 8, False),
    "mxfp8 stochastic": ("qsdp::mx<qsdp::e4m3, (qsdp::rounding)1>", 8, True),
    "mxfp4": ("qsdp::mx<qsdp::e2m1, (qsdp::rounding)0>", 4, False),
    "mxfp4 stochastic": ("qsdp::mx<qsdp::e2m1, (qsdp::rounding)1>", 4, True),
    "nvfp4/32": ("qsdp::nvfp4<(qsdp::rounding)0>", 4, False),
    "nvfp4/32 stochastic": ("qsdp::nvfp4<(qsdp::rounding)1>", 4, True),
}
ELEMENTS = {"bf16": ("__nv_bfloat16", 2), "fp32": ("float", 4)}
RANKS = (2, 4, 8)

# Values one thread handles per iteration of each kernel's steady-state loop (codec_kernels.cuh:
# one group of group_values = 8 values per thread and iteration).
VALUES_PER_ITERATION = {
    "encode_spans_kernel": 32,  # span_values
    "bucket_meta_kernel": BUCKET // 32,  # a warp per bucket: bucket / 32 values per lane
    "encode_groups_kernel": 8,
    "decode_kernel": 8,
    "decode_spans_kernel": 32,  # span_values
    "rotated_encode_kernel": 16,  # hadamard_kernels.cuh: rotation_share, per 4096-value tile
    "rotated_decode_kernel": 16,
}
# Inner loops that run a known number of times per iteration of the steady-state loop: the
# decoders' loop over packets (once per rank) and the metadata kernel's loop over its lane's values.
# The metadata kernel's loop is unrolled by nvcc: it runs (bucket / 32) / (values one pass loads)
# times.
COUNTED_LOOP = {
    "decode_kernel": "ranks",
    "decode_spans_kernel": "ranks",
    "rotated_decode_kernel": "ranks",
    "bucket_meta_kernel": "lane values",
}
# qsdp::hadamard<Inner>'s tile kernels (hadamard_kernels.cuh), reported, not budgeted: their
# butterfly stages are inner loops that run log2(bucket) times per tile with barriers between, so
# the per-value figure is the rest of the tile's work (a lower bound, marked `*`), and the table
# notes each such loop's size. Inner policies and widths reported:
ROTATED = (("stochastic", 4), ("stochastic", 8), ("random_shift", 4))


@dataclasses.dataclass
class Kernel:
    """One hot kernel of the report."""

    kind: str  # encode, encode general (meta), encode general (codes), decode, decode general,
    # decode skewed, decode-accumulate, reduce-scatter
    policy: str
    bits: int
    element: str  # bf16 / fp32 (decode-accumulate: fp32)
    template: str  # the C++ kernel expression
    ranks: int = 1  # packets per output (reduce-scatter)
    partial: bool = False  # inner loops expected: the figure is a lower bound (ROTATED)

    @property
    def name(self) -> str:
        suffix = f" x{self.ranks}" if self.kind.endswith("reduce-scatter") else ""
        label = self.policy if self.policy in MX_POLICIES else f"{self.policy}<{self.bits}>"
        return f"{self.kind}{suffix} {label} {self.element}"

    def metadata_per_value(self) -> float:
        if self.policy in MX_POLICIES:
            return 1 / MX_BUCKET
        return POLICIES[self.policy][0] / BUCKET

    def randomized(self) -> bool:
        if self.policy in MX_POLICIES:
            return MX_POLICIES[self.policy][2]
        return POLICIES[self.policy][1]

    def bytes_per_value(self) -> float:
        code = self.bits / 8 + self.metadata_per_value()
        size = ELEMENTS[self.element][1]
        if self.kind == "encode general (meta)":
            return size + self.metadata_per_value()  # reads the values, writes the metadata
        if self.kind.startswith("encode"):
            return size + code
        if self.kind.startswith("rotated encode"):
            return size + code
        if self.kind.startswith("decode "):  # decode, decode general
            return code + size
        if self.kind == "decode-accumulate":
            return code + 8  # the fp32 accumulator is read and written
        return self.ranks * code + size  # reduce-scatter: per output value

    def budget(self) -> float | None:
        if self.policy in MX_POLICIES:
            budgeted = ("encode", "decode", "decode-accumulate", "reduce-scatter")
            if self.kind not in budgeted or self.policy.startswith("nvfp4"):
                return None
        if self.kind == "encode":
            key = "encode_randomized" if self.randomized() else "encode"
        elif self.kind == "decode":
            key = "decode"
        elif self.kind == "decode-accumulate":
            key = "decode_accumulate"
        elif self.kind == "reduce-scatter" and self.ranks >= 4:
            key = "reduce_scatter"
        else:
            return None  # reported; only the stack-frame and spill rules apply
        return BUDGET[key] * (TWO_BIT_FACTOR if self.bits == 2 else 1.0)


def span_kernels(policy: str, bits: int, q: str, shuffled: str, general: bool,
                 span_buckets: bool = False) -> list[Kernel]:
    """The span kernels of policy type `q` for both elements (encode, decode, decode skewed,
    reduce-scatter, decode-accumulate), with the general encode and decode kernels where
    `general`; `shuffled` is the decoders' shuffled-table template argument."""
    kernels = []
    for element, (ctype, _) in ELEMENTS.items():
        kernels.append(Kernel("encode", policy, bits, element,
                              f"encode_spans_kernel<{q}, {ctype}, true, {str(span_buckets).lower()}>"))
        if general:
            kernels += [
                Kernel("encode general (meta)", policy, bits, element,
                       f"bucket_meta_kernel<{q}, {ctype}>"),
                Kernel("encode general (codes)", policy, bits, element,
                       f"encode_groups_kernel<{q}, {ctype}>"),
            ]
        kernels.append(Kernel("decode", policy, bits, element,
                              f"decode_spans_kernel<{q}, store_sink<{ctype}>, {shuffled}>"))
        if general:
            kernels.append(Kernel("decode general", policy, bits, element,
                                  f"decode_kernel<{q}, store_sink<{ctype}>>"))
        # The same kernel's loop for output off a 16-byte boundary (an all_gather chunk of a
        # count that is no multiple of 16 bytes): reported, not budgeted.
        kernels.append(Kernel("decode skewed", policy, bits, element,
                              f"decode_spans_kernel<{q}, store_sink<{ctype}>, {shuffled}>"))
        kernels += [
            Kernel("reduce-scatter", policy, bits, element,
                   f"decode_spans_kernel<{q}, reduce_sink<{ctype}>, {shuffled}>", ranks)
            for ranks in RANKS
        ]
    kernels.append(Kernel("decode-accumulate", policy, bits, "fp32",
                          f"decode_spans_kernel<{q}, accumulate_sink, {shuffled}>"))
    return kernels


def hot_kernels() -> list[Kernel]:
    kernels = []
    for policy, (_, _, lowest) in POLICIES.items():
        for bits in BITS:
            if bits < lowest:
                continue
            q = f"qsdp::{policy}<{bits}>"
            # Widths of at most 4 bits that divide 32 decode buckets of >= 512 values (1024 here)
            # through the shuffled table (codec_kernels.cuh, shuffled_width).
            shuffled = "true" if bits <= 4 and 32 % bits == 0 else "false"
            kernels += span_kernels(policy, bits, q, shuffled, general=True)
    for policy, (q, bits, randomized) in MX_POLICIES.items():
        kernels += span_kernels(policy, bits, q, "false", general=False,
                                span_buckets=not randomized)
    for policy, bits in ROTATED:
        q = f"qsdp::hadamard<qsdp::{policy}<{bits}>>"
        for element, (ctype, _) in ELEMENTS.items():
            kernels += [
                Kernel("rotated encode", policy, bits, element,
                       f"rotated_encode_kernel<{q}, {ctype}>", partial=True),
                Kernel("rotated decode", policy, bits, element,
                       f"rotated_decode_kernel<{q}, store_sink<{ctype}>>", partial=True),
                Kernel("rotated reduce-scatter", policy, bits, element,
                       f"rotated_decode_kernel<{q}, reduce_sink<{ctype}>>", 4, partial=True),
            ]
    return kernels


# ---- tools ---------------------------------------------------------------------------------------


def find_tool(name: str, extra: list[Path]) -> Path | None:
    found = shutil.which(name)
    if found:
        return Path(found)
    for d in extra:
        if (d / name).is_file():
            return d / name
    return None


def cuda_bins() -> list[Path]:
    dirs = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]) / "bin")
    dirs.append(Path("/usr/local/cuda/bin"))
    return dirs


def ensure_nvdisasm(work: Path) -> Path:
    tools = work / "tools"
    wheel_bin = tools / "nvidia" / "cu13" / "bin"
    tool = find_tool("nvdisasm", cuda_bins() + [wheel_bin])
    if tool:
        return tool
    print(f"sass_report: nvdisasm not found; installing PyPI's nvidia-cuda-nvdisasm into {tools}",
          flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--target", str(tools), "nvidia-cuda-nvdisasm==13.5.37"], check=True)
    tool = find_tool("nvdisasm", [wheel_bin])
    if not tool:
        sys.exit(f"sass_report: pip installed nvidia-cuda-nvdisasm, but {wheel_bin}/nvdisasm is missing")
    return tool


# ---- build ---------------------------------------------------------------------------------------


def translation_unit(kernels: list[Kernel]) -> str:
    lines = [
        "// Generated by bench/gpu/sass_report.py: takes the address of every hot kernel so that",
        "// nvcc compiles it for sm_90.",
        "#include <cuda_bf16.h>",
        "#include <qsdp/codec.hpp>",
        "#include <qsdp/detail/cuda/codec_kernels.cuh>",
        "#include <qsdp/detail/cuda/hadamard_kernels.cuh>",
        "namespace qsdp::detail::cuda {",
        "void* sass_report_kernels[] = {",
    ]
    seen = set()
    for k in kernels:
        if k.template not in seen:
            seen.add(k.template)
            lines.append(f"    reinterpret_cast<void*>(&{k.template}),")
    lines += ["};", "}  // namespace qsdp::detail::cuda", ""]
    return "\n".join(lines)


def sources_digest(nvcc: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((ROOT / "include").rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(ROOT)).encode())
            h.update(p.read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(str(nvcc).encode())
    return h.hexdigest()[:16]


def build(kernels: list[Kernel], work: Path, nvcc: Path, jobs: int) -> list[tuple[Path, str]]:
    """Compiles one translation unit per policy; returns (cubin, ptxas output) per unit."""
    digest = sources_digest(nvcc)
    units = []
    for policy in dict.fromkeys(k.policy for k in kernels):
        unit = [k for k in kernels if k.policy == policy]
        stem = policy.replace(" ", "_").replace("/", "-")
        src = work / f"{stem}.cu"
        cubin = work / f"{stem}.cubin"
        log = work / f"{stem}.ptxas.txt"
        stamp = work / f"{stem}.digest"
        text = translation_unit(unit)
        fresh = (cubin.is_file() and log.is_file() and stamp.is_file() and
                 stamp.read_text() == digest and src.is_file() and src.read_text() == text)
        units.append((policy, src, cubin, log, stamp, text, fresh))

    def compile_unit(u):
        policy, src, cubin, log, stamp, text, fresh = u
        if fresh:
            return cubin, log.read_text()
        src.write_text(text)
        cmd = [str(nvcc), "-std=c++20", "-O3", "-arch=sm_90", "-cubin", "-Xptxas", "-v",
               "-I", str(ROOT / "include"), "-o", str(cubin), str(src)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout + r.stderr)
            raise RuntimeError(f"nvcc failed for {src} (exit {r.returncode})")
        log.write_text(r.stderr + r.stdout)
        stamp.write_text(digest)
        return cubin, log.read_text()

    to_compile = sum(1 for u in units if not u[-1])
    if to_compile:
        print(f"sass_report: compiling {to_compile} translation unit(s) for sm_90 with {nvcc} "
              f"({jobs} at a time)...", flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(compile_unit, units))


# ---- ptxas -v ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Resources:
    registers: int = 0
    stack: int = 0
    spill_stores: int = 0
    spill_loads: int = 0


def parse_ptxas(text: str) -> dict[str, Resources]:
    out: dict[str, Resources] = {}
    current = None
    for line in text.splitlines():
        m = re.search(r"(?:Function properties for |Compiling entry function ')([^'\s]+)", line)
        if m:
            current = out.setdefault(m.group(1), Resources())
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current:
            current.stack, current.spill_stores, current.spill_loads = map(int, m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            current.registers = int(m.group(1))
    return out


# ---- SASS ----------------------------------------------------------------------------------------

INSTRUCTION_BYTES = 16  # sm_90


@dataclasses.dataclass
class Instr:
    address: int
    predicate: str
    opcode: str
    operands: str

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]

    @property
    def converts(self) -> bool:
        """A value conversion: a conversion instruction, or floating-point arithmetic rounded in a
        direction (the stochastic block-scaled encoders round with FFMA.RP)."""
        if self.base in CONVERSION:
            return True
        return self.base in FP32 and bool({"RP", "RM", "RZ"} & set(self.opcode.split(".")[1:]))

    def branch_target(self) -> int | None:
        if self.base not in ("BRA",):
            return None
        m = re.search(r"0x([0-9a-fA-F]+)\s*$", self.operands)
        return int(m.group(1), 16) if m else None

    @property
    def unconditional(self) -> bool:
        # BRA.DIV (taken when the warp has diverged) and BRA with a predicate operand are
        # conditional even without a guard predicate.
        if self.base == "BRA" and ("." in self.opcode or "," in self.operands):
            return False
        return self.predicate in ("", "@PT")

    def global_bytes(self) -> int:
        if self.base not in ("LDG", "STG"):
            return 0
        mods = self.opcode.split(".")[1:]
        for m, size in (("128", 16), ("64", 8), ("U16", 2), ("S16", 2), ("U8", 1), ("S8", 1)):
            if m in mods:
                return size
        return 4


CLASSES = ("fp64", "fp32", "conversion", "integer", "memory", "control", "other")
FP64 = {"DADD", "DMUL", "DFMA", "DSETP", "DMNMX", "DSET"}
CONVERSION = {"F2F", "F2I", "I2F", "I2I", "F2FP", "I2FP", "FRND", "F2IP"}
FP32 = {"FADD", "FMUL", "FFMA", "FMNMX", "FSETP", "FSEL", "FCHK", "MUFU", "FSET", "HADD2", "HMUL2",
        "HFMA2", "HMNMX2", "HSETP2", "FSWZADD"}
MEMORY = {"LDG", "STG", "LDS", "STS", "LD", "ST", "LDL", "STL", "ATOM", "ATOMG", "ATOMS", "RED",
          "LDC", "ULDC", "SHFL", "LDSM", "MEMBAR", "CCTL", "LDGSTS"}
CONTROL = {"BRA", "BSSY", "BSYNC", "EXIT", "BAR", "WARPSYNC", "CALL", "RET", "YIELD", "NOP", "BPT",
           "BREAK", "JMP", "JMX", "BRX", "VOTE", "VOTEU", "ELECT", "ACQBULK", "WARPGROUP", "KILL"}


def classify(i: Instr) -> str:
    b = i.base
    if b in FP64:
        return "fp64"
    if b in CONVERSION:
        return "conversion"
    if b in FP32:
        return "fp32"
    if b in MEMORY:
        return "memory"
    if b in CONTROL:
        return "control"
    return "integer"  # IMAD, IADD3, LOP3, SHF, PRMT, ISETP, SEL, MOV, S2R, uniform datapath, ...


def parse_sass(cubin: Path, nvdisasm: Path) -> dict[str, list[Instr]]:
    r = subprocess.run([str(nvdisasm), "-c", "-json", str(cubin)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"nvdisasm failed on {cubin}: {r.stderr.strip()}")
    data = json.loads(r.stdout)
    functions = {}
    for f in data[1]:
        start = int(f.get("start", 0))
        instrs = []
        for n, s in enumerate(f["sass-instructions"]):
            instrs.append(Instr(start + n * INSTRUCTION_BYTES, s.get("predicate", ""), s["opcode"],
                                s.get("operands", "")))
        functions[f["function-name"]] = instrs
    return functions


@dataclasses.dataclass
class PathCount:
    """What one path through a region executes."""

    bytes: int = 0  # moved by global loads and stores
    loaded_wide: int = 0  # sum over global loads of (bytes - 1): favours the vectorised path
    conversions: int = 0
    loops: int = 0  # inner loops entered
    counted: int = 0  # times the counted loop was entered (a steady-state path must enter it)
    instructions: int = 0
    by_class: dict = dataclasses.field(default_factory=lambda: {c: 0 for c in CLASSES})
    widths: dict = dataclasses.field(default_factory=dict)  # "LDG.128" -> count
    trace: list = dataclasses.field(default_factory=list)  # (instructions, times) on the path

    def key(self, store_width: str):
        """How the rule ranks this path, where `store_width` ("STG.128") is the loop's widest."""
        return (self.counted, self.widths.get(store_width, 0), self.loaded_wide, self.conversions,
                -self.instructions)

    def plus(self, other: "PathCount", times: int = 1) -> "PathCount":
        r = PathCount(self.bytes + times * other.bytes,
                      self.loaded_wide + times * other.loaded_wide,
                      self.conversions + times * other.conversions,
                      self.loops + other.loops, self.counted + other.counted,
                      self.instructions + times * other.instructions)
        r.by_class = {c: self.by_class[c] + times * other.by_class[c] for c in CLASSES}
        r.widths = dict(self.widths)
        for w, n in other.widths.items():
            r.widths[w] = r.widths.get(w, 0) + times * n
        r.trace = self.trace + [(instrs, n * times) for instrs, n in other.trace]
        return r


def count_of(instrs: list[Instr]) -> PathCount:
    p = PathCount(trace=[(instrs, 1)])
    for i in instrs:
        p.instructions += 1
        p.by_class[classify(i)] += 1
        if i.converts:
            p.conversions += 1
        nbytes = i.global_bytes()
        if nbytes:
            p.bytes += nbytes
            if i.base == "LDG":
                p.loaded_wide += nbytes - 1
            w = f"{i.base}.{nbytes * 8}"
            p.widths[w] = p.widths.get(w, 0) + 1
    return p


class Function:
    def __init__(self, instrs: list[Instr]):
        self.instrs = instrs
        self.index = {i.address: n for n, i in enumerate(instrs)}
        self.store_width = ""  # the steady-state loop's widest global store ("STG.128"): analyse
        leaders = {instrs[0].address} if instrs else set()
        for n, i in enumerate(instrs):
            t = i.branch_target()
            if t is not None:
                leaders.add(t)
            if (t is not None or i.base in ("EXIT", "RET", "CALL")) and n + 1 < len(instrs):
                leaders.add(instrs[n + 1].address)
        self.starts = sorted(a for a in leaders if a in self.index)
        self.blocks = []  # (start, end_exclusive) addresses
        for k, s in enumerate(self.starts):
            e = self.starts[k + 1] if k + 1 < len(self.starts) else instrs[-1].address + INSTRUCTION_BYTES
            self.blocks.append((s, e))
        self.block_at = {s: k for k, (s, _) in enumerate(self.blocks)}
        # Loops: (header address, address of the conditional branch back to it). An unconditional
        # branch back is not a loop's latch but a cold block (placed after the kernel's body, e.g.
        # the divergent path of a warp shuffle) returning into the loop.
        self.loops = []
        for i in instrs:
            t = i.branch_target()
            if t is not None and t <= i.address and not i.unconditional:
                self.loops.append((t, i.address))

    def block_instrs(self, k: int) -> list[Instr]:
        s, e = self.blocks[k]
        return self.instrs[self.index[s]:self.index[s] + (e - s) // INSTRUCTION_BYTES]

    def successors(self, k: int) -> list[int]:
        """Addresses control may go to after block k."""
        last = self.block_instrs(k)[-1]
        _, e = self.blocks[k]
        t = last.branch_target()
        out = []
        if t is not None:
            out.append(t)
            if not last.unconditional:
                out.append(e)
        elif last.base in ("EXIT", "RET") and last.unconditional:
            pass
        else:
            out.append(e)
        return out

    def best_path(self, lo: int, hi: int, counted_loop: tuple | None, trips: int) -> PathCount:
        """The best path from the block at lo to a back edge to lo, inner loops collapsed: the
        counted loop (the decoders' packet loop, the metadata kernel's lane loop) runs `trips`
        times, any other inner loop once."""
        # Back edges to lo itself (a `continue`) end an iteration; the others are inner loops.
        inner = sorted({(h, b) for (h, b) in self.loops if lo < h and b <= hi},
                       key=lambda x: (x[0], -x[1]))
        # Keep the outermost inner loops only (nested ones are inside their collapsed parent).
        top = [(h, b) for h, b in inner
               if not any(h2 <= h and b <= b2 and (h2, b2) != (h, b) for h2, b2 in inner)]
        collapsed = dict(top)
        best: dict[int, PathCount] = {lo: PathCount()}
        result = None
        skip_until = -1
        for s in [a for a in self.starts if lo <= a <= hi]:
            if s < skip_until or s not in best:
                continue
            here = best[s]
            if s in collapsed:
                b = collapsed[s]
                counted = counted_loop == (s, b)
                body = self.best_path(s, b, counted_loop, trips)
                total = here.plus(body, trips if counted else 1)
                total.loops += 1
                total.counted += 1 if counted else 0
                exits = [b + INSTRUCTION_BYTES]
                for k in range(self.block_at[s], len(self.blocks)):
                    if self.blocks[k][0] > b:
                        break
                    exits += [t for t in self.successors(k) if t > b + INSTRUCTION_BYTES]
                for t in exits:
                    self._relax(best, t, total, hi)
                skip_until = b + INSTRUCTION_BYTES
                continue
            k = self.block_at[s]
            total = here.plus(count_of(self.block_instrs(k)))
            for t in self.successors(k):
                if t == lo:  # a back edge: one iteration ends here
                    if result is None or total.key(self.store_width) > result.key(self.store_width):
                        result = total
                elif t > s:
                    self._relax(best, t, total, hi)
        return result if result is not None else PathCount()

    def _relax(self, best, t, total, hi):
        if t > hi + INSTRUCTION_BYTES:
            return  # leaves the loop
        if t not in best or total.key(self.store_width) > best[t].key(self.store_width):
            best[t] = total


@dataclasses.dataclass
class Row:
    kernel: Kernel
    resources: Resources
    local_instructions: int
    per_value: dict  # class -> instructions per value
    per_value_total: float
    widths: str
    ceiling: float
    marked: bool
    ok: bool
    why: str
    path: PathCount
    loop: tuple
    uncounted: list  # (header, latch) of the inner loops that mark the figure `*`


def analyse(kernel: Kernel, instrs: list[Instr], res: Resources) -> Row:
    f = Function(instrs)
    local = sum(1 for i in instrs if i.base in ("LDL", "STL"))
    stores = [i.address for i in instrs if i.base in ("STG", "ST", "ATOM", "ATOMG", "RED")]
    loops = [(h, b) for (h, b) in f.loops if any(h <= a <= b for a in stores)]
    if not loops:
        raise RuntimeError(f"{kernel.name}: no loop that stores to global memory")
    # The outermost such loops: usually one; the span decoders have one for 16-byte aligned output
    # and one for skewed output, of which the path rule takes the aligned one (widest stores).
    outermost = [(h, b) for (h, b) in loops
                 if not any(h2 <= h and b <= b2 and (h2, b2) != (h, b) for h2, b2 in loops)]
    if kernel.kind == "decode skewed":  # the loop that takes the previous lane's last word
        outermost = [(h, b) for (h, b) in outermost
                     if any(h <= i.address <= b and i.opcode.startswith("SHFL.UP") for i in instrs)]
        if not outermost:
            raise RuntimeError(f"{kernel.name}: no loop with the skewed stores' shuffle")
    template = kernel.template.split("<")[0]

    def loaded(lp):
        h, b = lp
        return sum(i.global_bytes() for i in instrs if h <= i.address <= b and i.base == "LDG")

    def steady(outer):
        counted_loop, trips = None, 1
        if template in COUNTED_LOOP:
            # The decoders' packet loop / the metadata kernel's lane loop: the inner loop of the
            # steady-state loop that loads the most bytes.
            inner = [(h, b) for (h, b) in f.loops if outer[0] < h and b <= outer[1]]
            if inner:
                counted_loop = max(inner, key=loaded)
                if COUNTED_LOOP[template] == "ranks":
                    trips = kernel.ranks
                else:
                    per_pass = max(1, loaded(counted_loop) // ELEMENTS[kernel.element][1])
                    trips = max(1, VALUES_PER_ITERATION[template] // per_pass)
        widest = max(i.global_bytes() for i in instrs
                     if outer[0] <= i.address <= outer[1] and i.base == "STG")
        f.store_width = f"STG.{widest * 8}"
        path = f.best_path(outer[0], outer[1], counted_loop, trips)
        return (widest, path.key(f.store_width)), outer, counted_loop, trips, path

    # Of several steady-state loops, the one with the widest stores, then the best path.
    (widest, _), outer, counted_loop, trips, path = max((steady(lp) for lp in outermost),
                                                        key=lambda r: r[0])
    f.store_width = f"STG.{widest * 8}"
    # Other inner loops may run any number of times, or be skipped by the counted path: the
    # figure is then only a lower bound, and the kernel cannot be shown to be within budget.
    uncounted = [(h, b) for (h, b) in f.loops
                 if outer[0] < h and b <= outer[1] and not (counted_loop and
                                                            counted_loop[0] <= h and b <= counted_loop[1])]
    values = VALUES_PER_ITERATION[template]
    per_value = {c: path.by_class[c] / values for c in CLASSES}
    i = path.instructions / values
    b = kernel.bytes_per_value()
    ceiling = ISSUE_PER_CLOCK / i * b / COPY_BYTES_PER_CLOCK if i > 0 else 0.0
    widths = " ".join(f"{w}x{n}" for w, n in sorted(path.widths.items()))
    budget = kernel.budget()
    why = []
    if path.instructions == 0:
        why.append("no path through the steady-state loop found")
    if res.stack:
        why.append(f"stack {res.stack} B")
    if res.spill_stores or res.spill_loads:
        why.append("spills")
    if kernel.partial:  # the stage loops are inside the counted or an uncounted loop
        sizes = ", ".join(str(sum(1 for x in instrs if h <= x.address <= b)) for h, b in uncounted)
        why.append(f"lower bound; inner loops of {sizes} instructions" if uncounted else
                   "lower bound")
    elif uncounted:
        why.append(f"{len(uncounted)} inner loop(s) of unknown trip count")
    if budget is not None and ceiling < budget:
        why.append(f"ceiling {ceiling:.2f} < {budget:.2f}")
    ok = not [w for w in why if not w.startswith("lower bound")]
    return Row(kernel, res, local, per_value, i, widths, ceiling,
               bool(uncounted) or kernel.partial, ok, ", ".join(why), path, outer, uncounted)


def explain(row: Row) -> list[str]:
    """The counted path of one iteration, instruction by instruction (for checking by hand)."""
    lines = [f"{row.kernel.name}: steady-state loop {row.loop[0]:#06x}..{row.loop[1]:#06x}; "
             f"{row.path.instructions} instructions per iteration, "
             f"{VALUES_PER_ITERATION[row.kernel.template.split('<')[0]]} values per thread"]
    for h, b in row.uncounted:
        lines.append(f"  inner loop of unknown trip count: {h:#06x}..{b:#06x}")
    for instrs, times in row.path.trace:
        for i in instrs:
            mark = f"x{times}" if times != 1 else ""
            lines.append(f"  {i.address:#06x} {mark:>3} {classify(i):<10} {i.predicate:>5} "
                         f"{i.opcode} {i.operands}")
    return lines


def demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt") or shutil.which("llvm-cxxfilt")
    if not tool:
        sys.exit("sass_report: needs c++filt (binutils) to read kernel names")
    r = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True)
    return dict(zip(names, r.stdout.splitlines()))


def kernel_name(signature: str) -> str | None:
    """The kernel's name with its template arguments, from a demangled `void name<...>(...)`: up to
    the first parenthesis outside the angle brackets (an argument may hold a cast, `(rounding)0`)."""
    if not signature.startswith("void "):
        return None
    depth = 0
    for at, c in enumerate(signature[5:], start=5):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            return signature[5:at]
    return None


def normalise(text: str) -> str:
    return re.sub(r"\s+", "", text.replace("qsdp::detail::cuda::", ""))


def table(rows: list[Row]) -> list[str]:
    head = ("| kernel | regs | stack B | spill B | local instr | global widths per iteration "
            "| fp64 | fp32 | conv | int | mem | ctrl | instr/value | b (B/value) | ceiling | budget |")
    lines = [head, "|" + "---|" * 16]
    for r in rows:
        k = r.kernel
        budget = k.budget()
        pv = r.per_value
        lines.append(
            f"| {k.name} | {r.resources.registers} | {r.resources.stack} | "
            f"{r.resources.spill_stores + r.resources.spill_loads} | {r.local_instructions} | "
            f"{r.widths} | {pv['fp64']:.1f} | {pv['fp32']:.1f} | {pv['conversion']:.1f} | "
            f"{pv['integer']:.1f} | {pv['memory']:.1f} | {pv['control']:.1f} | "
            f"{r.per_value_total:.1f}{'*' if r.marked else ''} | {k.bytes_per_value():.2f} | "
            f"{r.ceiling:.2f} | {'-' if budget is None else f'{budget:.2f}'} "
            f"{('ok' + (' (' + r.why + ')' if r.why else '')) if r.ok else 'MISS: ' + r.why} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default=str(ROOT / "build" / "sass"), help="build folder (cached)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel nvcc runs")
    ap.add_argument("--report-only", action="store_true",
                    help="exit 0 even when kernels miss the budget")
    ap.add_argument("--markdown", help="also write the table as Markdown to this file")
    ap.add_argument("--filter", default="", help="only kernels whose name contains this text")
    ap.add_argument("--explain", action="store_true",
                    help="print each reported kernel's counted path, instruction by instruction")
    args = ap.parse_args()

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    nvcc = find_tool("nvcc", cuda_bins())
    if not nvcc:
        sys.exit("sass_report: nvcc not found (PATH, CUDA_HOME/bin, /usr/local/cuda/bin)")
    nvdisasm = ensure_nvdisasm(work)
    kernels = hot_kernels()
    units = build(kernels, work, nvcc, args.jobs)

    functions: dict[str, list[Instr]] = {}
    resources: dict[str, Resources] = {}
    for cubin, log in units:
        functions.update(parse_sass(cubin, nvdisasm))
        resources.update(parse_ptxas(log))
    readable = demangle(list(functions))
    by_template = {}
    for mangled, text in readable.items():
        name = kernel_name(text)
        if name:
            by_template[normalise(name)] = mangled

    rows = []
    for k in kernels:
        if args.filter and args.filter not in k.name:
            continue
        mangled = by_template.get(normalise(k.template))
        if mangled is None:
            print(f"sass_report: {k.template} is not in the machine code", file=sys.stderr)
            return 2
        rows.append(analyse(k, functions[mangled], resources.get(mangled, Resources())))

    if args.explain:
        for r in rows:
            print("\n".join(explain(r)))
    lines = table(rows)
    print("\n".join(lines))
    ok = sum(r.ok for r in rows)
    summary = f"sass budget: {ok} of {len(rows)} hot kernels within budget"
    if args.markdown:
        Path(args.markdown).write_text(
            "\n".join(lines) + "\n\n" + summary + "\n")
    print(summary)
    return 0 if ok == len(rows) or args.report_only else 1


if __name__ == "__main__":
    sys.exit(main())
