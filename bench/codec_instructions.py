#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Instructions per value of the host codec, counted by valgrind's callgrind.

A timing depends on the machine's memory and clock; an instruction count does not, so this figure
stays put from machine to machine and shows what a codec change did to the work per value. The
script compiles bench/codec_instructions.cpp (-O3, no -march, as a user builds), runs one encode or
decode of VALUES normal values per policy under callgrind, and prints instructions per value on
the AVX2+FMA loops and on the portable ones. Valgrind hides AVX-512 from the program, so the
stochastic encoders' AVX-512 loops are not counted.

    python3 bench/codec_instructions.py [--values N] [--cxx g++] [--out table.md]
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

POLICIES = [
    ("uniform<8>", "uniform8"),
    ("stochastic<8>", "stochastic8"),
    ("symmetric<8>", "symmetric8"),
    ("random_shift<8>", "random_shift8"),
    ("uniform<4>", "uniform4"),
    ("stochastic<4>", "stochastic4"),
    ("uniform<2>", "uniform2"),
    ("hadamard<stochastic<4>>", "hadamard_stochastic4"),
    ("mxfp8<e4m3>", "mxfp8"),
    ("mxfp8<e4m3, stochastic>", "mxfp8_stochastic"),
    ("mxfp6<e2m3>", "mxfp6"),
    ("mxfp4", "mxfp4"),
    ("mxfp4<stochastic>", "mxfp4_stochastic"),
    ("nvfp4", "nvfp4"),
    ("nvfp4<stochastic>", "nvfp4_stochastic"),
]
# identity is left out: its encode and decode are a memcpy, which valgrind replaces with its own.


def count(binary, policy, op, values, baseline, workdir):
    out = os.path.join(workdir, f"cg.{policy}.{op}.{int(baseline)}")
    for f in glob.glob(out + "*"):
        os.remove(f)
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}",
           binary, policy, op, str(values)] + (["baseline"] if baseline else [])
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"codec_instructions.py: {' '.join(cmd)} failed:\n{run.stderr[-2000:]}")
    for path in sorted(glob.glob(out + "*")):
        text = open(path).read()
        if "codec call" not in text:
            continue
        m = re.search(r"^(?:totals|summary):\s+(\d+)", text, re.M)
        if m:
            return int(m.group(1))
    sys.exit(f"codec_instructions.py: no 'codec call' dump with a total in {out}*")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--values", type=int, default=1 << 18, help="values per call (default 2^18)")
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"), help="C++20 compiler")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()
    if args.values <= 0:
        ap.error(f"--values must be positive, got {args.values}")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as workdir:
        binary = os.path.join(workdir, "codec_instructions")
        subprocess.run([args.cxx, "-std=c++20", "-O3", "-DNDEBUG", "-I", os.path.join(root, "include"),
                        os.path.join(root, "bench", "codec_instructions.cpp"), "-o", binary],
                       check=True)
        lines = [f"instructions per value, {args.values} float values per call, buckets of 1024 "
                 "(the MX formats: blocks of 32; NVFP4: 16) (callgrind; AVX2+FMA loops, and the "
                 "portable loops)", "",
                 "| policy | encode, AVX2 | decode, AVX2 | encode, portable | decode, portable |",
                 "|---|---|---|---|---|"]
        print("\n".join(lines), flush=True)
        for name, policy in POLICIES:
            cells = []
            for baseline in (False, True):
                for op in ("encode", "decode"):
                    cells.append(count(binary, policy, op, args.values, baseline, workdir) / args.values)
            row = f"| `{name}` | " + " | ".join(f"{c:.2f}" for c in cells) + " |"
            print(row, flush=True)
            lines.append(row)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
