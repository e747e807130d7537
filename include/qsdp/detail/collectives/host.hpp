// SPDX-License-Identifier: Apache-2.0
//
// The collectives on host buffers (declared and documented in qsdp/collectives.hpp, which includes
// this file after its declarations): the pipelines of pipeline.hpp with the host codec and the
// communicator's byte exchanges, in the scratch that plan_scratch lays out in the communicator's
// workspace.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../../codec.hpp"
#include "../../collective_types.hpp"
#include "../../communicator.hpp"
#include "../codec/checks.hpp"
#include "../host/loops.hpp"
#include "group.hpp"
#include "host_packets.hpp"
#include "pipeline.hpp"
#include "plan.hpp"
#include "timing.hpp"

namespace qsdp::detail {

/// The collective pipeline's steps on host buffers (detail/collectives/pipeline.hpp): the host
/// codec and the communicator's exchanges, for a call run_host_collective planned and agreed on, in
/// the scratch it took from the communicator's workspace.
template <class Comm, class Q, class T>
class host_steps {
 public:
  host_steps(Comm& comm, const Q& q, const collective_call& plan, reduce_op op, std::byte* scratch,
             const char* where)
      : comm_(comm), q_(q), op_(op), where_(where), plan_(plan), scratch_(scratch) {}

  int rank() const { return comm_.rank(); }
  int world() const { return comm_.size(); }
  const collective_call& plan() const { return plan_; }
  std::byte* scratch() const { return scratch_; }

  /// Every block carries the call's descriptor in front of its packet (exchange_lead).
  static constexpr std::size_t lead() { return exchange_lead(memory_space::host); }
  void encode(const T* src, std::size_t count, std::byte* block, const rng_key& key) {
    add_seconds_on_exit timed(comm_.workspace().timings.encode_seconds);
    std::memcpy(block, &plan_.descriptor, lead());
    qsdp::encode(q_, src, count, block + lead(),
                 rng_position{.call = key.call, .stream = key.stream});
  }
  /// The exchanges: started and waited for through the communicator when it overlaps them
  /// (overlapping_communicator) and the call has pieces to overlap, else run whole when started
  /// (a call of one piece has nothing to overlap, and MPI's blocking collectives are its fastest).
  using ticket = exchange_ticket;
  ticket start_all_gather(const std::byte* send, std::byte* recv, std::size_t n) {
    if constexpr (overlapping_communicator<Comm>)
      if (overlaps()) return comm_.start_all_gather_bytes(send, recv, n);
    comm_.all_gather_bytes(send, recv, n);
    return {};
  }
  ticket start_all_to_all(const std::byte* send, std::byte* recv, std::size_t n) {
    if constexpr (overlapping_communicator<Comm>)
      if (overlaps()) return comm_.start_all_to_all_bytes(send, recv, n);
    comm_.all_to_all_bytes(send, recv, n);
    return {};
  }
  void wait(ticket t) {
    if constexpr (overlapping_communicator<Comm>)
      if (overlaps()) comm_.wait(t);
  }
  void progress() {
    if constexpr (overlapping_communicator<Comm>)
      if (overlaps()) comm_.progress();
  }

  /// The ranks' descriptors checked, then rank r's packet, its header checked, decoded to
  /// recv + r * stride.
  void decode_each(const std::byte* blocks, std::size_t block_bytes, std::size_t count, T* recv,
                   std::size_t stride) {
    add_seconds_on_exit timed(comm_.workspace().timings.decode_seconds);
    check_descriptors(blocks, world(), where_, block_bytes);
    decode_packets(q_, blocks + lead(), block_bytes, block_bytes - lead(), world(), count, recv,
                   stride, where_, [this] { progress(); });
  }

