// SPDX-License-Identifier: Apache-2.0
//
// The steps of the host collectives that single calls (detail/collectives/host.hpp) and groups
// (detail/collectives/group.hpp) share: the argument checks, the agreement on a call, and the
// checked decoding and reduction of the ranks' packets.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>

#include "../../codec.hpp"
#include "../../collective_types.hpp"
#include "../../communicator.hpp"
#include "../codec/checks.hpp"
#include "../host/loops.hpp"
#include "plan.hpp"

namespace qsdp::detail {

/// Exchanges descriptors (into `scratch`, world * 64 bytes) and checks them.
template <class Comm>
void agree_on_call(Comm& comm, const call_descriptor& mine, std::byte* scratch, const char* where) {
  comm.all_gather_bytes(reinterpret_cast<const std::byte*>(&mine), scratch, sizeof mine);
  check_descriptors(scratch, comm.size(), where);
}

/// The round trip of agree_on_call on a signature's first call; later calls of an agreed
/// signature carry their descriptor in front of their values or packets instead, and every rank
/// checks the world's before it uses a byte (run_gated, host_steps). What that cannot catch is a
/// rank whose exchange differs in size from the others': local_communicator throws on every rank;
/// for MPI, collectives of mismatched sizes are erroneous (an error such as MPI_ERR_TRUNCATE at
/// best). A signature's first call agrees separately for that reason: a rank that calls with
/// another count, policy, pipeline or gate is caught there.
template <class Comm>
void agree_once(Comm& comm, const call_descriptor& mine, std::byte* scratch, const char* where) {
  agreed_signatures& agreed = comm.workspace().agreed;
  if (agreed.contains(&mine)) return;
  agree_on_call(comm, mine, scratch, where);
  agreed.remember(&mine);
}

template <class Comm, class Q, class T>
void check_collective_arguments(const Comm& comm, const Q& q, const char* where) {
  static_assert(std::remove_cvref_t<Comm>::memory == memory_space::host,
                "these overloads take host buffers; device communicators (NCCL) need the CUDA "
                "overloads, which take a stream");
  require_policy<Q>();
  require_element<T>();
  check_bucket_size(q, where);
  check_world(comm.size(), where);
}

/// Checks the header of the packet received from rank `from`; the rank is named only when it fails,
/// so the common path builds no strings (no allocation per call).
template <class Q>
void check_received(const Q& q, const std::byte* packet, std::size_t count, int element,
                    std::size_t packet_bytes, int from, const char* where) {
  try {
    validated_layout(q, packet, count, is_identity<Q> ? element : -1, packet_bytes, where);
  } catch (const qsdp::error& e) {
    throw qsdp::error(std::string(e.what()) + " (in the packet from rank " + std::to_string(from) +
                      ")");
  }
}

/// The packets of `world` ranks, rank r's at packets + r * stride (packet_bytes each), headers
/// checked, decoded to recv + r * recv_stride; progress() after each.
template <class Q, class T, class Progress>
void decode_packets(const Q& q, const std::byte* packets, std::size_t stride,
                    std::size_t packet_bytes, int world, std::size_t count, T* recv,
                    std::size_t recv_stride, const char* where, Progress&& progress) {
  constexpr int element = static_cast<int>(element_traits<T>::tag);
  for (int r = 0; r < world; ++r) {
    const std::byte* packet = packets + static_cast<std::size_t>(r) * stride;
    check_received(q, packet, count, element, packet_bytes, r, where);
    qsdp::decode(q, packet, count, recv + static_cast<std::size_t>(r) * recv_stride);
    progress();
  }
}

/// The packets of `world` ranks (rank r's at packets + r * stride, packet_bytes each), headers
/// checked, summed in fp32 in rank order (then averaged for avg) in `acc` (count floats), and
/// rounded to T plainly: a sum that overflows T is inf, never clipped.
template <class Q, class T>
void reduce_packets(const Q& q, const std::byte* packets, std::size_t stride,
                    std::size_t packet_bytes, int world, std::size_t count, reduce_op op,
                    float* acc, T* recv, const char* where) {
  constexpr int element = static_cast<int>(element_traits<T>::tag);
  for (int r = 0; r < world; ++r)
    check_received(q, packets + static_cast<std::size_t>(r) * stride, count, element, packet_bytes,
                   r, where);
  std::fill(acc, acc + count, 0.0f);
  accumulate_packets(q, packets, static_cast<std::size_t>(world), stride, count, acc);
  if (op == reduce_op::avg) {
    const float ranks = static_cast<float>(world);
    for (std::size_t i = 0; i < count; ++i) acc[i] = acc[i] / ranks;
  }
  narrow_store(acc, count, recv);
}

}  // namespace qsdp::detail
