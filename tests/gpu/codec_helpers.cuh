// SPDX-License-Identifier: Apache-2.0
// Definitions of gpu_support.hpp's codec helpers (included by the gpu_codec_*.cu files, which
// instantiate them).
#pragma once

#include <thrust/device_vector.h>

#include <cstring>
#include <stdexcept>

#include <qsdp/device_codec.hpp>

#include "gpu_support.hpp"

namespace gpu_test {

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// A CUDA graph of what `work()` queues on `stream` (captured thread-locally; a capture that
/// throws is ended before the exception leaves), instantiated and ready to launch.
class captured_graph {
 public:
  template <class Work>
  captured_graph(cudaStream_t stream, Work&& work) : stream_(stream) {
    cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    try {
      work();
    } catch (...) {
      (void)cudaStreamEndCapture(stream, &graph_);
      if (graph_) (void)cudaGraphDestroy(graph_);
      throw;
    }
    cuda_ok(cudaStreamEndCapture(stream, &graph_), "end capture");
    cuda_ok(cudaGraphInstantiate(&exec_, graph_, 0), "instantiate");
  }
  captured_graph(const captured_graph&) = delete;
  captured_graph& operator=(const captured_graph&) = delete;
  ~captured_graph() {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    if (graph_) (void)cudaGraphDestroy(graph_);
  }
  void launch() { cuda_ok(cudaGraphLaunch(exec_, stream_), "graph launch"); }

 private:
  cudaStream_t stream_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

/// A device buffer with room for `bytes` at byte offset `offset` (Thrust owns the memory).
struct device_bytes {
  thrust::device_vector<unsigned char> storage;
  std::size_t offset;
  device_bytes(std::size_t bytes, std::size_t off) : storage(bytes + off + 16, 0xCD), offset(off) {}
  std::byte* get() {
    return reinterpret_cast<std::byte*>(thrust::raw_pointer_cast(storage.data())) + offset;
  }
  void upload(const void* from, std::size_t n) {
    if (n) cuda_ok(cudaMemcpy(get(), from, n, cudaMemcpyHostToDevice), "upload");
  }
  void download(void* to, std::size_t n) {
    if (n) cuda_ok(cudaMemcpy(to, get(), n, cudaMemcpyDeviceToHost), "download");
  }
};

template <class Q, class T>
std::vector<std::byte> device_encode(const Q& q, const std::vector<T>& x, std::size_t src_offset,
                                     std::size_t packet_offset, qsdp::rng_position position) {
  const std::size_t bytes = qsdp::compressed_size<T>(q, x.size());
  device_bytes src(x.size() * sizeof(T), src_offset), packet(bytes, packet_offset);
  src.upload(x.data(), x.size() * sizeof(T));
  qsdp::encode(q, reinterpret_cast<const T*>(src.get()), x.size(), packet.get(), position,
               cudaStream_t{});
  qsdp::synchronize_and_check(cudaStream_t{});
  std::vector<std::byte> out(bytes);
  packet.download(out.data(), bytes);
  return out;
}

template <class Q, class T>
std::vector<T> device_decode(const Q& q, const std::vector<std::byte>& packet, std::size_t count,
                             std::size_t packet_offset, std::size_t dst_offset) {
  device_bytes in(packet.size(), packet_offset), dst(count * sizeof(T), dst_offset);
  in.upload(packet.data(), packet.size());
  qsdp::decode(q, in.get(), count, reinterpret_cast<T*>(dst.get()), cudaStream_t{});
  qsdp::synchronize_and_check(cudaStream_t{});
  std::vector<T> out(count);
  dst.download(out.data(), count * sizeof(T));
  return out;
}

template <class Q, class T>
std::vector<std::vector<std::byte>> graph_encode_replays(const Q& q, const std::vector<T>& x,
                                                         std::uint64_t first_call, int replays,
                                                         std::uint64_t* final_call) {
  const std::size_t bytes = qsdp::compressed_size<T>(q, x.size());
  device_bytes src(x.size() * sizeof(T), 0), packet(bytes, 0), counter(sizeof first_call, 0);
  src.upload(x.data(), x.size() * sizeof(T));
  counter.upload(&first_call, sizeof first_call);
  auto* calls = reinterpret_cast<std::uint64_t*>(counter.get());
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreate(&stream), "stream");
  // The first device codec call on a device allocates its failure record: not under capture.
  qsdp::synchronize_and_check(stream);
  captured_graph graph(stream, [&] {
    qsdp::encode(q, reinterpret_cast<const T*>(src.get()), x.size(), packet.get(),
                 qsdp::device_rng_position{.call = calls, .stream = 3}, stream);
  });
  std::vector<std::vector<std::byte>> packets;
  for (int r = 0; r < replays; ++r) {
    graph.launch();
    qsdp::synchronize_and_check(stream);
    packets.emplace_back(bytes);
    packet.download(packets.back().data(), bytes);
  }
  counter.download(final_call, sizeof *final_call);
  (void)cudaStreamDestroy(stream);
  return packets;
}

template <class Q>
std::vector<float> device_decode_accumulate(const Q& q, const std::vector<std::byte>& packets,
                                            std::size_t packet_count, std::size_t count,
                                            std::vector<float> acc, std::size_t acc_offset) {
  device_bytes in(packets.size(), 0), sum(count * sizeof(float), acc_offset);
  in.upload(packets.data(), packets.size());
  sum.upload(acc.data(), count * sizeof(float));
  qsdp::decode_accumulate(q, in.get(), packet_count, count, reinterpret_cast<float*>(sum.get()),
                          cudaStream_t{});
  qsdp::synchronize_and_check(cudaStream_t{});
  sum.download(acc.data(), count * sizeof(float));
  return acc;
}

}  // namespace gpu_test