  /// The ranks' descriptors checked, then rank r's packet, its header checked, copied to the
  /// block-scaled layout at recv + r * stride (the encoded all-gather).
  void decode_each(const std::byte* blocks, std::size_t block_bytes, std::size_t count,
                   block_scaled_cursor<Q> recv, std::size_t stride) {
    add_seconds_on_exit timed(comm_.workspace().timings.decode_seconds);
    check_descriptors(blocks, world(), where_, block_bytes);
    const packet_layout l = layout_for<Q, T>(q_, count);
    constexpr int element = static_cast<int>(element_traits<T>::tag);
    for (int r = 0; r < world(); ++r) {
      const std::byte* packet = blocks + static_cast<std::size_t>(r) * block_bytes + lead();
      check_received(q_, packet, count, element, block_bytes - lead(), r, where_);
      const block_scaled_cursor<Q> to = recv + static_cast<std::size_t>(r) * stride;
      copy_block_scaled(packet, l, Q::bits, count, to.elements, to.scales);
      progress();
    }
  }

  /// The ranks' descriptors checked, then the world packets reduced to recv (reduce_packets) in
  /// the scratch's accumulator.
  void reduce(const std::byte* blocks, std::size_t block_bytes, std::size_t count, T* recv) {
    add_seconds_on_exit timed(comm_.workspace().timings.decode_seconds);
    check_descriptors(blocks, world(), where_, block_bytes);
    reduce_packets(q_, blocks + lead(), block_bytes, block_bytes - lead(), world(), count, op_,
                   reinterpret_cast<float*>(scratch_ + plan_.scratch.accumulator), recv, where_);
  }

  void copy(T* to, const T* from, std::size_t n) {
    if (n) std::memcpy(static_cast<void*>(to), from, n * sizeof(T));
  }
  void zero(T* to, std::size_t n) {
    if (n) std::memset(static_cast<void*>(to), 0, n * sizeof(T));
  }
  void finish() {}  // the host's call indices were drawn from the communicator when planned

 private:
  bool overlaps() const { return plan_.pieces.count > 1; }

