// SPDX-License-Identifier: Apache-2.0
//
// The collectives on host buffers (declared and documented in qsdp/collectives.hpp): the pipelines
// of pipeline.hpp with the host codec and the communicator's byte exchanges, in the scratch that
// plan_scratch lays out in the communicator's workspace.
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
#include "pipeline.hpp"
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
    throw qsdp::error(std::string(e.what()) + " (in the packet from rank " + std::to_string(from) +
                      ")");
  }
}

/// The collective pipeline's steps on host buffers (detail/collectives/pipeline.hpp): the host
/// codec and the communicator's exchanges. Constructing one does what every host collective does
/// first: checks the arguments, plans the call, takes its scratch from the communicator's workspace
/// and has the ranks agree on the call (ranks that called differently all throw).
template <class Comm, class Q, class T>
class host_steps {
 public:
  host_steps(Comm& comm, const Q& q, collective_kind kind, reduce_op op, const T* a, const T* b,
             std::size_t count, const char* where)
      : comm_(comm), q_(q), op_(op), where_(where) {
    check_collective_arguments<Comm, Q, T>(comm, q, where);
    const bool in_place = kind == collective_kind::all_reduce;
    check_buffers(a, in_place ? "data" : "send", b, in_place ? "data" : "recv", count, where);
    check_count(count, where);
    if (kind != collective_kind::all_gather) check_op(op, where);
    plan_ = plan_collective<Q, T>(comm, q, kind, op, count);
    scratch_ = comm.workspace().get(plan_.scratch.total);
    agree_on_call(comm, plan_.descriptor, scratch_ + plan_.scratch.descriptors, where);
  }

  int rank() const { return comm_.rank(); }
  int world() const { return comm_.size(); }
  const collective_call& plan() const { return plan_; }
  std::byte* scratch() const { return scratch_; }

  void encode(const T* src, std::size_t count, std::byte* packet, const rng_key& key) {
    qsdp::encode(q_, src, count, packet, rng_position{.call = key.call, .stream = key.stream});
  }
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    comm_.all_gather_bytes(send, recv, n);
  }
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    comm_.all_to_all_bytes(send, recv, n);
  }

  /// Rank r's packet, its header checked, decoded to recv + r * count.
  void decode_each(const std::byte* packets, std::size_t packet_bytes, std::size_t count, T* recv) {
    for (int r = 0; r < world(); ++r) {
      const std::byte* packet = packets + static_cast<std::size_t>(r) * packet_bytes;
      check_received(q_, packet, count, element_tag, packet_bytes, r, where_);
      qsdp::decode(q_, packet, count, recv + static_cast<std::size_t>(r) * count);
    }
  }

  /// The world packets, headers checked, summed in fp32 in rank order (then averaged for avg) in
  /// the scratch's accumulator, and rounded to T plainly: a sum that overflows T is inf, never
  /// clipped.
  void reduce(const std::byte* packets, std::size_t packet_bytes, std::size_t count, T* recv) {
    for (int r = 0; r < world(); ++r)
      check_received(q_, packets + static_cast<std::size_t>(r) * packet_bytes, count, element_tag,
                     packet_bytes, r, where_);
    float* acc = reinterpret_cast<float*>(scratch_ + plan_.scratch.accumulator);
    std::fill(acc, acc + count, 0.0f);
    qsdp::decode_accumulate(q_, packets, static_cast<std::size_t>(world()), count, acc);
    if (op_ == reduce_op::avg) {
      const float ranks = static_cast<float>(world());
      for (std::size_t i = 0; i < count; ++i) acc[i] = acc[i] / ranks;
    }
    narrow_store(acc, count, recv);
  }

  void copy(T* to, const T* from, std::size_t n) {
    if (n) std::memcpy(static_cast<void*>(to), from, n * sizeof(T));
  }
  void zero(T* to, std::size_t n) {
    if (n) std::memset(static_cast<void*>(to), 0, n * sizeof(T));
  }
  void finish() {}  // the host's call indices were drawn from the communicator when planned

 private:
  static constexpr int element_tag = static_cast<int>(element_traits<T>::tag);
  Comm& comm_;
  const Q& q_;
  reduce_op op_;
  const char* where_;
  collective_call plan_{};
  std::byte* scratch_ = nullptr;
};

}  // namespace qsdp::detail

namespace qsdp {

template <communicator Comm, class Q, class T>
void all_gather(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count) {
  detail::host_steps<Comm, Q, T> steps(comm, q, detail::collective_kind::all_gather, reduce_op::sum,
                                       send, recv, count, "qsdp::all_gather");
  detail::run_collective(steps, q, send, recv, count);
}

template <communicator Comm, class Q, class T>
void reduce_scatter(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                    reduce_op op) {
  detail::host_steps<Comm, Q, T> steps(comm, q, detail::collective_kind::reduce_scatter, op, send,
                                       recv, count, "qsdp::reduce_scatter");
  detail::run_collective(steps, q, send, recv, count);
}

template <communicator Comm, class Q, class T>
void all_reduce(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op) {
  detail::host_steps<Comm, Q, T> steps(comm, q, detail::collective_kind::all_reduce, op, data, data,
                                       count, "qsdp::all_reduce");
  detail::run_collective(steps, q, data, data, count);
}

}  // namespace qsdp
