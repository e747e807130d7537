// SPDX-License-Identifier: Apache-2.0
//
// qsdp-bench's many-tensor mode (--tensors N --sizes A..B, or --mix gpt; all_gather or
// reduce_scatter on the host backends): the same tensors moved four ways, side by side in one run,
//
//   plain      the plain exchange over the tensors' concatenation, as a user who buckets does;
//   per tensor one qsdp call per tensor;
//   grouped    the same calls between qsdp::group_start and qsdp::group_end;
//   one tensor one qsdp call over the concatenation: the speedup a single tensor of the same total
//              gets, which the grouped calls are measured against,
//
// each timed as the sweep's calls are (after a barrier, the slowest rank's time, the median over
// -n iterations after -w warm-up ones), with the size gate and pipeline of --min-compressed and
// --max-pieces. Included by qsdp_bench_host.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <qsdp/collectives.hpp>

#include "qsdp_bench.hpp"

namespace qsdp_bench::host {

/// Values per rank of each tensor: all_gather's shard, reduce_scatter's output chunk.
inline std::vector<std::size_t> many_counts(const options& o, std::size_t value_size, int world) {
  std::vector<std::size_t> counts;
  if (o.mix == "gpt") {
    // A 6-layer GPT of width 384, vocabulary 8192 and context 256 (the output layer tied to the
    // token embedding), each parameter sharded over the ranks as FSDP shards it.
    constexpr std::size_t d = 384, vocab = 8192, context = 256, layers = 6;
    std::vector<std::size_t> params{vocab * d, context * d};
    for (std::size_t l = 0; l < layers; ++l)
      for (std::size_t n : {d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d})
        params.push_back(n);
    params.push_back(d);
    params.push_back(d);
    const auto w = static_cast<std::size_t>(world);
    for (std::size_t n : params) counts.push_back((n + w - 1) / w);
    return counts;
  }
  const double low = static_cast<double>(o.tensor_min), high = static_cast<double>(o.tensor_max);
  for (int i = 0; i < o.tensors; ++i) {
    const double t = o.tensors == 1 ? 0.0 : static_cast<double>(i) / (o.tensors - 1);
    const double bytes = low * std::pow(high / low, t);
    counts.push_back(std::max<std::size_t>(1, static_cast<std::size_t>(bytes) / value_size));
  }
  return counts;
}

/// The rank's buffers: the tensors laid out one after another in one input and one output (so
/// that the plain and one-tensor calls run over the same memory as their concatenation).
template <class T>
struct many_buffers {
  std::vector<std::size_t> counts, offsets;  // per tensor, values per rank and where they start
  std::size_t total = 0;
  std::vector<T> input, output;
};

/// One way of moving the tensors: its median time and how the size gate treated its calls.
struct many_row {
  std::string variant;
  double time_us = 0;
  qsdp::call_counters counted;  // one iteration's calls
};

/// Runs the mode on `comm`, r's barrier and gather bound to it; plain(send, recv, count) is the
/// plain exchange of `count` values per rank. Rank 0 prints.
template <class T, class Q, class Comm>
void run_many(const options& o, const Q& q, const std::string& policy, Comm& comm, runner<T>& r,
              const std::function<void(const T*, T*, std::size_t)>& plain) {
  const auto world = static_cast<std::size_t>(comm.size());
  const bool gather = o.op == op_kind::all_gather;
  many_buffers<T> b;
  b.counts = many_counts(o, sizeof(T), comm.size());
  for (std::size_t n : b.counts) {
    b.offsets.push_back(b.total);
    b.total += n;
  }
  b.input = make_input<T>(gather ? b.total : b.total * world, comm.rank(), gradient_data(o));
  b.output.assign(gather ? b.total * world : b.total, T{});
  const qsdp::call_options options{.min_compressed_bytes = o.min_compressed,
                                   .max_pieces = o.max_pieces};

  auto one_call = [&](std::size_t offset, std::size_t count) {
    if (gather)
      qsdp::all_gather(comm, q, b.input.data() + offset, b.output.data() + offset * world, count,
                       options);
    else
      qsdp::reduce_scatter(comm, q, b.input.data() + offset * world, b.output.data() + offset,
                           count, qsdp::reduce_op::sum, options);
  };
  auto per_tensor = [&] {
    for (std::size_t i = 0; i < b.counts.size(); ++i) one_call(b.offsets[i], b.counts[i]);
  };
  auto grouped = [&] {
    qsdp::group_start(comm);
    per_tensor();
    qsdp::group_end(comm);
  };
  const std::vector<std::pair<std::string, std::function<void()>>> variants{
      {"plain, one call over the concatenation",
       [&] { plain(b.input.data(), b.output.data(), b.total); }},
      {"qsdp, one call per tensor", per_tensor},
      {"qsdp, one group of the calls", grouped},
      {"qsdp, one call over the concatenation", [&] { one_call(0, b.total); }},
  };
  console::progress shown(variants.size(), r.rank == 0);
  std::vector<many_row> rows;
  for (const auto& [variant, call] : variants) {
    shown.step(std::string(op_name(o.op)) + " of " + std::to_string(b.counts.size()) +
               " tensors: " + variant);
    comm.workspace().counters = {};
    call();
    many_row row{variant, 0, comm.workspace().counters};
    row.time_us = median(time_iterations(r, o, call, false));
    rows.push_back(row);
  }
  if (r.rank != 0) return;

  std::size_t smallest = b.counts.front(), largest = b.counts.front();
  for (std::size_t n : b.counts) smallest = std::min(smallest, n), largest = std::max(largest, n);
  std::printf(
      "# qsdp-bench, many tensors: op %s, quantizer %s, bucket %zu, dtype %s, backend %s, %zu "
      "ranks\n"
      "# %zu tensors (%s), %zu to %zu values per rank each, %zu in all (%zu B per rank)\n"
      "# size gate %zu B per peer (--min-compressed), max pieces %zu; time: the slowest rank's, "
      "median of %d calls after %d warm-up calls\n#\n",
      op_name(o.op), policy.c_str(), o.bucket, dtype_label(o.dtype), o.backend.c_str(), world,
      b.counts.size(), o.mix.empty() ? "log-spaced over --sizes" : "--mix gpt", smallest, largest,
      b.total, b.total * sizeof(T), o.min_compressed, o.max_pieces, o.iterations, o.warmup);
  std::printf("#  %-40s %12s %9s %12s\n", "variant", "time (us)", "speedup", "gated calls");
  const double plain_us = rows[0].time_us;
  for (const many_row& row : rows) {
    const std::uint64_t calls = row.counted.compressed_calls + row.counted.gated_calls;
    const std::string gated =
        calls == 0 ? "-" : std::to_string(row.counted.gated_calls) + " of " + std::to_string(calls);
    std::printf("   %-40s %12.1f %8.2fx %12s\n", row.variant.c_str(), row.time_us,
                plain_us / row.time_us, gated.c_str());
  }
  const double grouped_speedup = plain_us / rows[2].time_us;
  const double one_speedup = plain_us / rows[3].time_us;
  std::printf(
      "#\n# speedup: plain time / time. gated calls: those the size gate sent uncompressed, of the "
      "qsdp calls one iteration makes.\n"
      "# verdict: the group is %.2fx faster than one call per tensor and reaches %.0f %% of the "
      "speedup of one call over the same total (%.2fx of %.2fx)\n",
      rows[1].time_us / rows[2].time_us, 100.0 * grouped_speedup / one_speedup, grouped_speedup,
      one_speedup);
  if (!o.json.empty()) {
    std::FILE* f = std::fopen(o.json.c_str(), "w");
    if (!f) throw std::runtime_error("qsdp-bench: cannot write --json " + o.json);
    std::fprintf(f,
                 "{\"mode\": \"many\", \"op\": \"%s\", \"quantizer\": \"%s\", \"dtype\": \"%s\", "
                 "\"backend\": \"%s\", \"ranks\": %zu, \"tensors\": %zu, \"values_per_rank\": %zu, "
                 "\"min_compressed_bytes\": %zu, \"link\": %s, \"rows\": [",
                 op_name(o.op), policy.c_str(), dtype_label(o.dtype), o.backend.c_str(), world,
                 b.counts.size(), b.total, o.min_compressed, link_json(o).c_str());
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::fprintf(f,
                   "%s\n  {\"variant\": \"%s\", \"time_us\": %.9g, \"speedup\": %.9g, "
                   "\"gated_calls\": %llu, \"compressed_calls\": %llu}",
                   i ? "," : "", rows[i].variant.c_str(), rows[i].time_us,
                   plain_us / rows[i].time_us,
                   static_cast<unsigned long long>(rows[i].counted.gated_calls),
                   static_cast<unsigned long long>(rows[i].counted.compressed_calls));
    std::fprintf(f, "\n]}\n");
    std::fclose(f);
  }
}

}  // namespace qsdp_bench::host
