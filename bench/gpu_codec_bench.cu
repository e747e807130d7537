// SPDX-License-Identifier: Apache-2.0
//
// Device codec throughput (Google Benchmark, manual time from CUDA events): encode, decode and
// decode-accumulate of bf16 (and fp32) at 8, 4 and 2 bits, bucket 1024, on 1 GiB of input by
// default, each next to a device-to-device copy in the same binary. Bytes per second count bytes
// read + written:
//   copy            2 x buffer
//   encode          input + packet
//   decode          packet + output
//   accumulate      packet + 2 x fp32 accumulator (read and written)
//   reduce (world)  world packets + output: reduce-scatter's fused decode of `world` ranks' packets
// After Google Benchmark's table it prints each median as a fraction of the copy's median
// bandwidth, next to the goal (>= 0.90 for bf16 encode, decode and decode-accumulate at 8 and
// 4 bits).
//
//   qsdp_gpu_codec_bench [--bytes=N] [--world=W] [google benchmark flags]
#include <benchmark/benchmark.h>
#include <thrust/device_vector.h>
#include <thrust/random.h>
#include <thrust/transform.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <qsdp/collectives.hpp>  // reduce_sink: to time reduce-scatter's fused kernel alone
#include <qsdp/device_codec.hpp>

namespace {

std::size_t g_bytes = std::size_t{1} << 30;  // of input values
int g_world = 8;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "qsdp_gpu_codec_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

/// Normal-ish values made on the device (no host round trip for a gigabyte).
template <class T>
struct make_value {
  __device__ T operator()(std::size_t i) const {
    thrust::default_random_engine rng(static_cast<unsigned>(i * 2654435761u));
    thrust::normal_distribution<float> normal;
    rng.discard(1);
    return qsdp::detail::element_traits<T>::from_float(normal(rng));
  }
};

template <class T>
thrust::device_vector<T>& input() {
  static thrust::device_vector<T> data = [] {
    thrust::device_vector<T> v(g_bytes / sizeof(T));
    thrust::transform(thrust::counting_iterator<std::size_t>(0),
                      thrust::counting_iterator<std::size_t>(v.size()), v.begin(), make_value<T>{});
    return v;
  }();
  return data;
}

/// Medians of every benchmark, for the ratio table.
std::map<std::string, double> g_median_gbps;

/// Times body() with CUDA events per iteration (manual time) and records the median bandwidth.
template <class Body>
void run_timed(benchmark::State& state, const std::string& name, double bytes_moved, Body&& body) {
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
  body();  // warm-up (and first-touch of the output)
  cuda_ok(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> seconds;
  for (auto _ : state) {
    cuda_ok(cudaEventRecord(start), "cudaEventRecord");
    body();
    cuda_ok(cudaEventRecord(stop), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    state.SetIterationTime(ms / 1e3);
    seconds.push_back(ms / 1e3);
  }
  cuda_ok(cudaGetLastError(), name.c_str());
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  state.counters["GB/s"] = bytes_moved / median / 1e9;
  g_median_gbps[name] = bytes_moved / median / 1e9;
  state.SetBytesProcessed(
      static_cast<std::int64_t>(bytes_moved * static_cast<double>(state.iterations())));
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
}

void bm_copy(benchmark::State& state) {
  auto& src = input<__nv_bfloat16>();
  thrust::device_vector<__nv_bfloat16> dst(src.size());
  const std::size_t bytes = src.size() * sizeof(__nv_bfloat16);
  run_timed(state, "copy", 2.0 * static_cast<double>(bytes), [&] {
    cuda_ok(cudaMemcpyAsync(thrust::raw_pointer_cast(dst.data()),
                            thrust::raw_pointer_cast(src.data()), bytes, cudaMemcpyDeviceToDevice),
            "cudaMemcpyAsync");
  });
}

/// A device buffer of packet bytes.
struct packet_buffer {
  thrust::device_vector<unsigned char> bytes;
  explicit packet_buffer(std::size_t n) : bytes(n) {}
  std::byte* get() { return reinterpret_cast<std::byte*>(thrust::raw_pointer_cast(bytes.data())); }
  std::size_t size() const { return bytes.size(); }
};

/// The input encoded once (what the decode benchmarks read).
template <class Q, class T>
packet_buffer encoded_input(const Q& q) {
  auto& src = input<T>();
  packet_buffer packet(qsdp::compressed_size<T>(q, src.size()));
  qsdp::encode(q, thrust::raw_pointer_cast(src.data()), src.size(), packet.get(),
               qsdp::rng_position{}, cudaStream_t{});
  return packet;
}

template <class Q, class T>
void bm_encode(benchmark::State& state, const std::string& name, Q q) {
  auto& src = input<T>();
  packet_buffer packet(qsdp::compressed_size<T>(q, src.size()));
  run_timed(state, name, static_cast<double>(src.size() * sizeof(T) + packet.size()), [&] {
    qsdp::encode(q, thrust::raw_pointer_cast(src.data()), src.size(), packet.get(),
                 qsdp::rng_position{}, cudaStream_t{});
  });
}

template <class Q, class T>
void bm_decode(benchmark::State& state, const std::string& name, Q q) {
  auto& src = input<T>();
  packet_buffer packet = encoded_input<Q, T>(q);
  thrust::device_vector<T> out(src.size());
  run_timed(state, name, static_cast<double>(src.size() * sizeof(T) + packet.size()), [&] {
    qsdp::decode(q, packet.get(), src.size(), thrust::raw_pointer_cast(out.data()), cudaStream_t{});
  });
  qsdp::synchronize_and_check(cudaStream_t{});
}

template <class Q, class T>
void bm_accumulate(benchmark::State& state, const std::string& name, Q q) {
  auto& src = input<T>();
  packet_buffer packet = encoded_input<Q, T>(q);
  thrust::device_vector<float> acc(src.size(), 0.0f);
  run_timed(state, name, static_cast<double>(packet.size() + 2 * src.size() * sizeof(float)), [&] {
    qsdp::decode_accumulate(q, packet.get(), 1, src.size(), thrust::raw_pointer_cast(acc.data()),
                            cudaStream_t{});
  });
  qsdp::synchronize_and_check(cudaStream_t{});
}

/// Reduce-scatter's fused decode: world packets of count/world values each, summed into T.
template <class Q, class T>
void bm_reduce(benchmark::State& state, const std::string& name, Q q) {
  auto& src = input<T>();
  const std::size_t shard = src.size() / static_cast<std::size_t>(g_world);
  const std::size_t packet_bytes = qsdp::compressed_size<T>(q, shard);
  thrust::device_vector<unsigned char> packets(packet_bytes * static_cast<std::size_t>(g_world));
  auto* p = reinterpret_cast<std::byte*>(thrust::raw_pointer_cast(packets.data()));
  for (int r = 0; r < g_world; ++r)
    qsdp::encode(q, thrust::raw_pointer_cast(src.data()) + static_cast<std::size_t>(r) * shard,
                 shard, p + static_cast<std::size_t>(r) * packet_bytes,
                 qsdp::rng_position{0, static_cast<std::uint32_t>(r)}, cudaStream_t{});
  thrust::device_vector<T> out(shard);
  const qsdp::detail::header_expectation want = qsdp::detail::expectation_for<T>(q, shard);
  auto* failure = qsdp::detail::cuda::codec_report(0, "bench");
  T* o = thrust::raw_pointer_cast(out.data());
  run_timed(
      state, name,
      static_cast<double>(packet_bytes * static_cast<std::size_t>(g_world) + shard * sizeof(T)),
      [&] {
        qsdp::detail::cuda::launch_decode(
            q, p, packet_bytes, static_cast<unsigned>(g_world), shard, want, 0, failure,
            qsdp::detail::cuda::reduce_sink<T>{o, true, true, static_cast<float>(g_world)},
            cudaStream_t{}, "bench");
      });
  qsdp::synchronize_and_check(cudaStream_t{});
}

template <class Q, class T>
void register_all(const std::string& tag, Q q) {
  const std::string e = "encode/" + tag, d = "decode/" + tag, a = "accumulate/" + tag,
                    r = "reduce/" + tag;
  benchmark::RegisterBenchmark(e.c_str(), [q, e](benchmark::State& s) {
    bm_encode<Q, T>(s, e, q);
  })->UseManualTime();
  benchmark::RegisterBenchmark(d.c_str(), [q, d](benchmark::State& s) {
    bm_decode<Q, T>(s, d, q);
  })->UseManualTime();
  benchmark::RegisterBenchmark(a.c_str(), [q, a](benchmark::State& s) {
    bm_accumulate<Q, T>(s, a, q);
  })->UseManualTime();
  benchmark::RegisterBenchmark(r.c_str(), [q, r](benchmark::State& s) {
    bm_reduce<Q, T>(s, r, q);
  })->UseManualTime();
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--bytes=", 8) == 0)
      g_bytes = std::strtoull(argv[i] + 8, nullptr, 10);
    if (std::strncmp(argv[i], "--world=", 8) == 0) g_world = std::atoi(argv[i] + 8);
  }
  if (!qsdp::detail::cuda::device_available()) {
    std::puts("qsdp_gpu_codec_bench: no usable CUDA device here; nothing to measure");
    return 0;
  }
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s, %d SMs, input %zu bytes, reduce over %d packets\n", prop.name,
              prop.multiProcessorCount, g_bytes, g_world);

  benchmark::RegisterBenchmark("copy", bm_copy)->UseManualTime();
  register_all<qsdp::uniform<8>, __nv_bfloat16>("uniform<8>/bf16", {});
  register_all<qsdp::uniform<4>, __nv_bfloat16>("uniform<4>/bf16", {});
  register_all<qsdp::uniform<2>, __nv_bfloat16>("uniform<2>/bf16", {});
  register_all<qsdp::stochastic<8>, __nv_bfloat16>("stochastic<8>/bf16", {});
  register_all<qsdp::stochastic<4>, __nv_bfloat16>("stochastic<4>/bf16", {});
  register_all<qsdp::random_shift<8>, __nv_bfloat16>("random_shift<8>/bf16", {});
  register_all<qsdp::symmetric<8>, __nv_bfloat16>("symmetric<8>/bf16", {});
  register_all<qsdp::uniform<8>, float>("uniform<8>/f32", {});
  // The rotated kernels (hadamard_kernels.cuh), bucket 1024: what the rotation costs on the device.
  register_all<qsdp::hadamard<qsdp::stochastic<4>>, __nv_bfloat16>("hadamard<stochastic<4>>/bf16",
                                                                   {});
  register_all<qsdp::hadamard<qsdp::stochastic<4>>, float>("hadamard<stochastic<4>>/f32", {});

  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  const double copy = g_median_gbps.count("copy") ? g_median_gbps["copy"] : 0.0;
  std::printf(
      "\nmedian bandwidth (read + written) as a fraction of the device-to-device copy (%.0f "
      "GB/s):\n",
      copy);
  std::printf("%-34s %10s %8s  %s\n", "benchmark", "GB/s", "of copy", "goal");
  for (const auto& [name, gbps] : g_median_gbps) {
    const bool goal =
        name.find("/bf16") != std::string::npos && name.find("uniform<") != std::string::npos &&
        (name.find("<8>") != std::string::npos || name.find("<4>") != std::string::npos) &&
        name.rfind("reduce/", 0) != 0;
    std::printf("%-34s %10.0f %8.2f  %s\n", name.c_str(), gbps, copy > 0 ? gbps / copy : 0.0,
                goal ? (copy > 0 && gbps / copy >= 0.90 ? ">= 0.90 met" : ">= 0.90 MISSED") : "-");
  }
  return 0;
}
