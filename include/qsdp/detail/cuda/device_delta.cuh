// SPDX-License-Identifier: Apache-2.0
//
// qsdp::delta_gather on device buffers (declared and documented in qsdp/collectives.hpp): the host
// version's steps (detail/collectives/delta.hpp) as kernels around the device all_gather, all
// ordered on the caller's stream, with the same arithmetic per value (delta_difference,
// delta_update), so host and device calls give the same bits. The ranks' call counts live in device
// memory and are compared by a kernel; a mismatch is reported by the object's next call.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "../../collective_types.hpp"
#include "../collectives/delta.hpp"
#include "../transport/cuda_runtime.hpp"
#include "device_codec.cuh"
#include "device_collectives.cuh"

namespace qsdp::detail::cuda {

/// A delta_gather's device memory, allocated by its first device call on one device.
template <class T>
struct delta_state : private no_copies {
  int device = -1;
  T* reconstruction = nullptr;     // count * world values
  float* difference = nullptr;     // count
  float* decoded = nullptr;        // count * world (T other than float; else the output is used)
  std::uint64_t* calls = nullptr;  // [0]: this rank's calls; [1 + r]: rank r's, exchanged
  failure_channel failures;        // a call-count mismatch, reported by the next call

  ~delta_state() {
    // Free on the owning device (cudaFree waits for the work that uses the memory).
    int current = -1;
    const bool switched = cudaGetDevice(&current) == cudaSuccess && current != device &&
                          cudaSetDevice(device) == cudaSuccess;
    for (void* p : {static_cast<void*>(reconstruction), static_cast<void*>(difference),
                    static_cast<void*>(decoded), static_cast<void*>(calls)})
      if (p) (void)cudaFree(p);
    if (switched) (void)cudaSetDevice(current);
  }
};

/// The detail of a call-count report: rank `index`'s count against rank 0's.
struct calls_mismatch {
  std::uint64_t calls, rank0_calls;
};
static_assert(sizeof(calls_mismatch) <= sizeof(device_report::detail));

inline std::string describe_calls_mismatch(const device_report& report, const char* where,
                                           const char*) {
  calls_mismatch m;
  std::memcpy(&m, report.detail, sizeof m);
  return delta_calls_message(where, static_cast<int>(report.index), m.calls, m.rank0_calls) +
         " (found by the device during an earlier call)";
}

/// Compares the exchanged call counts (one thread); the first rank whose count is not rank 0's is
/// reported.
template <int = 0>
__global__ void delta_calls_kernel(const std::uint64_t* counts, unsigned world, device_report* f) {
  for (unsigned r = 1; r < world; ++r) {
    if (counts[r] == counts[0]) continue;
    if (atomicCAS(&f->claimed, 0u, 1u) != 0u) return;
    f->index = r;
    const calls_mismatch m{counts[r], counts[0]};
    memcpy(f->detail, &m, sizeof m);
    __threadfence_system();
    atomicExch(&f->ready, 1u);
    return;
  }
}

/// difference[i] = delta_difference(shard[i], reconstruction[i]), i < count.
template <class T>
__global__ void __launch_bounds__(codec_block)
    delta_difference_kernel(const T* shard, const T* reconstruction, float* difference,
                            std::size_t count) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x)
    difference[i] = delta_difference(shard[i], reconstruction[i]);
}

/// reconstruction[i] = full[i] = delta_update(reconstruction[i], decoded[i]), i < total (decoded
/// may be full itself, for T = float).
template <class T>
__global__ void __launch_bounds__(codec_block)
    delta_update_kernel(T* reconstruction, const float* decoded, T* full, std::size_t total) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < total;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const T updated = delta_update(reconstruction[i], decoded[i]);
    reconstruction[i] = updated;
    full[i] = updated;
  }
}

