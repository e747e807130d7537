// SPDX-License-Identifier: Apache-2.0
//
// What a communicator keeps of an open group (qsdp::group_start .. qsdp::group_end, declared in
// qsdp/collectives.hpp): the calls recorded, each behind a small interface that
// detail/collectives/group.hpp implements for every policy and element type. No communication
// happens here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace qsdp::detail {

/// One collective recorded in an open group: planned (its call indices drawn) when it was called,
/// run by group_end inside the group's one exchange, where it owns `block_bytes` bytes of every
/// rank's block at its offset.
class group_member {
 public:
  virtual ~group_member() = default;

  /// The call's 64-byte call descriptor (detail/collectives/plan.hpp), as a single call's.
  virtual const void* descriptor() const = 0;
  /// Uncompressed bytes this rank sends each peer: what the group's size gate adds up.
  virtual std::size_t value_bytes() const = 0;
  /// The call's call_options::min_compressed_bytes.
  virtual std::size_t gate() const = 0;
  /// Whether the member sends each peer its own bytes (reduce_scatter) rather than the same bytes
  /// to every peer (all_gather).
  virtual bool scatters() const = 0;
  /// Bytes of the member's packets in each rank's block: compressed, or (the group gated) its
  /// values in packets of the policy qsdp::identity.
  virtual std::size_t block_bytes(bool gated) const = 0;
  /// Floats of fp32 sums the member needs after the exchange (reduce_scatter), else 0.
  virtual std::size_t accumulator_floats(bool gated) const = 0;
  /// Encodes the member's packets at `offset` of the outgoing blocks, `stride` bytes apart: one
  /// block (all_gather; the group copies it to the others when it scatters) or one per peer.
  virtual void encode(std::byte* blocks, std::size_t stride, std::size_t offset, bool gated) = 0;
  /// Decodes (all_gather) or reduces (reduce_scatter) the member's packets at `offset` of the
  /// world's incoming blocks, `stride` bytes apart, into the caller's buffer.
  virtual void finish(const std::byte* blocks, std::size_t stride, std::size_t offset, bool gated,
                      float* accumulator) = 0;
};

/// The group a communicator has open: how deep group_start calls nest (only the outermost
/// group_end runs the group, as NCCL's), the members in call order, and on a device communicator
/// the stream they are ordered on (a cudaStream_t, the first member's).
struct group_state {
  int depth = 0;
  std::vector<std::unique_ptr<group_member>> members;
  void* stream = nullptr;
  bool open() const noexcept { return depth > 0; }
};

}  // namespace qsdp::detail