// Explicit instantiations for policy Q over the three device element types.
#define GPU_TEST_CODEC_INSTANCES(Q)                                                               \
  template std::vector<std::byte> gpu_test::device_encode<Q, float>(                              \
      const Q&, const std::vector<float>&, std::size_t, std::size_t, qsdp::rng_position);         \
  template std::vector<std::byte> gpu_test::device_encode<Q, __half>(                             \
      const Q&, const std::vector<__half>&, std::size_t, std::size_t, qsdp::rng_position);        \
  template std::vector<std::byte> gpu_test::device_encode<Q, __nv_bfloat16>(                      \
      const Q&, const std::vector<__nv_bfloat16>&, std::size_t, std::size_t, qsdp::rng_position); \
  template std::vector<float> gpu_test::device_decode<Q, float>(                                  \
      const Q&, const std::vector<std::byte>&, std::size_t, std::size_t, std::size_t);            \
  template std::vector<__half> gpu_test::device_decode<Q, __half>(                                \
      const Q&, const std::vector<std::byte>&, std::size_t, std::size_t, std::size_t);            \
  template std::vector<__nv_bfloat16> gpu_test::device_decode<Q, __nv_bfloat16>(                  \
      const Q&, const std::vector<std::byte>&, std::size_t, std::size_t, std::size_t);            \
  template std::vector<float> gpu_test::device_decode_accumulate<Q>(                              \
      const Q&, const std::vector<std::byte>&, std::size_t, std::size_t, std::vector<float>,      \
      std::size_t);                                                                               \
  template std::vector<std::vector<std::byte>> gpu_test::graph_encode_replays<Q, float>(          \
      const Q&, const std::vector<float>&, std::uint64_t, int, std::uint64_t*);                   \
  template std::vector<std::vector<std::byte>> gpu_test::graph_encode_replays<Q, __nv_bfloat16>(  \
      const Q&, const std::vector<__nv_bfloat16>&, std::uint64_t, int, std::uint64_t*);
