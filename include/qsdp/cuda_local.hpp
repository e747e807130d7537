// SPDX-License-Identifier: Apache-2.0
/// @file
/// N ranks on one GPU: each rank is a thread of run_local_cuda with its own stream and its own
/// device buffers, and the byte exchanges are device-to-device copies ordered by CUDA events
/// between the ranks' streams. It runs the whole multi-rank pipeline of every device collective
/// (encode, exchange, fused decode) on a single GPU, which is how the tests check the device
/// collectives without a cluster. Host barriers line the ranks up; the GPU is never synchronised
/// inside a call.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "communicator.hpp"
#include "config.hpp"
#include "detail/transport/cuda_local.hpp"
#include "detail/transport/cuda_runtime.hpp"
#include "device_communicator.hpp"

namespace qsdp {

/// One rank of a run_local_cuda world. Buffers are device memory of the world's GPU. rank(),
/// size() and next_call() are those of every communicator.
///
/// Every exchange throws qsdp::error when the stream is under CUDA graph capture (the ranks line
/// up through host barriers, which a graph cannot capture), when a CUDA call fails, when the ranks
/// pass different byte counts, or when another rank failed or returned while this one waits; and
/// qsdp::timeout_error past the world's fault_options::timeout.
class cuda_local_communicator : public detail::in_process_rank<detail::cuda_local_world> {
 public:
  /// Device buffers.
  static constexpr memory_space memory = memory_space::device;
  /// Its exchanges may run on any stream of its device (the pipeline's second stream).
  static constexpr bool exchanges_on_any_stream = true;

  /// Made by run_local_cuda and run_local_cuda_nodes for each rank thread.
  /// @param world the ranks' shared state
  /// @param rank this rank, 0 .. world size - 1
  /// @param stream this rank's own stream
  cuda_local_communicator(detail::cuda_local_world& world, int rank, cudaStream_t stream)
      : in_process_rank(world, rank), stream_(stream) {}

  /// @return the CUDA device of the world (run_local_cuda's caller's current device)
  int device() const noexcept { return world_->device; }
  /// This rank's own stream (created by run_local_cuda, non-blocking).
  /// @return the stream
  cudaStream_t stream() const noexcept { return stream_; }
  /// @return the state the device collectives keep for this rank
  device_state& state() noexcept { return state_; }

  /// Gathers n bytes of device memory from every rank, ordered on `stream`.
  /// @param send this rank's n bytes
  /// @param recv size() x n bytes: rank r's block at offset r x n
  /// @param n bytes per rank, the same on every rank
  /// @param stream the stream the copies are ordered on (any stream of device())
  /// @throws qsdp::error as the class describes
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n,
                        cudaStream_t stream) {
    exchange(send, n, stream, "all_gather_bytes", [&](int peer, const std::byte* data) {
      return copy(recv + static_cast<std::size_t>(peer) * n, data, n, stream);
    });
  }

  /// Sends block j of `send` to rank j, ordered on `stream`.
  /// @param send size() blocks of n bytes of device memory, block j for rank j
  /// @param recv size() blocks of n bytes: block i from rank i at offset i x n
  /// @param n bytes per block, the same on every rank
  /// @param stream the stream the copies are ordered on (any stream of device())
  /// @throws qsdp::error as the class describes
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n,
                        cudaStream_t stream) {
    exchange(send, n * static_cast<std::size_t>(size()), stream, "all_to_all_bytes",
             [&](int peer, const std::byte* data) {
               return copy(recv + static_cast<std::size_t>(peer) * n,
                           data + static_cast<std::size_t>(rank_) * n, n, stream);
             });
  }

 private:
  static cudaError_t copy(std::byte* to, const std::byte* from, std::size_t n,
                          cudaStream_t stream) {
    return n ? cudaMemcpyAsync(to, from, n, cudaMemcpyDeviceToDevice, stream) : cudaSuccess;
  }

  /// Post my buffer and an event marking it ready; once all have posted, my stream waits for each
  /// peer's event and copies from its buffer; then, so that no rank overwrites its send buffer
  /// while others still read it, every stream waits for every rank's "done" event.
  template <class Read>
  void exchange(const std::byte* send, std::size_t bytes, cudaStream_t stream, const char* what,
                Read&& read) {
    // Built only when a message is: the exchange itself allocates nothing.
    auto where = [what] { return std::string("qsdp::cuda_local_communicator::") + what; };
    auto fail = [&](const std::string& message) {
      world_->barrier.break_with(message);
      throw qsdp::error(message);
    };
    auto checked = [&](cudaError_t e, const char* call) {
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fail(where() + ": " + call + " failed on rank " + std::to_string(rank_) + ": " +
             detail::cuda::describe(e));
      }
    };
    if (detail::cuda::capturing(stream, "qsdp::cuda_local_communicator"))
      fail(
          where() +
          ": the ranks of run_local_cuda line up through host barriers and events between their "
          "streams, which a CUDA graph cannot capture; capture collectives over nccl_communicator");
    const auto me = static_cast<std::size_t>(rank_);
    checked(cudaEventRecord(world_->ready[me], stream), "cudaEventRecord");
    post_and_meet(send, bytes, "qsdp::cuda_local_communicator", what);
    for (int peer = 0; peer < size(); ++peer) {
      const auto p = static_cast<std::size_t>(peer);
      checked(cudaStreamWaitEvent(stream, world_->ready[p], 0), "cudaStreamWaitEvent");
      checked(read(peer, posted(peer)), "cudaMemcpyAsync");
    }
    checked(cudaEventRecord(world_->done[me], stream), "cudaEventRecord");
    meet();
    for (std::size_t p = 0; p < world_->done.size(); ++p)
      checked(cudaStreamWaitEvent(stream, world_->done[p], 0), "cudaStreamWaitEvent");
  }

  cudaStream_t stream_;
  device_state state_;
};

