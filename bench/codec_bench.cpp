// SPDX-License-Identifier: Apache-2.0
//
// Host codec throughput, one core: encode and decode of every built-in policy at 8, 4 and 2 bits
// (bucket 1024), and memcpy of the same buffer in the same binary as the ceiling. Bytes per second
// count bytes read + written (encode: input + packet; decode: packet + output; memcpy: 2 x buffer).
// After the Google Benchmark table it prints each median as a ratio to memcpy's median, next to the
// throughput goals set for the host codec (the `goals` table in main). Where the CPU has AVX-512
// (which serves the stochastic encode), the stochastic encoders also run on the AVX2 loops alone,
// as encode_avx2/..., side by side.
//
// qsdp::decode writes fp32 outputs from detail::host_streaming_bytes on with non-temporal stores
// (16 MiB on Intel CPUs, never on others); --streaming-bytes=N moves that threshold, so one build
// can time both kinds of store (0: always stream; a value above the buffer's size: never).
//
//   qsdp_codec_bench [--values=N] [--streaming-bytes=N] [google benchmark flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <qsdp/codec.hpp>

namespace {

std::size_t g_values = std::size_t{1} << 24;  // 64 MiB of float: well beyond the caches

template <class T>
const std::vector<T>& input() {
  static const std::vector<T> data = [] {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    std::vector<T> v(g_values);
    for (auto& x : v) x = qsdp::from_float<T>(normal(rng));
    return v;
  }();
  return data;
}

void bm_memcpy(benchmark::State& state) {
  const auto& src = input<float>();
  std::vector<float> dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * 2 * src.size() * sizeof(float)));
}

template <class Q, class T>
void bm_encode(benchmark::State& state, Q q, bool avx2_only = false) {
  const auto& src = input<T>();
  std::vector<std::byte> packet(qsdp::compressed_size<T>(q, src.size()));
  qsdp::detail::host_allow_avx512 = !avx2_only;
  for (auto _ : state) {
    qsdp::encode(q, src.data(), src.size(), packet.data());
    benchmark::DoNotOptimize(packet.data());
    benchmark::ClobberMemory();
  }
  qsdp::detail::host_allow_avx512 = true;
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * (src.size() * sizeof(T) + packet.size())));
}

template <class Q, class T>
void bm_decode(benchmark::State& state, Q q) {
  const auto& src = input<T>();
  std::vector<std::byte> packet(qsdp::compressed_size<T>(q, src.size()));
  qsdp::encode(q, src.data(), src.size(), packet.data());
  std::vector<T> out(src.size());
  for (auto _ : state) {
    qsdp::decode(q, packet.data(), out.size(), out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * (src.size() * sizeof(T) + packet.size())));
}

template <class Q>
void register_policy(const std::string& name, Q q) {
  benchmark::RegisterBenchmark(("encode/" + name).c_str(),
                               [q](benchmark::State& s) { bm_encode<Q, float>(s, q); });
  benchmark::RegisterBenchmark(("decode/" + name).c_str(),
                               [q](benchmark::State& s) { bm_decode<Q, float>(s, q); });
#if QSDP_HOST_X86_DISPATCH
  if (qsdp::detail::avx512_kernels_for<Q>() && qsdp::detail::host_cpu_has_avx512())
    benchmark::RegisterBenchmark(("encode_avx2/" + name).c_str(),
                                 [q](benchmark::State& s) { bm_encode<Q, float>(s, q, true); });
#endif
}

