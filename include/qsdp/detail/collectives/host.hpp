// SPDX-License-Identifier: Apache-2.0
//
// The collectives on host buffers (declared and documented in qsdp/collectives.hpp): descriptor
// agreement, then the codec and the communicator's byte exchanges, in the scratch that plan_scratch
// lays out in the communicator's workspace.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../../codec.hpp"
#include "../../collectives.hpp"
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
    throw qsdp::error(std::string(e.what()) + " (in the packet from rank " + std::to_string(from) + ")");
  }
}

/// all_gather's body, with scratch laid out by the caller: `packets` holds (world + 1) packets.
template <class Comm, class Q, class T>
void all_gather_packets(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                        std::uint64_t call, std::byte* packets, const char* where) {
  const int world = comm.size();
  const std::size_t packet_bytes = compressed_size<T>(q, count);
  std::byte* mine = packets;
  std::byte* gathered = packets + packet_bytes;
  encode(q, send, count, mine,
         rng_position{.call = call, .stream = chunk_stream(comm.rank(), world, 0)});
  comm.all_gather_bytes(mine, gathered, packet_bytes);
  for (int r = 0; r < world; ++r) {
    const std::byte* packet = gathered + static_cast<std::size_t>(r) * packet_bytes;
    check_received(q, packet, count, static_cast<int>(element_traits<T>::tag), packet_bytes, r, where);
    decode(q, packet, count, recv + static_cast<std::size_t>(r) * count);
  }
}

/// reduce_scatter's body: `packets` holds 2 * world packets, `acc` count floats.
template <class Comm, class Q, class T>
void reduce_scatter_packets(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                            reduce_op op, std::uint64_t call, std::byte* packets, float* acc,
                            const char* where) {
  const int world = comm.size();
  const std::size_t packet_bytes = compressed_size<T>(q, count);
  std::byte* outgoing = packets;
  std::byte* incoming = packets + static_cast<std::size_t>(world) * packet_bytes;
  for (int chunk = 0; chunk < world; ++chunk)
    encode(q, send + static_cast<std::size_t>(chunk) * count, count,
           outgoing + static_cast<std::size_t>(chunk) * packet_bytes,
           rng_position{.call = call, .stream = chunk_stream(comm.rank(), world, chunk)});
  comm.all_to_all_bytes(outgoing, incoming, packet_bytes);
  for (int r = 0; r < world; ++r)
    check_received(q, incoming + static_cast<std::size_t>(r) * packet_bytes, count,
                   static_cast<int>(element_traits<T>::tag), packet_bytes, r, where);
  std::fill(acc, acc + count, 0.0f);
  decode_accumulate(q, incoming, static_cast<std::size_t>(world), count, acc);
  if (op == reduce_op::avg) {
    const float ranks = static_cast<float>(world);
    for (std::size_t i = 0; i < count; ++i) acc[i] = acc[i] / ranks;
  }
  // Plain rounding, not saturation: a sum that overflows T is reported as inf, never clipped.
  narrow_store(acc, count, recv);
}

}  // namespace qsdp::detail

namespace qsdp {

template <communicator Comm, class Q, class T>
void all_gather(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count) {
  constexpr const char* where = "qsdp::all_gather";
  detail::check_collective_arguments<Comm, Q, T>(comm, q, where);
  detail::check_buffers(send, "send", recv, "recv", count, where);
  const int world = comm.size();
  const std::uint64_t call = comm.next_call();
  const detail::scratch_layout l =
      detail::plan_scratch(detail::collective_kind::all_gather, memory_space::host,
                           static_cast<std::size_t>(world), count, sizeof(T),
                           compressed_size<T>(q, count));
  std::byte* scratch = comm.workspace().get(l.total);
  detail::agree_on_call(comm,
                        detail::describe_call<Q, T>(q, detail::collective_kind::all_gather,
                                                    reduce_op::sum, false, count, world),
                        scratch + l.descriptors, where);
  detail::all_gather_packets(comm, q, send, recv, count, call, scratch + l.packets, where);
}

template <communicator Comm, class Q, class T>
void reduce_scatter(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count, reduce_op op) {
  constexpr const char* where = "qsdp::reduce_scatter";
  detail::check_collective_arguments<Comm, Q, T>(comm, q, where);
  detail::check_buffers(send, "send", recv, "recv", count, where);
  detail::check_op(op, where);
  const int world = comm.size();
  const std::uint64_t call = comm.next_call();
  const detail::scratch_layout l =
      detail::plan_scratch(detail::collective_kind::reduce_scatter, memory_space::host,
                           static_cast<std::size_t>(world), count, sizeof(T),
                           compressed_size<T>(q, count));
  std::byte* scratch = comm.workspace().get(l.total);
  detail::agree_on_call(comm,
                        detail::describe_call<Q, T>(q, detail::collective_kind::reduce_scatter, op,
                                                    true, count, world),
                        scratch + l.descriptors, where);
  detail::reduce_scatter_packets(comm, q, send, recv, count, op, call, scratch + l.packets,
                                 reinterpret_cast<float*>(scratch + l.accumulator), where);
}

template <communicator Comm, class Q, class T>
void all_reduce(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op) {
  constexpr const char* where = "qsdp::all_reduce";
  detail::check_collective_arguments<Comm, Q, T>(comm, q, where);
  detail::check_buffers(data, "data", data, "data", count, where);
  detail::check_op(op, where);
  const auto world = static_cast<std::size_t>(comm.size());
  // Two phases, two call indices: the gather's draws must not repeat the scatter's.
  const std::uint64_t scatter_call = comm.next_call();
  const std::uint64_t gather_call = comm.next_call();
  const std::size_t shard = (count + world - 1) / world;
  const std::size_t padded = shard * world;
  const detail::scratch_layout l =
      detail::plan_scratch(detail::collective_kind::all_reduce, memory_space::host, world, shard,
                           sizeof(T), compressed_size<T>(q, shard));
  std::byte* scratch = comm.workspace().get(l.total);
  detail::agree_on_call(comm,
                        detail::describe_call<Q, T>(q, detail::collective_kind::all_reduce, op, true,
                                                    count, comm.size()),
                        scratch + l.descriptors, where);
  T* full = reinterpret_cast<T*>(scratch + l.values);
  T* mine = reinterpret_cast<T*>(scratch + l.reduced);
  float* acc = reinterpret_cast<float*>(scratch + l.accumulator);
  if (count) std::memcpy(static_cast<void*>(full), data, count * sizeof(T));
  for (std::size_t i = count; i < padded; ++i) full[i] = detail::element_traits<T>::from_float(0.0f);
  detail::reduce_scatter_packets(comm, q, full, mine, shard, op, scatter_call, scratch + l.packets,
                                 acc, where);
  detail::all_gather_packets(comm, q, mine, full, shard, gather_call, scratch + l.packets, where);
  if (count) std::memcpy(static_cast<void*>(data), full, count * sizeof(T));
}

}  // namespace qsdp
