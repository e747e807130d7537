#!/usr/bin/env python3
"""Alpha-beta model of flat and two-level reduce-scatter and all-gather (docs/benchmarks/two-level.md,
"The model at 64 nodes x 8 GPUs"). Predicts, not measures.

Each GPU has two links: NVLink to the GPUs of its node and a NIC of its own to other nodes (rail-
optimised). An exchange costs each link (messages x latency + bytes / bandwidth) and the two links
run at once (time = the slower). The codec costs (bytes read + written) / codec rate, not overlapped
with the wire (as qsdp runs them). A flat collective sends each peer its chunk: node_size - 1
chunks over NVLink, world - node_size over the NIC. The two-level ones as collectives.hpp
describes: reduce_scatter within the node (node_size - 1 messages of nodes chunks), then across
(nodes - 1 messages of one chunk); all_gather across first, then within. "plain" is the two-level
scheme uncompressed (what a hierarchical NCCL reaches at best), so the speedups are against the
best plain schedule, not a flat one.

    python3 bench/two_level_model.py [--nodes 64] [--node-size 8] [--nic-gbps 400] [--nvlink-gbs 450]
        [--nic-latency-us 5] [--nvlink-latency-us 2] [--codec-gbs 3000] [--dtype-bytes 2]
        [--mib 4 64]
    python3 bench/two_level_model.py --check RUN.json --nic-gbps R --nvlink-gbs B --codec-gbs C ...

--check sets the model against a measured run: each of the file's qsdp rows beside the model's time
for it, the error, and both speedups over flat 8-bit. bench/net/run.sh --node-namespaces gives a
node's ranks one link: pass --nic-gbps as the link's rate over the ranks per node.
"""
import argparse
import json


def packet_bytes(values, bits, value_bytes, bucket=1024, meta=8, header=32):
    """Bytes of one packet: codes, per-bucket metadata, header (0 bits: raw values)."""
    if bits == 0:
        return values * value_bytes + header
    return values * bits / 8 + (values + bucket - 1) // bucket * meta + header


def link(messages, payload, latency_s, bytes_per_s):
    return messages * (latency_s + payload / bytes_per_s)


def flat_seconds(a, count, op, bits):
    """Seconds of a flat qsdp collective at `bits` (0: raw values) for `count` values per rank."""
    L, N = a.node_size, a.nodes
    W = L * N
    p = packet_bytes(count, bits, a.dtype_bytes)
    wire = max(link(L - 1, p, *_nvlink(a)), link(W - L, p, *_nic(a)))
    if op == "reduce_scatter":  # encode W chunks, decode-accumulate W packets
        c = _codec_s(a, W * count, W * p) + _codec_s(a, count, W * p)
    else:  # encode my shard, decode W packets
        c = _codec_s(a, count, p) + _codec_s(a, W * count, W * p)
    return wire + c


def two_level_seconds(a, count, op, bits_in, bits_out):
    """Seconds of a two-level qsdp collective, `bits_in` inside the node and `bits_out` across."""
    L, N = a.node_size, a.nodes
    W = L * N
    p_in = packet_bytes(N * count, bits_in, a.dtype_bytes)
    p_out = packet_bytes(count, bits_out, a.dtype_bytes)
    wire = link(L - 1, p_in, *_nvlink(a)) + link(N - 1, p_out, *_nic(a))
    if op == "reduce_scatter":
        c = (_codec_s(a, W * count, L * p_in) + _codec_s(a, N * count, L * p_in) +
             _codec_s(a, N * count, N * p_out) + _codec_s(a, count, N * p_out))
    else:
        c = (_codec_s(a, count, p_out) + _codec_s(a, N * count, N * p_out) +
             _codec_s(a, N * count, p_in) + _codec_s(a, W * count, L * p_in))
    return wire + c


def _nvlink(a):
    return a.nvlink_latency_us * 1e-6, a.nvlink_gbs * 1e9


def _nic(a):
    return a.nic_latency_us * 1e-6, a.nic_gbps * 1e9 / 8


def _codec_s(a, values, packet_bytes_total):
    """Encode: read values, write packets (or the reverse), at the codec's rate."""
    return (values * a.dtype_bytes + packet_bytes_total) / (a.codec_gbs * 1e9)


def model(a, count, op, inside_bits, across_bits, flat_bits):
    """Seconds of (flat qsdp at flat_bits, two-level qsdp, plain two-level) for `count` values per
    rank."""
    return (flat_seconds(a, count, op, flat_bits),
            two_level_seconds(a, count, op, inside_bits, across_bits),
            two_level_seconds(a, count, op, 0, 0))


# qsdp-bench-two-level's variants as the model sees them: (flat bits,) or (inside bits, across bits);
# 0 bits is raw values. The model has no rotation cost: hadamard<stochastic<4>> counts as 4 bits.
VARIANTS = {
    "flat stochastic<8>": (8,), "flat stochastic<4>": (4,),
    "two-level stochastic<8> | stochastic<4>": (8, 4),
    "two-level stochastic<8> | hadamard<stochastic<4>>": (8, 4),
    "two-level identity | hadamard<stochastic<4>>": (0, 4),
    "flat random_shift<8>": (8,), "flat random_shift<4>": (4,),
    "two-level random_shift<8> | random_shift<8>": (8, 8),
    "two-level identity | random_shift<8>": (0, 8),
}


