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
"""
import argparse


def packet_bytes(values, bits, value_bytes, bucket=1024, meta=8, header=32):
    """Bytes of one packet: codes, per-bucket metadata, header (0 bits: raw values)."""
    if bits == 0:
        return values * value_bytes + header
    return values * bits / 8 + (values + bucket - 1) // bucket * meta + header


def link(messages, payload, latency_s, bytes_per_s):
    return messages * (latency_s + payload / bytes_per_s)


def model(a, count, op, inside_bits, across_bits, flat_bits):
    """Seconds of (flat qsdp at flat_bits, two-level qsdp, plain two-level) for `count` values per
    rank."""
    L, N = a.node_size, a.nodes
    W = L * N
    vb = a.dtype_bytes
    nvl = (a.nvlink_latency_us * 1e-6, a.nvlink_gbs * 1e9)
    nic = (a.nic_latency_us * 1e-6, a.nic_gbps * 1e9 / 8)
    codec = a.codec_gbs * 1e9

    def codec_s(values_in, packet_out):  # encode: read values, write packets (or the reverse)
        return (values_in * vb + packet_out) / codec

    def flat(bits):
        p = packet_bytes(count, bits, vb)
        wire = max(link(L - 1, p, *nvl), link(W - L, p, *nic))
        if op == "reduce_scatter":  # encode W chunks, decode-accumulate W packets
            c = codec_s(W * count, W * p) + codec_s(count, W * p)
        else:  # encode my shard, decode W packets
            c = codec_s(count, p) + codec_s(W * count, W * p)
        return wire + c

    def two(bits_in, bits_out):
        p_in = packet_bytes(N * count, bits_in, vb)
        p_out = packet_bytes(count, bits_out, vb)
        wire = link(L - 1, p_in, *nvl) + link(N - 1, p_out, *nic)
        if op == "reduce_scatter":
            c = (codec_s(W * count, L * p_in) + codec_s(N * count, L * p_in) +
                 codec_s(N * count, N * p_out) + codec_s(count, N * p_out))
        else:
            c = (codec_s(count, p_out) + codec_s(N * count, N * p_out) +
                 codec_s(N * count, p_in) + codec_s(W * count, L * p_in))
        return wire + c

    return flat(flat_bits), two(inside_bits, across_bits), two(0, 0)


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
    a = p.parse_args()
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
