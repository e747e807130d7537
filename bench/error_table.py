#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Error tables from qsdp-bench runs on the in-process backend (docs/benchmarks/codec.md).

The default table is qsdp::hadamard's: 2, 4 and 8 bits, with and without the rotation, buckets 32 to
2048, as a round trip (an all_gather of gradient-like data) and as a reduce-scatter. With --formats,
the policy table instead: the integer policies beside the block-scaled float ones (mxfp8, mxfp6,
mxfp4, nvfp4 and their hadamard<> forms), each with the bits per value it sends (scales, flags and header included)
and its round-trip error on weight-like and on gradient-like data.

    python3 bench/error_table.py --bench build/release/bench/qsdp-bench [--ranks 4] [--size 4M]
                                 [--inner stochastic] [--formats] [--json-dir DIR]

Prints one markdown table (rel. L2 and SQNR in dB of the worst rank) and, with --json-dir, keeps
every run's --json file there. Progress goes to stderr. Needs only the standard library.
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


# --formats: (qsdp-bench arguments naming the policy, bucket). The integer policies at their usual
# bucket of 1024 and at the MX block of 32; every MX policy at the spec's 32, NVFP4 at its 16.
FORMATS = (
    (["--quantizer", "uniform", "--bits", "8"], 1024),
    (["--quantizer", "stochastic", "--bits", "8"], 1024),
    (["--quantizer", "uniform", "--bits", "8"], 32),
    (["--quantizer", "mxfp8"], 32),
    (["--quantizer", "mxfp8", "--rounding", "stochastic"], 32),
    (["--quantizer", "mxfp8", "--element", "e5m2"], 32),
    (["--quantizer", "uniform", "--bits", "6"], 1024),
    (["--quantizer", "mxfp6"], 32),
    (["--quantizer", "mxfp6", "--element", "e3m2"], 32),
    (["--quantizer", "uniform", "--bits", "4"], 1024),
    (["--quantizer", "stochastic", "--bits", "4"], 1024),
    (["--quantizer", "uniform", "--bits", "4"], 32),
    (["--quantizer", "mxfp4"], 32),
    (["--quantizer", "mxfp4", "--rounding", "stochastic"], 32),
    (["--quantizer", "hadamard", "--inner", "stochastic", "--bits", "4"], 1024),
    (["--quantizer", "hadamard", "--inner", "mxfp4", "--rounding", "stochastic"], 32),
    (["--quantizer", "nvfp4"], 16),
    (["--quantizer", "nvfp4", "--rounding", "stochastic"], 16),
    (["--quantizer", "hadamard", "--inner", "nvfp4", "--rounding", "stochastic"], 16),
)


def error_cells(rel_l2):
    """Two table cells: the rel. L2 error and its SQNR in dB."""
    return f"{rel_l2:.3e} | {-20 * math.log10(rel_l2):.1f}"


def run_bench(bench, ranks, size, op, data, policy, bucket, json_path):
    """One qsdp-bench run of one size; returns its JSON (policy name, rows)."""
    command = [bench, "-b", size, "-e", size, "-n", "1", "-w", "0", "--op", op, "--ranks", str(ranks),
               "--data", data, "--bucket", str(bucket), "--json", json_path] + policy
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"error_table.py: {' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
    with open(json_path) as f:
        report = json.load(f)
    rows = report["rows"]
    if len(rows) != 1 or rows[0].get("rel_l2") is None:
        sys.exit(f"error_table.py: {' '.join(command)}: expected one row with an error, got {rows}")
    return report


def formats_table(args, json_dir):
    """The --formats table: bits per value and round-trip errors of each policy of FORMATS."""
    lines = []
    for n, (policy, bucket) in enumerate(FORMATS):
        errors = {}
        for data in ("weights", "gradients"):
            path = os.path.join(json_dir, f"formats_{n}_{data}.json")
            report = run_bench(args.bench, args.ranks, args.size, "all_gather", data, policy, bucket, path)
            row = report["rows"][0]
            errors[data] = row["rel_l2"]
            bits = 8 * row["wire_bytes"] / row["count"]
            print(f"error_table.py: {2 * n + len(errors)}/{2 * len(FORMATS)} {report['quantizer']} "
                  f"bucket {bucket} {data}: rel. L2 {row['rel_l2']:.3e}", file=sys.stderr, flush=True)
        lines.append(f"| `{report['quantizer']}` | {bucket} | {bits:.2f} | {error_cells(errors['weights'])} | "
                     f"{error_cells(errors['gradients'])} |")
    print(f"Round trip (all_gather), {args.ranks} ranks, {args.size} buffer; weights N(0, 0.02), gradients "
          "N(0, 1e-3) with one value in 97 from N(0, 1); bits per value sent, scales, flags and header "
          "included; errors of the worst rank")
    print()
    print("| policy | bucket | bits per value | rel. L2 weights | SQNR (dB) | rel. L2 gradients | SQNR (dB) |")
    print("|---|---|---|---|---|---|---|")
    for line in lines:
        print(line)
    return 0


def run(bench, ranks, size, op, quantizer, inner, bits, bucket, json_path):
    """The hadamard table's run: inner<bits>, rotated or not, on gradient-like data; its rel. L2."""
    policy = ["--quantizer", "hadamard", "--inner", inner] if quantizer == "hadamard" else ["--quantizer", inner]
    report = run_bench(bench, ranks, size, op, "gradients", policy + ["--bits", str(bits)], bucket, json_path)
    return report["rows"][0]["rel_l2"]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True, help="the qsdp-bench binary")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--size", default="4M", help="bytes of the whole buffer (qsdp-bench -b/-e)")
    parser.add_argument("--inner", default="stochastic", help="the policy with and without rotation")
    parser.add_argument("--formats", action="store_true",
                        help="the policy table: integer and MX policies, bits per value and errors")
    parser.add_argument("--json-dir", help="keep every run's --json file here")
    args = parser.parse_args(argv[1:])
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"error_table.py: --bench {args.bench}: not an executable file")
    json_dir = args.json_dir or tempfile.mkdtemp(prefix="qsdp_error_table.")
    os.makedirs(json_dir, exist_ok=True)
    if args.formats:
        return formats_table(args, json_dir)

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
                lines.append(f"| {label} | {bits} | {bucket} | {error_cells(plain)} | {error_cells(rotated)} | "
                             f"{plain / rotated:.1f}x |")
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
