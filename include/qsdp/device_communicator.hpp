// SPDX-License-Identifier: Apache-2.0
/// @file
/// What the collectives need from a transport of device buffers (NCCL, or the one-GPU multi-rank
/// communicator of cuda_local.hpp): the host communicator's calls with a cudaStream_t, all
/// stream-ordered, plus the state the device collectives keep per communicator. Needs the CUDA
/// runtime headers, not nvcc.
#pragma once

#include <cuda_runtime.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "communicator.hpp"
#include "config.hpp"
#include "detail/transport/cuda_runtime.hpp"

namespace qsdp {

/// What the device collectives keep per communicator: the stream-ordered scratch, the channel
/// through which decoding kernels report a peer's bad packet, the call signatures all ranks have
/// already agreed on (only a new signature costs a host round trip; see collectives.hpp), the
/// second stream on which pipelined calls run their exchanges, the open group and the call
/// counters.
class device_state {
 public:
  detail::cuda::device_workspace workspace;  ///< device scratch, ordered on the callers' streams
  detail::cuda::exchange_lane lane;          ///< the second stream of pipelined calls
  detail::cuda::failure_channel failures;    ///< where decoding kernels report a bad packet
  detail::agreed_signatures agreed;          ///< the call signatures all ranks have agreed on
  detail::group_state group;                 ///< the group open on the communicator (group_start)
  call_counters counters;                    ///< what the collectives did with the size gate
};

/// A communicator of device buffers:
/// - `rank()`, `size()`, `device()`: this rank, the number of ranks, its CUDA device;
/// - `all_gather_bytes(send, recv, n, stream)`, `all_to_all_bytes(send, recv, n, stream)`: as
///   qsdp::communicator's, on device buffers, ordered on `stream`;
/// - `state()`: a device_state owned by the communicator;
/// - `next_call()`: the per-communicator call counter (the same on every rank); the device
///   collectives number their calls with a counter in device memory, which starts from it at the
///   first call;
/// - `memory == memory_space::device`.
///
/// Optional: `static constexpr bool exchanges_on_any_stream = true` says that its exchanges may be
/// ordered on any stream of its device, which lets a pipelined call (call_options::max_pieces) run
/// them on a second stream that overlaps the codec kernels; without it the pieces' exchanges stay
/// on the caller's stream (the same bytes, one piece after another).
/// @tparam C the communicator type
template <class C>
concept device_communicator = requires(C& c, const std::byte* send, std::byte* recv, std::size_t n,
                                       cudaStream_t stream) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  { c.device() } -> std::convertible_to<int>;
  c.all_gather_bytes(send, recv, n, stream);
  c.all_to_all_bytes(send, recv, n, stream);
  { c.state() } -> std::same_as<device_state&>;
  { c.next_call() } -> std::convertible_to<std::uint64_t>;
  requires C::memory == memory_space::device;
};