  Comm& comm_;
  const Q& q_;
  reduce_op op_;
  const char* where_;
  const collective_call& plan_;
  std::byte* scratch_;
};

/// A call the size gate sends uncompressed (call_options::min_compressed_bytes), in one exchange of
/// blocks of [this rank's call descriptor | values]: all_gather and all_reduce send one block (the
/// shard; all_reduce the whole buffer) to every peer, reduce_scatter block j to rank j. Every rank
/// checks all descriptors before it uses a value, so ranks that called differently all throw (what
/// that cannot catch, and why a signature's first call agrees separately: agree_once). The sums are
/// those of the policy
/// qsdp::identity: fp32, in rank order, then divided by the world for avg, then rounded to T;
/// all_reduce sums the world's whole buffers in one go, which gives the bits that its
/// reduce_scatter then all_gather would.
template <class Comm, class T>
void run_gated(Comm& comm, const collective_call& c, reduce_op op, const T* send, T* recv,
               std::size_t count, std::byte* scratch, const char* where) {
  const gated_layout& l = c.gated;
  const auto world = static_cast<std::size_t>(comm.size());
  const std::size_t value_bytes = l.block_values * sizeof(T);
  agree_once(comm, c.descriptor, scratch + l.incoming, where);
  std::byte* const out = scratch + l.outgoing;
  std::byte* const in = scratch + l.incoming;
  auto fill_block = [&](std::byte* block, const T* values) {
    std::memcpy(block, &c.descriptor, sizeof c.descriptor);
    if (value_bytes) std::memcpy(block + sizeof c.descriptor, values, value_bytes);
  };
  if (c.kind == collective_kind::reduce_scatter) {
    for (std::size_t j = 0; j < world; ++j) fill_block(out + j * l.block_bytes, send + j * count);
    comm.all_to_all_bytes(out, in, l.block_bytes);
  } else {
    fill_block(out, send);
    comm.all_gather_bytes(out, in, l.block_bytes);
  }
  check_descriptors(in, comm.size(), where, l.block_bytes);
  auto values_of = [&](std::size_t r) {
    return reinterpret_cast<const T*>(in + r * l.block_bytes + sizeof(call_descriptor));
  };
  if (c.kind == collective_kind::all_gather) {
    for (std::size_t r = 0; r < world; ++r)
      if (value_bytes) std::memcpy(static_cast<void*>(recv + r * count), values_of(r), value_bytes);
    return;
  }
  float* const acc = reinterpret_cast<float*>(scratch + l.accumulator);
  std::fill(acc, acc + l.block_values, 0.0f);
  for (std::size_t r = 0; r < world; ++r) {
    const T* values = values_of(r);
    for (std::size_t i = 0; i < l.block_values; ++i)
      acc[i] = acc[i] + element_traits<T>::to_float(values[i]);
  }
  if (op == reduce_op::avg) {
    const float ranks = static_cast<float>(world);
    for (std::size_t i = 0; i < l.block_values; ++i) acc[i] = acc[i] / ranks;
  }
  narrow_store(acc, l.block_values, recv);
}

/// Every host collective: checks the arguments, plans the call (drawing its call indices), takes
/// its scratch from the communicator's workspace, then either runs the pipeline after the ranks
/// have agreed on the call, or (the size gate) run_gated.
/// stream_base: added to every random stream (chunk_stream) of the call, so that the levels of a
/// two-level collective draw numbers of their own (detail/collectives/two_level.hpp); 0 otherwise.
template <class Comm, class Q, class T>
void run_host_collective(Comm& comm, const Q& q, collective_kind kind, reduce_op op, const T* a,
                         T* b, std::size_t count, call_options options, const char* where,
                         std::uint32_t stream_base = 0) {
  enter_host_call(comm, where);
  check_host_call(comm, q, kind, op, a, b, count, options, where);
  add_seconds_on_exit timed(comm.workspace().timings.calls_seconds);
  const collective_call plan =
      plan_collective<Q, T>(comm, q, kind, op, count, options, stream_base);
  std::byte* const scratch =
      comm.workspace().get(plan.uncompressed ? plan.gated.total : plan.scratch.total);
  if (plan.uncompressed) {
    run_gated(comm, plan, op, a, b, count, scratch, where);
  } else {
    agree_once(comm, plan.descriptor, scratch + plan.scratch.descriptors, where);
    host_steps<Comm, Q, T> steps(comm, q, plan, op, scratch, where);
    run_collective(steps, q, a, b, count);
  }
  comm.workspace().counters.count(plan.uncompressed, count * sizeof(T));
}

/// The encoded all-gather: all_gather's plan, agreement and exchanges (its descriptor and packets
/// are all_gather's, so ranks may mix the two forms), each rank's packets copied to the
/// block-scaled layout instead of decoded.
template <class Comm, class Q, class T>
void run_host_gather_encoded(Comm& comm, const Q& q, const T* send, block_scaled_buffers recv,
                             std::size_t count, call_options options, const char* where) {
  enter_host_call(comm, where);
  check_collective_arguments<Comm, Q, T>(comm, q, where);
  check_buffers(send, "send", recv.elements, "recv.elements", count, where);
  check_buffers(send, "send", recv.scales, "recv.scales", count, where);
  check_count(count, where);
  check_max_pieces(options.max_pieces, where);
  check_block_scaled_count(q, count, where);
  check_encoded_gate(count, sizeof(T), options, where);
  add_seconds_on_exit timed(comm.workspace().timings.calls_seconds);
  const collective_call plan =
      plan_collective<Q, T>(comm, q, collective_kind::all_gather, reduce_op::sum, count, options);
  std::byte* const scratch = comm.workspace().get(plan.scratch.total);
  agree_once(comm, plan.descriptor, scratch + plan.scratch.descriptors, where);
  host_steps<Comm, Q, T> steps(comm, q, plan, reduce_op::sum, scratch, where);
  gather_packets(steps, q, send, block_scaled_cursor<Q>{recv.elements, recv.scales, q.bucket_size},
                 count, plan.calls[0], scratch + plan.scratch.packets);
  steps.finish();
  comm.workspace().counters.count(false, count * sizeof(T));
}

/// Every host collective started with a work: checked in the caller's thread (bad arguments throw
/// there, not at wait()), then run by run_host_collective on the communicator's progress thread.
template <class Comm, class Q, class T>
qsdp::work start_host_collective(Comm& comm, const Q& q, collective_kind kind, reduce_op op,
                                 const T* a, T* b, std::size_t count, call_options options,
                                 const char* where) {
  check_host_call(comm, q, kind, op, a, b, count, options, where);
  return start_on_lane(
      comm,
      [&comm, q, kind, op, a, b, count, options, where] {
        run_host_collective(comm, q, kind, op, a, b, count, options, where);
      },
      where);
}

}  // namespace qsdp::detail