def check(a, path):
    """Prints the model's time for every qsdp row of a qsdp-bench-two-level --json file beside the
    measured one, the error of each, and the error of the speedups over flat 8-bit."""
    with open(path) as f:
        run = json.load(f)
    a.node_size = run["node_size"]
    a.nodes = run["ranks"] // a.node_size
    a.dtype_bytes = 4  # qsdp-bench-two-level times fp32 values
    print(f"# MODEL against {path}: {a.nodes} nodes x {a.node_size} ranks, link between nodes "
          f"{a.nic_gbps:g} Gbit/s + {a.nic_latency_us:g} us per rank, inside {a.nvlink_gbs:g} GB/s + "
          f"{a.nvlink_latency_us:g} us, codec {a.codec_gbs:g} GB/s, fp32")
    print("| op | B per rank | variant | measured (ms) | model (ms) | error | measured vs flat 8-bit | "
          "model vs flat 8-bit |")
    print("|---|---|---|---|---|---|---|---|")
    errors, ratio_errors = [], []
    flat8 = {}
    rows = [r for r in run["rows"] if r["variant"] in VARIANTS]
    for r in rows:
        if VARIANTS[r["variant"]] == (8,):
            flat8[(r["op"], r["bytes_per_rank"])] = r
    for r in rows:
        count = r["bytes_per_rank"] // 4
        bits = VARIANTS[r["variant"]]

        def predict(b):
            return (flat_seconds(a, count, r["op"], b[0]) if len(b) == 1 else
                    two_level_seconds(a, count, r["op"], *b))
        predicted = predict(bits)
        error = predicted / r["seconds"] - 1
        errors.append(abs(error))
        base = flat8.get((r["op"], r["bytes_per_rank"]))
        measured_ratio = model_ratio = "-"
        if base is not None and base is not r:
            m = base["seconds"] / r["seconds"]
            mo = predict((8,)) / predicted
            ratio_errors.append(abs(mo / m - 1))
            measured_ratio, model_ratio = f"{m:.2f}x", f"{mo:.2f}x"
        variant = r["variant"].replace(" | ", " / ")  # a markdown cell holds no bar
        print(f"| {r['op']} | {r['bytes_per_rank']} | {variant} | {r['seconds'] * 1e3:.1f} | "
              f"{predicted * 1e3:.1f} | {100 * error:+.0f} % | {measured_ratio} | {model_ratio} |")
    if errors:
        errors.sort()
        print(f"\n{len(errors)} rows; |error| of the times: median {100 * errors[len(errors) // 2]:.0f} %, "
              f"largest {100 * errors[-1]:.0f} %", end="")
        if ratio_errors:
            ratio_errors.sort()
            print(f"; of the speedups over flat 8-bit: median "
                  f"{100 * ratio_errors[len(ratio_errors) // 2]:.0f} %, largest {100 * ratio_errors[-1]:.0f} %")
        else:
            print()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=64)
    p.add_argument("--node-size", type=int, default=8)
    p.add_argument("--nic-gbps", type=float, default=400)
    p.add_argument("--nvlink-gbs", type=float, default=450)
    p.add_argument("--nic-latency-us", type=float, default=5)
    p.add_argument("--nvlink-latency-us", type=float, default=2)
    p.add_argument("--codec-gbs", type=float, default=3000)
    p.add_argument("--dtype-bytes", type=int, default=2)
    p.add_argument("--mib", type=float, nargs="+", default=[4, 64])
    p.add_argument("--check", metavar="JSON",
                   help="set the model against a qsdp-bench-two-level --json file (its nodes and "
                        "sizes; the links and the codec from the options)")
    a = p.parse_args()
    if a.check:
        check(a, a.check)
        return
    print(f"# MODEL (predicted, not measured): {a.nodes} nodes x {a.node_size} GPUs, NIC "
          f"{a.nic_gbps:g} Gbit/s + {a.nic_latency_us:g} us per GPU, NVLink {a.nvlink_gbs:g} GB/s + "
          f"{a.nvlink_latency_us:g} us, codec {a.codec_gbs:g} GB/s, {a.dtype_bytes}-byte values")
    print("| per rank | op | flat qsdp (bits) | two-level qsdp (inside / across) | plain two-level | "
          "two-level vs flat | two-level vs plain |")
    print("|---|---|---|---|---|---|---|")
    for mib in a.mib:
        count = int(mib * 2**20 / a.dtype_bytes)
        for op, inside, across, flat_bits in (("reduce_scatter", 8, 4, 8), ("reduce_scatter", 8, 8, 8),
                                              ("all_gather", 0, 8, 8), ("all_gather", 8, 4, 4)):
            f, t, plain = model(a, count, op, inside, across, flat_bits)
            inside_name = "raw" if inside == 0 else f"{inside}"
            print(f"| {mib:g} MiB | {op} | {f * 1e3:.2f} ms ({flat_bits}) | {t * 1e3:.2f} ms "
                  f"({inside_name} / {across}) | {plain * 1e3:.2f} ms | {f / t:.2f}x | {plain / t:.2f}x |")


if __name__ == "__main__":
    main()