static_assert(device_communicator<cuda_local_communicator>);

namespace detail {

/// One rank thread of run_local_cuda / run_local_cuda_nodes: on `device`, runs body(stream) with a
/// non-blocking stream of its own, which is drained and destroyed however body ends (after the
/// communicators body made on it are gone: their scratch is freed in stream order).
template <class Body>
void with_rank_stream(int device, const char* where, Body&& body) {
  cuda::check(cudaSetDevice(device), "cudaSetDevice", where);
  cudaStream_t stream = nullptr;
  cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
              "cudaStreamCreateWithFlags", where);
  struct stream_guard {
    cudaStream_t s;
    ~stream_guard() {
      (void)cudaStreamSynchronize(s);
      (void)cudaStreamDestroy(s);
    }
  } guard{stream};
  body(stream);
}

/// The end of a rank's fn: synchronises its stream and reports a bad packet a kernel found on any
/// of its communicators.
template <class... Comms>
void finish_rank(cudaStream_t stream, const char* where, Comms&... comms) {
  cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", where);
  (comms.state().failures.poll(where, "the packet from rank"), ...);
}

}  // namespace detail

/// Runs fn(comm) on `world` threads, one per rank, all on the calling thread's current CUDA device,
/// each with its own non-blocking stream (comm.stream()). Each rank's stream is synchronised when
/// fn returns, and a bad packet a kernel found is reported then. Failures behave as in run_local:
/// the first rank's exception is rethrown here and the other ranks are released from their
/// collectives.
/// @tparam Fn callable as fn(cuda_local_communicator&)
/// @param world the number of ranks, >= 1
/// @param fn the work of each rank
/// @param options the fault options of every rank (timeout default: local_default_timeout)
/// @throws qsdp::error when world < 1, an option is out of range (as run_local), or a CUDA call
///         fails; a bad packet a decoding kernel found; else the first exception a rank threw
template <class Fn>
void run_local_cuda(int world, Fn&& fn, fault_options options = {}) {
  constexpr const char* where = "qsdp::run_local_cuda";
  const std::chrono::milliseconds timeout =
      detail::checked_local_world(world, options, local_default_timeout, where);
  int device = 0;
  detail::cuda::check(cudaGetDevice(&device), "cudaGetDevice", where);
  detail::cuda_local_world shared(world, device, timeout);
  detail::run_rank_threads(world, shared.barrier, [&](int rank) {
    detail::with_rank_stream(device, where, [&](cudaStream_t stream) {
      cuda_local_communicator comm(shared, rank, stream);
      fn(comm);
      detail::finish_rank(stream, where, comm);
    });
  });
}

/// run_local_cuda with the ranks grouped into nodes of `node_size` consecutive ranks, as
/// run_local_nodes does: fn(pair) gets a two_level<cuda_local_communicator,
/// cuda_local_communicator> whose communicators share the rank's stream (pair.node().stream()).
/// @tparam Fn callable as fn(two_level<cuda_local_communicator, cuda_local_communicator>&)
/// @param world the number of ranks, >= 1
/// @param node_size the ranks per node, a divisor of world
/// @param fn the work of each rank
/// @param options the fault options of every rank and level (as run_local's)
/// @throws qsdp::error before any thread starts when world < 1, node_size is not a divisor of
///         world, or an option is out of range; as run_local_cuda otherwise
template <class Fn>
void run_local_cuda_nodes(int world, int node_size, Fn&& fn, fault_options options = {}) {
  constexpr const char* where = "qsdp::run_local_cuda_nodes";
  const std::chrono::milliseconds timeout =
      detail::checked_local_world(world, options, local_default_timeout, where);
  int device = 0;
  detail::cuda::check(cudaGetDevice(&device), "cudaGetDevice", where);
  detail::run_node_grid<detail::cuda_local_world>(
      world, node_size, where,
      [&](int size) { return std::make_unique<detail::cuda_local_world>(size, device, timeout); },
      [&](int, detail::cuda_local_world& node_world, int place,
          detail::cuda_local_world& cross_world, int node_index) {
        detail::with_rank_stream(device, where, [&](cudaStream_t stream) {
          cuda_local_communicator node(node_world, place, stream);
          cuda_local_communicator cross(cross_world, node_index, stream);
          {
            two_level<cuda_local_communicator, cuda_local_communicator> pair(node, cross);
            fn(pair);
          }
          detail::finish_rank(stream, where, node, cross);
        });
      });
}

}  // namespace qsdp