template <class T>
delta_state<T>& delta_state_for(std::shared_ptr<void>& slot, std::size_t count, int world,
                                int device, cudaStream_t stream, const char* where) {
  if (slot) {
    auto& state = *static_cast<delta_state<T>*>(slot.get());
    if (state.device != device)
      throw qsdp::error(std::string(where) + ": this delta_gather keeps its reconstruction on " +
                        "device " + std::to_string(state.device) + "; the communicator is on " +
                        "device " + std::to_string(device));
    return state;
  }
  if (capturing(stream, where))
    throw qsdp::error(std::string(where) +
                      ": the first call allocates the reconstruction, which cannot happen inside "
                      "CUDA graph capture; make one call before capturing");
  auto state = std::make_shared<delta_state<T>>();
  state->device = device;
  const auto sizes = delta_device_sizes::of<T>(count, static_cast<std::size_t>(world));
  const auto allocate = [&](auto*& p, std::size_t n, const char* what) {
    if (n == 0) return;
    void* raw = nullptr;
    const cudaError_t e = cudaMalloc(&raw, n * sizeof(*p));
    if (e != cudaSuccess)
      throw qsdp::error(std::string(where) + ": cudaMalloc of " + std::to_string(n * sizeof(*p)) +
                        " bytes for the " + what + " failed: " + cudaGetErrorString(e));
    p = static_cast<std::remove_reference_t<decltype(p)>>(raw);
  };
  allocate(state->reconstruction, sizes.reconstruction, "reconstruction");
  allocate(state->difference, sizes.difference, "difference");
  allocate(state->decoded, sizes.decoded, "decoded values");
  allocate(state->calls, sizes.calls, "call counts");
  state->failures.device_record(where, describe_calls_mismatch);  // allocated outside any capture
  slot = state;
  return *state;
}

}  // namespace qsdp::detail::cuda

namespace qsdp {

template <class T>
template <device_communicator Comm, class Q>
void delta_gather<T>::all_gather(Comm& comm, const Q& q, const T* shard, T* full,
                                 cudaStream_t stream) {
  constexpr const char* where = "qsdp::delta_gather::all_gather (device)";
  detail::cuda::require_device_element<T>();
  detail::cuda::refuse_in_device_group(comm, where);
  if (comm.size() != world_)
    throw qsdp::error(std::string(where) + ": communicator has " + std::to_string(comm.size()) +
                      " ranks; this delta_gather was made for world " + std::to_string(world_));
  if (!peer_calls_.empty())
    throw qsdp::error(std::string(where) +
                      ": this delta_gather keeps its reconstruction in host memory (earlier calls "
                      "were on a host communicator); use another object for device buffers");
  const int device =
      detail::cuda::check_device_buffers(comm, shard, "shard", full, "full", count_, stream, where);
  const bool first = device_ == nullptr;
  auto& state = detail::cuda::delta_state_for<T>(device_, count_, world_, device, stream, where);
  device_reconstruction_ = state.reconstruction;
  state.failures.poll(where, "rank");  // an earlier call's call-count mismatch
  const auto ranks = static_cast<std::size_t>(world_);
  const std::size_t total = count_ * ranks;
  if (first || reset_pending_) {
    if (total)
      detail::cuda::check(cudaMemsetAsync(state.reconstruction, 0, total * sizeof(T), stream),
                          "cudaMemsetAsync", where);
    detail::cuda::check(cudaMemsetAsync(state.calls, 0, sizeof(std::uint64_t), stream),
                        "cudaMemsetAsync", where);
    reset_pending_ = false;
  }
  // Every rank's count, compared on the device (a mismatch is thrown by the next call).
  comm.all_gather_bytes(reinterpret_cast<const std::byte*>(state.calls),
                        reinterpret_cast<std::byte*>(state.calls + 1), sizeof(std::uint64_t),
                        stream);
  detail::cuda::launch(detail::cuda::delta_calls_kernel<>, 1, 1, stream, "delta_calls_kernel",
                       where, state.calls + 1, static_cast<unsigned>(world_),
                       state.failures.device_record(where, detail::cuda::describe_calls_mismatch));
  const std::size_t mine = static_cast<std::size_t>(comm.rank()) * count_;
  if (count_)
    detail::cuda::launch(detail::cuda::delta_difference_kernel<T>,
                         detail::cuda::grid_for(count_, detail::cuda::codec_block),
                         detail::cuda::codec_block, stream, "delta_difference_kernel", where, shard,
                         state.reconstruction + mine, state.difference, count_);
  // The differences travel as floats whatever T is, always quantized (as on the host).
  float* decoded = std::is_same_v<T, float> ? reinterpret_cast<float*>(full) : state.decoded;
  qsdp::all_gather(comm, q, state.difference, decoded, count_, stream,
                   call_options{.min_compressed_bytes = 0});
  if (total)
    detail::cuda::launch(detail::cuda::delta_update_kernel<T>,
                         detail::cuda::grid_for(total, detail::cuda::codec_block),
                         detail::cuda::codec_block, stream, "delta_update_kernel", where,
                         state.reconstruction, static_cast<const float*>(decoded), full, total);
  detail::cuda::launch_advance_calls(state.calls, 1, stream, where);
  ++calls_;
}

}  // namespace qsdp