namespace detail::cuda {

/// Gathers n host bytes from every rank of a device communicator through device memory: `mine` is
/// copied to `scratch` ((size() + 1) x n bytes of device memory), all-gathered on `stream` and
/// copied back to `out` (size() x n host bytes); then the stream is synchronised, with the
/// communicator's watchdog where it has one (nccl_communicator::synchronize), so that a peer that
/// never makes the call is an error after its timeout rather than a hang.
template <class Comm>
void gather_to_host(Comm& comm, const void* mine, std::size_t n, std::byte* scratch, std::byte* out,
                    cudaStream_t stream, const char* where) {
  check(cudaMemcpyAsync(scratch, mine, n, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync",
        where);
  comm.all_gather_bytes(scratch, scratch + n, n, stream);
  check(cudaMemcpyAsync(out, scratch + n, static_cast<std::size_t>(comm.size()) * n,
                        cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync", where);
  if constexpr (requires { comm.synchronize(stream); })
    comm.synchronize(stream);
  else
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", where);
}

/// The gather of a device two_level pair's host-side checks (detail::check_grid,
/// two_level_agreement): on the caller's stream through the pair's workspace, or, with no stream
/// (the pair's constructor), on a stream and a buffer of its own on each communicator's device.
/// The returned bytes stay valid while the gatherer lives.
class device_gather {
 public:
  device_gather(cudaStream_t stream, device_workspace* scratch, const char* where)
      : stream_(stream), scratch_(scratch), where_(where) {}

  template <class Comm>
  const std::byte* operator()(Comm& comm, const void* mine, std::size_t n) {
    std::vector<std::byte>& out = received_.emplace_back(static_cast<std::size_t>(comm.size()) * n);
    const std::size_t staged = (static_cast<std::size_t>(comm.size()) + 1) * n;
    if (stream_) {
      gather_to_host(comm, mine, n, scratch_->get(staged, stream_, where_), out.data(), stream_,
                     where_);
      return out.data();
    }
    with_device(comm.device(), where_, [&] {
      struct own {  // released however the exchange ends
        cudaStream_t stream = nullptr;
        void* buffer = nullptr;
        ~own() {
          if (buffer) (void)cudaFree(buffer);
          if (stream) (void)cudaStreamDestroy(stream);
        }
      } mine_too;
      check(cudaStreamCreateWithFlags(&mine_too.stream, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags", where_);
      check(cudaMalloc(&mine_too.buffer, staged), "cudaMalloc", where_);
      gather_to_host(comm, mine, n, static_cast<std::byte*>(mine_too.buffer), out.data(),
                     mine_too.stream, where_);
    });
    return out.data();
  }

 private:
  cudaStream_t stream_;
  device_workspace* scratch_;
  const char* where_;
  std::deque<std::vector<std::byte>> received_;
};

}  // namespace detail::cuda

/// The pair of two device communicators (two nccl_communicators, or cuda_local_communicators), for
/// the two-level collectives on device buffers (collectives.hpp). As the host pair, plus: both
/// communicators must be on one device, the pair's scratch is device memory ordered on the callers'
/// streams, and the ranks agree on a two-level call once per call signature, as the flat device
/// collectives do.
template <device_communicator Node, device_communicator Cross>
class two_level<Node, Cross> {
 public:
  /// Collective over all ranks of both communicators, with the host pair's checks (every rank
  /// throws alike); synchronises once (the places travel through device memory).
  /// @param node the communicator of this rank's node; must outlive the pair
  /// @param cross the communicator of this rank's place across the nodes, on node's device; must
  ///        outlive the pair
  /// @throws qsdp::error on every rank when a rank's two communicators are on different devices,
  ///         or as the host pair's constructor (the nodes or cross communicators differ in size,
  ///         a rank's places are inconsistent); or when a CUDA call fails
  two_level(Node& node, Cross& cross) : node_(node), cross_(cross) {
    constexpr const char* where = "qsdp::two_level";
    const std::string refusal = node.device() == cross.device()
                                    ? std::string()
                                    : "this rank's node communicator is on device " +
                                          std::to_string(node.device()) +
                                          ", its cross communicator on device " +
                                          std::to_string(cross.device()) + "; expected one device";
    detail::cuda::device_gather gather(nullptr, nullptr, where);
    detail::check_grid(node, cross, gather, refusal, where);
  }

  /// @return this rank in the whole world: node index x node_size() + rank in the node
  int rank() const { return cross_.rank() * node_.size() + node_.rank(); }
  /// @return the number of ranks in the whole world: nodes() x node_size()
  int size() const { return cross_.size() * node_.size(); }
  /// @return the number of ranks of each node
  int node_size() const { return node_.size(); }
  /// @return the number of nodes
  int nodes() const { return cross_.size(); }
  /// @return the CUDA device of both communicators
  int device() const { return node_.device(); }
  /// @return the communicator of this rank's node
  Node& node() noexcept { return node_; }
  /// @return the communicator of this rank's place across the nodes
  Cross& cross() noexcept { return cross_; }
  /// Device scratch of the two-level collectives (their reordered and intermediate values).
  /// @return the pair's own device workspace
  detail::cuda::device_workspace& workspace() noexcept { return workspace_; }
  /// The two-level calls (both levels' descriptors) every rank has agreed on.
  /// @return the pair's agreed signatures
  detail::basic_agreed_signatures<2 * 64>& agreed() noexcept { return agreed_; }

 private:
  Node& node_;
  Cross& cross_;
  detail::cuda::device_workspace workspace_;
  detail::basic_agreed_signatures<2 * 64> agreed_;
};

}  // namespace qsdp