/// Keeps the median of every benchmark as well as printing the usual table.
class median_collector : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> bytes_per_second;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median")
        bytes_per_second[r.run_name.function_name] = r.counters.at("bytes_per_second");
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  bool repetitions_given = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--values=", 9) == 0) {
      g_values = std::strtoull(argv[i] + 9, nullptr, 10);
      if (g_values == 0) {
        std::fprintf(stderr, "qsdp_codec_bench: --values needs a positive integer\n");
        return 2;
      }
      continue;
    }
    if (std::strncmp(argv[i], "--streaming-bytes=", 18) == 0) {
      char* end = nullptr;
      const unsigned long long bytes = std::strtoull(argv[i] + 18, &end, 10);
      if (end == argv[i] + 18 || *end != '\0') {
        std::fprintf(stderr, "qsdp_codec_bench: --streaming-bytes needs a byte count, got '%s'\n",
                     argv[i] + 18);
        return 2;
      }
      qsdp::detail::host_streaming_bytes = bytes;
      continue;
    }
    if (std::strncmp(argv[i], "--benchmark_repetitions", 23) == 0) repetitions_given = true;
    args.push_back(argv[i]);
  }
  // Medians of 9 repetitions by default, with the repetitions of all benchmarks interleaved in
  // random order: the machines are shared and noisy, and interleaving spreads a slow spell over
  // every benchmark (memcpy included) instead of sinking one of them.
  std::string repetitions = "--benchmark_repetitions=9",
              aggregates = "--benchmark_report_aggregates_only=true",
              interleave = "--benchmark_enable_random_interleaving=true";
  if (!repetitions_given) {
    args.push_back(repetitions.data());
    args.push_back(aggregates.data());
    args.push_back(interleave.data());
  }
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());

  benchmark::RegisterBenchmark("memcpy", bm_memcpy);
  register_policy("uniform<8>", qsdp::uniform<8>{});
  register_policy("stochastic<8>", qsdp::stochastic<8>{.seed = 1});
  register_policy("symmetric<8>", qsdp::symmetric<8>{});
  register_policy("random_shift<8>", qsdp::random_shift<8>{.seed = 1});
  register_policy("uniform<4>", qsdp::uniform<4>{});
  register_policy("stochastic<4>", qsdp::stochastic<4>{.seed = 1});
  register_policy("symmetric<4>", qsdp::symmetric<4>{});
  register_policy("random_shift<4>", qsdp::random_shift<4>{.seed = 1});
  register_policy("uniform<2>", qsdp::uniform<2>{});
  register_policy("stochastic<2>", qsdp::stochastic<2>{.seed = 1});
  register_policy("symmetric<2>", qsdp::symmetric<2>{});
  register_policy("random_shift<2>", qsdp::random_shift<2>{.seed = 1});
  register_policy("identity", qsdp::identity{});
  // Rotated buckets (goal: encode at 0.4 of memcpy or more), next to plain stochastic<4> at the
  // same bucket size.
  register_policy("hadamard<stochastic<4>>",
                  qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 1024, .seed = 1}});
  register_policy("hadamard<stochastic<4>>/256",
                  qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 256, .seed = 1}});
  register_policy("stochastic<4>/256", qsdp::stochastic<4>{.bucket_size = 256, .seed = 1});
  // OCP Microscaling formats, blocks of 32 (their codes are bytes for mxfp8, packed otherwise).
  register_policy("mxfp8<e4m3>", qsdp::mxfp8<qsdp::e4m3>{});
  register_policy("mxfp8<e4m3, stochastic>",
                  qsdp::mxfp8<qsdp::e4m3, qsdp::rounding::stochastic>{.seed = 1});
  register_policy("mxfp6<e2m3>", qsdp::mxfp6<qsdp::e2m3>{});
  register_policy("mxfp4", qsdp::mxfp4<>{});
  register_policy("mxfp4<stochastic>", qsdp::mxfp4<qsdp::rounding::stochastic>{.seed = 1});
  // NVFP4: blocks of 16 and a pass for the tensor scale before the encode.
  register_policy("nvfp4", qsdp::nvfp4<>{});
  register_policy("nvfp4<stochastic>", qsdp::nvfp4<qsdp::rounding::stochastic>{.seed = 1});

  const std::size_t streaming = qsdp::detail::host_streaming_bytes.load();
  std::printf("qsdp host codec: %zu float values (%.0f MiB), bucket 1024, host path %s, ", g_values,
              g_values * 4.0 / 1048576, qsdp::host_codec_isa());
  if (streaming == std::numeric_limits<std::size_t>::max())
    std::printf("decoded with cached stores\n");
  else
    std::printf("decoded outputs of %zu bytes and more with non-temporal stores\n", streaming);
  median_collector reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  const auto& m = reporter.bytes_per_second;
  if (!m.count("memcpy")) return 0;  // filtered out: no ceiling to compare with
  const double ceiling = m.at("memcpy");
  const std::map<std::string, double> goals = {{"encode/uniform<8>", 0.85},
                                               {"decode/uniform<8>", 0.9},
                                               {"encode/symmetric<8>", 0.85},
                                               {"decode/symmetric<8>", 0.9},
                                               {"encode/stochastic<8>", 0.5},
                                               {"encode/hadamard<stochastic<4>>", 0.4},
                                               {"encode/hadamard<stochastic<4>>/256", 0.4}};
  std::printf("\nratio to memcpy (medians; memcpy %.2f GB/s, bytes read + written)\n",
              ceiling / 1e9);
  std::printf("%-34s %10s %8s %8s %s\n", "benchmark", "GB/s", "ratio", "goal", "");
  for (const auto& [name, bps] : m) {
    if (name == "memcpy") continue;
    const auto goal = goals.find(name);
    const double ratio = bps / ceiling;
    if (goal == goals.end())
      std::printf("%-34s %10.2f %8.2f %8s\n", name.c_str(), bps / 1e9, ratio, "-");
    else
      std::printf("%-34s %10.2f %8.2f %8.2f %s\n", name.c_str(), bps / 1e9, ratio, goal->second,
                  ratio >= goal->second ? "met" : "MISSED");
  }
  return 0;
}
