// SPDX-License-Identifier: Apache-2.0
/// @file
/// Where a randomized encode draws its numbers: an explicit call index and stream, on the host or
/// in device memory. Shared by the host codec (codec.hpp), the device codec (device_codec.hpp) and
/// the collectives, which pass each rank's position.
#pragma once

#include <cstdint>

namespace qsdp {

/// An explicit position in a randomized policy's stream: `call` replaces the policy's own call
/// counter and `stream` (< 2^31) separates independent encoders that share a seed (the collectives
/// pass the rank). Encoding the same data with the same seed and position gives the same bytes.
struct rng_position {
  std::uint64_t call = 0;    ///< the call index, in place of the policy's call counter
  std::uint32_t stream = 0;  ///< the encoder's stream, < 2^31 (the collectives pass the rank)
};

/// A position in the random stream whose call index lives in device memory: `call` points at a
/// std::uint64_t on the stream's device (8-byte aligned). The encode reads it when its kernels run
/// and then adds one to it, both ordered on the stream, so an encode captured in a CUDA graph draws
/// fresh numbers at every replay: the replay that finds the counter at c writes the packet the host
/// encode writes at rng_position{.call = c, .stream = stream}.
struct device_rng_position {
  std::uint64_t* call = nullptr;  ///< the call index in device memory, 8-byte aligned
  std::uint32_t stream = 0;       ///< the encoder's stream, < 2^31 (the collectives pass the rank)
};

}  // namespace qsdp
