// SPDX-License-Identifier: Apache-2.0
//
// The two communications of a ZeRO-1 step as llm.c makes them, with qsdp's groups in place of
// NCCL's (examples/ports/zero1_llmc.cpp on host ranks, zero1_llmc.cu on device buffers;
// docs/guides/ porting.md walks through the swap). Parameters and gradients are each ONE bf16
// buffer holding every tensor; every tensor is split evenly over the ranks (its size padded to a
// multiple of the world), and rank r owns slice r of every tensor: its fp32 master weights and
// AdamW moments cover only those slices.
//
//   llm.c (multi-GPU, ZeRO-1)                          here
//   ncclGroupStart();                                  qsdp::group_start(comm);
//   for each tensor t of layer l:                      for each tensor t of layer l:
//     ncclReduceScatter(g + t.off,                       qsdp::reduce_scatter(comm, policy,
//         g + t.off + rank * t.n / world, t.n / world,       g + t.off, g + t.off + rank * shard,
//         ncclBfloat16, ncclAvg, comm, stream);              shard, qsdp::reduce_op::avg[,
//         stream]);
//   ncclGroupEnd();                                    qsdp::group_end(comm);
//
// and the same for the all-gather of the updated shards (in place: send = recv + rank * shard).
// Both are NCCL's in-place conventions, which qsdp keeps.
#pragma once

#include <cstddef>
#include <vector>

#include <qsdp/collectives.hpp>

namespace ports {

/// A tensor of the flat buffers: `padded` values at `offset` (a multiple of the world size).
struct shard_span {
  std::size_t offset = 0, padded = 0;
  int layer = 0;
};

/// Values of rank r's slice of every tensor, in tensor order: the length of its master weights.
inline std::size_t shard_values(const std::vector<shard_span>& tensors, int world) {
  std::size_t n = 0;
  for (const auto& t : tensors) n += t.padded / static_cast<std::size_t>(world);
  return n;
}

/// The in-place reduce-scatter (avg) of layer `layer`'s gradients in one group: afterwards slice
/// comm.rank() of each of its tensors holds the average over ranks. `stream...` is empty on host
/// communicators and the stream on device ones.
template <class Comm, class Policy, class T, class... Stream>
void reduce_scatter_layer(Comm& comm, const Policy& policy, const std::vector<shard_span>& tensors,
                          int layer, T* grads, Stream... stream) {
  const auto world = static_cast<std::size_t>(comm.size());
  const auto rank = static_cast<std::size_t>(comm.rank());
  qsdp::group_start(comm);
  for (const auto& t : tensors) {
    if (t.layer != layer) continue;
    const std::size_t shard = t.padded / world;
    T* const g = grads + t.offset;
    qsdp::reduce_scatter(comm, policy, g, g + rank * shard, shard, qsdp::reduce_op::avg, stream...);
  }
  qsdp::group_end(comm);
}

/// The in-place all-gather of every tensor's updated slice, all tensors in one group: one
/// agreement and one exchange for the whole model.
template <class Comm, class Policy, class T, class... Stream>
void all_gather_shards(Comm& comm, const Policy& policy, const std::vector<shard_span>& tensors,
                       T* params, Stream... stream) {
  const auto world = static_cast<std::size_t>(comm.size());
  const auto rank = static_cast<std::size_t>(comm.rank());
  qsdp::group_start(comm);
  for (const auto& t : tensors) {
    const std::size_t shard = t.padded / world;
    T* const p = params + t.offset;
    qsdp::all_gather(comm, policy, p + rank * shard, p, shard, stream...);
  }
  qsdp::group_end(comm);
}

}  // namespace ports
