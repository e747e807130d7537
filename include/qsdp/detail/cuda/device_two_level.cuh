// SPDX-License-Identifier: Apache-2.0
//
// The two-level collectives on device buffers, over a two_level pair of device communicators
// (declared and documented in qsdp/collectives.hpp, which includes this file when nvcc compiles
// it): the schedules of detail/collectives/two_level.hpp with device_level_ops, whose moves are
// stream-ordered copies and whose levels are the flat device collectives, so that a device call
// gives the host call's bits. Nothing waits on the GPU except once per new call signature, when
// the ranks agree on both levels' descriptors on the host (two_level_agreement); a signature's
// first call also makes each level's flat collective agree on its own descriptor once.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../../collective_types.hpp"
#include "../../device_communicator.hpp"
#include "../collectives/two_level.hpp"
#include "../transport/cuda_runtime.hpp"
#include "device_collectives.cuh"

namespace qsdp::detail::cuda {

/// The moves of a two-level schedule on device buffers, all ordered on `stream`: copies, and the
/// flat device collective of a level (host_level_ops's members).
template <class Node, class Cross, class Inside, class Across>
struct device_level_ops {
  two_level<Node, Cross>& comm;
  const level_policies<Inside, Across>& q;
  reduce_op op;
  call_options options;
  cudaStream_t stream;
  const char* where;

  template <class T>
  void copy_rows(T* to, std::size_t to_stride, const T* from, std::size_t from_stride,
                 std::size_t rows, std::size_t n) const {
    if (rows && n)
      check(cudaMemcpy2DAsync(to, to_stride * sizeof(T), from, from_stride * sizeof(T),
                              n * sizeof(T), rows, cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpy2DAsync", where);
  }
  template <class T>
  void copy(T* to, const T* from, std::size_t n) const {
    if (n)
      check(cudaMemcpyAsync(to, from, n * sizeof(T), cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpyAsync", where);
  }
  template <class T>
  void zero(T* to, std::size_t n) const {  // all-zero bits: +0 in every element type
    if (n) check(cudaMemsetAsync(to, 0, n * sizeof(T), stream), "cudaMemsetAsync", where);
  }
  template <class T>
  void run(level at, collective_kind kind, const T* a, T* b, std::size_t count,
           std::uint32_t stream_base) const {
    const reduce_op level_op = kind == collective_kind::all_gather ? reduce_op::sum : op;
    if (at == level::inside)
      run_device_collective(comm.node(), q.inside, kind, level_op, a, b, count, options, stream,
                            level_where(kind, at, true), stream_base);
    else
      run_device_collective(comm.cross(), q.across, kind, level_op, a, b, count, options, stream,
                            level_where(kind, at, true), stream_base);
  }
};

/// What every device two-level collective checks first (each level's device checks: policy,
/// element type, stream and buffers on the level's device, a bad packet an earlier call found),
/// then the agreement of both levels, once per signature; returns the grid.
template <class Node, class Cross, class Inside, class Across, class T>
grid begin_device_two_level(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                            collective_kind kind, reduce_op op, const T* a, const T* b,
                            std::size_t count, call_options options, cudaStream_t stream,
                            const char* where) {
  const bool in_place = kind == collective_kind::all_reduce;
  const char* const a_name = in_place ? "data" : "send";
  const char* const b_name = in_place ? "data" : "recv";
  check_device_collective<Node, Inside, T>(comm.node(), q.inside, a, a_name, b, b_name, count,
                                           stream, where);
  check_device_collective<Cross, Across, T>(comm.cross(), q.across, a, a_name, b, b_name, count,
                                            stream, where);
  call_descriptor mine[2];
  const grid g = describe_two_level<Node, Cross, Inside, Across, T>(comm, q, kind, op, count,
                                                                    options, mine, where);
  static_assert(sizeof mine == 2 * 64, "the pair remembers both descriptors as one signature");
  if (!comm.agreed().contains(mine)) {
    refuse_first_call_in_capture(stream, where);
    device_gather gather(stream, &comm.workspace(), where);
    two_level_agreement(comm, mine, gather, where);
    comm.agreed().remember(mine);
  }
  return g;
}

/// Every device two-level collective: the checks and agreement, then the schedule.
template <class Node, class Cross, class Inside, class Across, class T>
void run_device_two_level(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                          collective_kind kind, reduce_op op, const T* a, T* b, std::size_t count,
                          call_options options, cudaStream_t stream, const char* where) {
  const grid g = begin_device_two_level(comm, q, kind, op, a, b, count, options, stream, where);
  run_two_level(device_level_ops<Node, Cross, Inside, Across>{comm, q, op, options, stream, where},
                g, kind, a, b, count,
                [&](std::size_t bytes) { return comm.workspace().get(bytes, stream, where); });
}

}  // namespace qsdp::detail::cuda

namespace qsdp {

template <device_communicator Node, device_communicator Cross, class Inside, class Across, class T>
void reduce_scatter(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                    const T* send, T* recv, std::size_t count, reduce_op op, cudaStream_t stream,
                    call_options options) {
  detail::cuda::run_device_two_level(comm, q, detail::collective_kind::reduce_scatter, op, send,
                                     recv, count, options, stream,
                                     "qsdp::reduce_scatter (device, two-level)");
}

template <device_communicator Node, device_communicator Cross, class Inside, class Across, class T>
void all_gather(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                const T* send, T* recv, std::size_t count, cudaStream_t stream,
                call_options options) {
  detail::cuda::run_device_two_level(comm, q, detail::collective_kind::all_gather, reduce_op::sum,
                                     send, recv, count, options, stream,
                                     "qsdp::all_gather (device, two-level)");
}

template <device_communicator Node, device_communicator Cross, class Inside, class Across, class T>
void all_reduce(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q, T* data,
                std::size_t count, reduce_op op, cudaStream_t stream, call_options options) {
  detail::cuda::run_device_two_level(comm, q, detail::collective_kind::all_reduce, op,
                                     static_cast<const T*>(data), data, count, options, stream,
                                     "qsdp::all_reduce (device, two-level)");
}

}  // namespace qsdp
