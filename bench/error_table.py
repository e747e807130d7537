#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The error table of qsdp::hadamard (docs/benchmarks/codec.md): 2, 4 and 8 bits, with and without the
rotation, buckets 32 to 2048, as a round trip (an all_gather of gradient-like data) and as a
reduce-scatter, from qsdp-bench runs on the in-process backend.

    python3 bench/error_table.py --bench build/release/bench/qsdp-bench [--ranks 4] [--size 4M]
                                 [--inner stochastic] [--json-dir DIR]

Prints one markdown table (rel. L2 and SQNR in dB of the worst rank, and how many times lower the
rotated error is) and, with --json-dir, keeps every run's --json file there. Progress goes to stderr.
Needs only the standard library.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

BITS = (2, 4, 8)
BUCKETS = (32, 128, 512, 2048)
OPS = (("round trip", "all_gather"), ("reduce-scatter", "reduce_scatter"))


def run(bench, ranks, size, op, quantizer, inner, bits, bucket, json_path):
    command = [bench, "-b", size, "-e", size, "-n", "1", "-w", "0", "--op", op, "--ranks", str(ranks),
               "--data", "gradients", "--bits", str(bits), "--bucket", str(bucket), "--json", json_path]
    if quantizer == "hadamard":
        command += ["--quantizer", "hadamard", "--inner", inner]
    else:
        command += ["--quantizer", inner]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"error_table.py: {' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
    with open(json_path) as f:
        rows = json.load(f)["rows"]
    if len(rows) != 1 or rows[0].get("rel_l2") is None:
        sys.exit(f"error_table.py: {' '.join(command)}: expected one row with an error, got {rows}")
    return rows[0]["rel_l2"]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True, help="the qsdp-bench binary")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--size", default="4M", help="bytes of the whole buffer (qsdp-bench -b/-e)")
    parser.add_argument("--inner", default="stochastic", help="the policy with and without rotation")
    parser.add_argument("--json-dir", help="keep every run's --json file here")
    args = parser.parse_args(argv[1:])
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"error_table.py: --bench {args.bench}: not an executable file")
    json_dir = args.json_dir or tempfile.mkdtemp(prefix="qsdp_error_table.")
    os.makedirs(json_dir, exist_ok=True)

    lines = []
    total = len(OPS) * len(BITS) * len(BUCKETS) * 2
    done = 0
    for label, op in OPS:
        for bits in BITS:
            for bucket in BUCKETS:
                errors = {}
                for quantizer in ("plain", "hadamard"):
                    name = f"{op}_{quantizer}_{args.inner}{bits}_b{bucket}.json"
                    errors[quantizer] = run(args.bench, args.ranks, args.size, op, quantizer, args.inner,
                                            bits, bucket, os.path.join(json_dir, name))
                    done += 1
                    print(f"error_table.py: {done}/{total} {op} {quantizer} {args.inner}<{bits}> "
                          f"bucket {bucket}: rel. L2 {errors[quantizer]:.3e}", file=sys.stderr, flush=True)
                plain, rotated = errors["plain"], errors["hadamard"]
                lines.append(f"| {label} | {bits} | {bucket} | {plain:.3e} | {-20 * math.log10(plain):.1f} | "
                             f"{rotated:.3e} | {-20 * math.log10(rotated):.1f} | {plain / rotated:.1f}x |")
    print(f"{args.inner}<bits> against hadamard<{args.inner}<bits>>, {args.ranks} ranks, {args.size} buffer, "
          "gradient-like data (qsdp-bench --data gradients); errors of the worst rank")
    print()
    print(f"| op | bits | bucket | rel. L2 | SQNR (dB) | rel. L2 rotated | SQNR rotated (dB) | lower by |")
    print("|---|---|---|---|---|---|---|---|")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