namespace qsdp {

template <communicator Comm, class Q, class T>
void all_gather(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                call_options options) {
  detail::async_lane& lane = comm.workspace().lane;
  lane.drain("qsdp::all_gather");
  // A collective started with a work runs its calls on the lane: never recorded in a group.
  if (!lane.on_lane() && comm.workspace().group.open()) {
    detail::record_in_group(comm, q, detail::collective_kind::all_gather, reduce_op::sum, send,
                            recv, count, options, "qsdp::all_gather");
    return;
  }
  detail::run_host_collective(comm, q, detail::collective_kind::all_gather, reduce_op::sum, send,
                              recv, count, options, "qsdp::all_gather");
}

template <communicator Comm, class Q, class T>
void all_gather_encoded(Comm& comm, const Q& q, const T* send, block_scaled_buffers recv,
                        std::size_t count, call_options options) {
  static_assert(detail::block_scaled_layout_policy<Q>,
                "qsdp::all_gather_encoded: Q must be an MX policy (mxfp8, mxfp6, mxfp4; not "
                "rotated, not nvfp4, whose tensor scale is per packet)");
  detail::run_host_gather_encoded(comm, q, send, recv, count, options, "qsdp::all_gather_encoded");
}

template <communicator Comm, class Q, class T>
void reduce_scatter(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count, reduce_op op,
                    call_options options) {
  detail::async_lane& lane = comm.workspace().lane;
  lane.drain("qsdp::reduce_scatter");
  // A collective started with a work runs its calls on the lane: never recorded in a group.
  if (!lane.on_lane() && comm.workspace().group.open()) {
    detail::record_in_group(comm, q, detail::collective_kind::reduce_scatter, op, send, recv, count,
                            options, "qsdp::reduce_scatter");
    return;
  }
  detail::run_host_collective(comm, q, detail::collective_kind::reduce_scatter, op, send, recv,
                              count, options, "qsdp::reduce_scatter");
}

template <communicator Comm, class Q, class T>
void all_reduce(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op,
                call_options options) {
  detail::run_host_collective(comm, q, detail::collective_kind::all_reduce, op,
                              static_cast<const T*>(data), data, count, options,
                              "qsdp::all_reduce");
}

template <communicator Comm, class Q, class T>
work all_gather_async(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                      call_options options) {
  return detail::start_host_collective(comm, q, detail::collective_kind::all_gather, reduce_op::sum,
                                       send, recv, count, options, "qsdp::all_gather_async");
}

template <communicator Comm, class Q, class T>
work reduce_scatter_async(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                          reduce_op op, call_options options) {
  return detail::start_host_collective(comm, q, detail::collective_kind::reduce_scatter, op, send,
                                       recv, count, options, "qsdp::reduce_scatter_async");
}

template <communicator Comm, class Q, class T>
work all_reduce_async(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op,
                      call_options options) {
  return detail::start_host_collective(comm, q, detail::collective_kind::all_reduce, op,
                                       static_cast<const T*>(data), data, count, options,
                                       "qsdp::all_reduce_async");
}

}  // namespace qsdp
