// SPDX-License-Identifier: Apache-2.0
// Bad input to the device path: each case returns the qsdp::error message it produced ("" if none).
#include <thrust/device_vector.h>

#include <cmath>
#include <vector>

#include <qsdp/collectives.hpp>
#include <qsdp/cuda_local.hpp>

#include "codec_helpers.cuh"
#include "gpu_support.hpp"
#include "support.hpp"

namespace gpu_test {

/// A communicator that claims to live on another device than the streams it is given.
struct wrong_device_communicator {
  static constexpr qsdp::memory_space memory = qsdp::memory_space::device;
  qsdp::cuda_local_communicator* inner;
  int rank() const { return inner->rank(); }
  int size() const { return inner->size(); }
  int device() const { return inner->device() + 1; }
  void all_gather_bytes(const std::byte* s, std::byte* r, std::size_t n, cudaStream_t st) {
    inner->all_gather_bytes(s, r, n, st);
  }
  void all_to_all_bytes(const std::byte* s, std::byte* r, std::size_t n, cudaStream_t st) {
    inner->all_to_all_bytes(s, r, n, st);
  }
  qsdp::device_state& state() { return inner->state(); }
  std::uint64_t next_call() { return inner->next_call(); }
};
static_assert(qsdp::device_communicator<wrong_device_communicator>);

std::string device_bad_input(const std::string& which) {
  constexpr std::size_t n = 4096;
  const qsdp::uniform<8> q;
  if (which == "corrupt header" || which == "misplaced packet") {
    thrust::device_vector<float> x(n, 1.5f), y(n, 0.0f);
    thrust::device_vector<unsigned char> packet(qsdp::compressed_size<float>(q, n));
    auto* p = reinterpret_cast<std::byte*>(thrust::raw_pointer_cast(packet.data()));
    qsdp::encode(q, thrust::raw_pointer_cast(x.data()), n, p, qsdp::rng_position{}, cudaStream_t{});
    std::size_t decode_count = n;
    if (which == "corrupt header") {
      const unsigned char five = 5;  // byte 7 of the header is the bit width
      cuda_ok(cudaMemcpy(p + 7, &five, 1, cudaMemcpyHostToDevice), "corrupt");
    } else {
      decode_count = n - 1;
    }
    qsdp::decode(q, p, decode_count, thrust::raw_pointer_cast(y.data()), cudaStream_t{});
    std::string message = qsdp_test::error_of([] { qsdp::synchronize_and_check(cudaStream_t{}); });
    const float first = y[0];
    if (!std::isnan(first)) message += " [BUT THE OUTPUT WAS NOT SET TO NaN]";
    return message;
  }
  if (which == "null call counter" || which == "host call counter" ||
      which == "misaligned call counter") {
    const qsdp::stochastic<8> s;
    thrust::device_vector<float> x(n, 1.5f);
    thrust::device_vector<unsigned char> packet(qsdp::compressed_size<float>(s, n));
    thrust::device_vector<std::uint64_t> counters(2, 0);
    std::uint64_t host_counter = 0;
    std::uint64_t* call = nullptr;
    if (which == "host call counter") call = &host_counter;
    if (which == "misaligned call counter")
      call = reinterpret_cast<std::uint64_t*>(
          reinterpret_cast<std::byte*>(thrust::raw_pointer_cast(counters.data())) + 4);
    return qsdp_test::error_of([&] {
      qsdp::encode(s, thrust::raw_pointer_cast(x.data()), n,
                   reinterpret_cast<std::byte*>(thrust::raw_pointer_cast(packet.data())),
                   qsdp::device_rng_position{.call = call}, cudaStream_t{});
    });
  }
  std::string message;
  qsdp::run_local_cuda(1, [&](qsdp::cuda_local_communicator& comm) {
    thrust::device_vector<float> d(n, 1.0f), out(n);
    float* dp = thrust::raw_pointer_cast(d.data());
    float* op = thrust::raw_pointer_cast(out.data());
    if (which == "host send pointer") {
      std::vector<float> host(n, 1.0f);
      message = qsdp_test::error_of(
          [&] { qsdp::all_gather(comm, q, host.data(), op, n, comm.stream()); });
    } else if (which == "pinned recv pointer") {
      float* pinned = nullptr;
      cuda_ok(cudaMallocHost(&pinned, n * sizeof(float)), "cudaMallocHost");
      message =
          qsdp_test::error_of([&] { qsdp::all_gather(comm, q, dp, pinned, n, comm.stream()); });
      (void)cudaFreeHost(pinned);
    } else if (which == "stream of another device") {
      wrong_device_communicator wrong{&comm};
      message = qsdp_test::error_of([&] { qsdp::all_gather(wrong, q, dp, op, n, comm.stream()); });
    } else if (which == "captured first call") {
      cudaGraph_t graph = nullptr;
      cuda_ok(cudaStreamBeginCapture(comm.stream(), cudaStreamCaptureModeThreadLocal),
              "begin capture");
      message = qsdp_test::error_of([&] { qsdp::all_gather(comm, q, dp, op, n, comm.stream()); });
      (void)cudaStreamEndCapture(comm.stream(), &graph);
      if (graph) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
    } else {
      message = "unknown case " + which;
    }
  });
  return message;
}

}  // namespace gpu_test
