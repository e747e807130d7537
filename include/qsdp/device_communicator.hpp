// SPDX-License-Identifier: Apache-2.0
//
// What the collectives need from a transport of device buffers (NCCL, or the one-GPU multi-rank
// communicator of cuda_local.hpp): the host communicator's calls with a cudaStream_t, all
// stream-ordered, plus the state the device collectives keep per communicator. Needs the CUDA
// runtime headers, not nvcc.
#pragma once

#include <cuda_runtime.h>

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "communicator.hpp"
#include "config.hpp"
#include "detail/transport/cuda_runtime.hpp"

namespace qsdp {

/// What the device collectives keep per communicator: the stream-ordered scratch, the channel
/// through which decoding kernels report a peer's bad packet, the call signatures all ranks have
/// already agreed on (only a new signature costs a host round trip; see collectives.hpp), and the
/// second stream on which pipelined calls run their exchanges.
class device_state {
 public:
  detail::cuda::device_workspace workspace;
  detail::cuda::exchange_lane lane;
  detail::cuda::failure_channel failures;
  detail::agreed_signatures agreed;
};

/// A communicator of device buffers:
///   rank(), size(), device()                    this rank, the number of ranks, its CUDA device
///   all_gather_bytes(send, recv, n, stream)     as communicator's, ordered on `stream`
///   all_to_all_bytes(send, recv, n, stream)
///   state()                                     a device_state owned by the communicator
///   next_call()                                 per-communicator call counter (same on every
///   rank);
///                                               the device collectives number their calls with a
///                                               counter in device memory (device_workspace's),
///                                               which starts from it at the first call
///   memory == memory_space::device
/// Optional: `static constexpr bool exchanges_on_any_stream = true` says that its exchanges may be
/// ordered on any stream of its device, which lets a pipelined call (call_options::max_pieces) run
/// them on a second stream that overlaps the codec kernels; without it the pieces' exchanges stay
/// on the caller's stream (the same bytes, one piece after another).
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

}  // namespace qsdp
