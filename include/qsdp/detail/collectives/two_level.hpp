// SPDX-License-Identifier: Apache-2.0
//
// The two-level collectives (declared and documented in qsdp/collectives.hpp, which includes this
// file after its declarations): compositions of the flat collectives on the pair's two
// communicators, with the reorderings between the world's rank order (node index x node size +
// place) and the levels'. The schedules below are written once, over "ops" that move values and run
// a level's flat collective: host_level_ops here (memcpy, the host collectives), device_level_ops
// in detail/cuda/device_two_level.cuh (copies and the device collectives ordered on a stream), so
// host and device calls give the same bits.
//
//   reduce_scatter: reorder the world chunks by place, then by node; reduce_scatter within the node
//                   (N chunks per place: the node's sums), then across nodes (a chunk per node)
//   all_gather:     all_gather across nodes (the shards of my place), then within the node (the
//                   world's shards, by place then node); reorder to rank order
//   all_reduce:     two-level reduce_scatter of world shards (the last padded with zeros), then
//                   two-level all_gather of the reduced shards
//
// Before any of it, the ranks agree on the whole call at both levels (two_level_agreement), so a
// rank that called differently makes every rank throw, not only the ranks of its node or place
// (host calls every time; device calls once per signature, as the flat device collectives).
//
// Random streams: each level's exchanges draw from their communicator's call counter (the two
// counters may differ: a level draws one index per pipeline piece) and the streams of their ranks,
// offset (plan_collective's stream_base, level_stream_bases) so that no two encodes of one call
// share numbers even when both policies have the same seed: the reduce_scatter within node n takes
// streams n x node_size^2 + [0, node_size^2), the exchanges across nodes of place l world x
// node_size + l x nodes^2 + [0, nodes^2), after every inside stream. The all_gather within a node
// has no offset on purpose: every node encodes the same across-decoded shards there, and drawing
// the same numbers is what makes every node's result the same bits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "../../collective_types.hpp"
#include "../../communicator.hpp"
#include "host.hpp"
#include "plan.hpp"

namespace qsdp::detail {

/// The pair's shape, as the two-level collectives use it.
struct grid {
  std::size_t node_size, nodes, world, node, place;  // place: the rank within its node
};

template <class Node, class Cross>
grid grid_of(two_level<Node, Cross>& comm) {
  return {static_cast<std::size_t>(comm.node_size()), static_cast<std::size_t>(comm.nodes()),
          static_cast<std::size_t>(comm.size()), static_cast<std::size_t>(comm.cross().rank()),
          static_cast<std::size_t>(comm.node().rank())};
}

/// The stream offsets of a rank's two levels (see the file comment): `inside` for its node's
/// reduce_scatter, `across` for its place's exchanges across nodes. The ranges they start are
/// disjoint for all ranks and both levels.
struct stream_bases {
  std::uint32_t inside, across;
};

inline stream_bases level_stream_bases(const grid& g) {
  return {static_cast<std::uint32_t>(g.node * g.node_size * g.node_size),
          static_cast<std::uint32_t>(g.world * g.node_size + g.place * g.nodes * g.nodes)};
}

/// The streams of the levels must stay below 2^31 (the Philox counter's domain bit).
inline void check_level_streams(const grid& g, const char* where) {
  const std::uint64_t end = std::uint64_t{g.world} * (g.node_size + g.nodes);
  if (end >= (std::uint64_t{1} << 31))
    throw qsdp::error(std::string(where) + ": world " + std::to_string(g.world) +
                      " with nodes of " + std::to_string(g.node_size) +
                      " needs more random streams than there are (world x (node size + nodes) "
                      "must stay below 2^31)");
}

/// The ranks agree on a two-level call at both levels: within the node (every rank compares its
/// node's descriptors, two per rank: inside and across), then across nodes (descriptors again, and
/// whether the node found a mismatch), so that a mismatch anywhere makes every rank throw. Ranks of
/// the node where it happened name the difference; the others name that node.
/// `gather` moves the descriptors (detail::host_gather, or the device pair's).
template <class Node, class Cross, class Gather>
void two_level_agreement(two_level<Node, Cross>& comm, const call_descriptor (&mine)[2],
                         Gather&& gather, const char* where) {
  struct said {
    call_descriptor levels[2];
    std::uint64_t mismatch_in_node;  // 0, or 1 + the first node rank that called differently
  };
  const grid g = grid_of(comm);
  said me{{mine[0], mine[1]}, 0};
  const auto* const node_calls = reinterpret_cast<const said*>(gather(comm.node(), &me, sizeof me));
  std::string problem;
  for (std::size_t r = 1; r < g.node_size && problem.empty(); ++r)
    for (int level = 0; level < 2 && problem.empty(); ++level) {
      const std::string m = describe_mismatch(node_calls[0].levels[level], 0,
                                              node_calls[r].levels[level], static_cast<int>(r));
      if (!m.empty()) {
        problem = std::string(level == 0 ? "within" : "across") + " nodes: node " +
                  std::to_string(g.node) + "'s " + m;
        me.mismatch_in_node = 1 + r;
      }
    }
  const auto* const cross_calls =
      reinterpret_cast<const said*>(gather(comm.cross(), &me, sizeof me));
  for (std::size_t n = 0; n < g.nodes && problem.empty(); ++n) {
    if (cross_calls[n].mismatch_in_node)
      problem = "on node " + std::to_string(n) + ", rank " +
                std::to_string(cross_calls[n].mismatch_in_node - 1) +
                " of the node called differently from its rank 0 (that node's ranks name how)";
    for (int level = 0; level < 2 && problem.empty() && n > 0; ++level) {
      const std::string m = describe_mismatch(cross_calls[0].levels[level], 0,
                                              cross_calls[n].levels[level], static_cast<int>(n));
      if (!m.empty())
        problem = std::string(level == 0 ? "within" : "across") + " nodes: the ranks at place " +
                  std::to_string(g.place) + " of each node: " + m +
                  " (ranks here are node indices)";
    }
  }
  if (!problem.empty()) throw qsdp::error(std::string(where) + ": ranks disagree " + problem);
}

/// The checks every two-level call makes after its host or device checks of policies and
/// buffers; returns the levels' descriptors of the call in `mine` and the grid.
template <class Node, class Cross, class Inside, class Across, class T>
grid describe_two_level(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                        collective_kind kind, reduce_op op, std::size_t count, call_options options,
                        call_descriptor (&mine)[2], const char* where) {
  check_world(comm.size(), where);
  check_count(count, where);
  if (kind != collective_kind::all_gather) check_op(op, where);
  check_max_pieces(options.max_pieces, where);
  mine[0] = describe_call<Inside, T>(q.inside, kind, op, count, comm.size(), options);
  mine[1] = describe_call<Across, T>(q.across, kind, op, count, comm.size(), options);
  const grid g = grid_of(comm);
  check_level_streams(g, where);
  return g;
}

/// What every host two-level collective checks first, then the agreement; returns the grid.
template <class Node, class Cross, class Inside, class Across, class T>
grid begin_two_level(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                     collective_kind kind, reduce_op op, const T* a, const T* b, std::size_t count,
                     call_options options, const char* where) {
  check_collective_arguments<Node, Inside, T>(comm.node(), q.inside, where);
  check_collective_arguments<Cross, Across, T>(comm.cross(), q.across, where);
  const bool in_place = kind == collective_kind::all_reduce;
  check_buffers(a, in_place ? "data" : "send", b, in_place ? "data" : "recv", count, where);
  call_descriptor mine[2];
  const grid g = describe_two_level<Node, Cross, Inside, Across, T>(comm, q, kind, op, count,
                                                                    options, mine, where);
  two_level_agreement(comm, mine, host_gather{}, where);
  return g;
}

/// Which level of a two-level call runs.
enum class level { inside, across };

/// The name a level's collective reports in its errors (`device`: of device buffers).
inline const char* level_where(collective_kind kind, level at, bool device) {
  const bool in = at == level::inside;
  if (kind == collective_kind::reduce_scatter)
    return device ? (in ? "qsdp::reduce_scatter (device, two-level, within the node)"
                        : "qsdp::reduce_scatter (device, two-level, across nodes)")
                  : (in ? "qsdp::reduce_scatter (two-level, within the node)"
                        : "qsdp::reduce_scatter (two-level, across nodes)");
  return device ? (in ? "qsdp::all_gather (device, two-level, within the node)"
                      : "qsdp::all_gather (device, two-level, across nodes)")
                : (in ? "qsdp::all_gather (two-level, within the node)"
                      : "qsdp::all_gather (two-level, across nodes)");
}

/// The moves of a two-level schedule on host buffers: memcpy, and the flat host collective of a
/// level. The device pair's (detail/cuda/device_two_level.cuh) has the same members.
template <class Node, class Cross, class Inside, class Across>
struct host_level_ops {
  two_level<Node, Cross>& comm;
  const level_policies<Inside, Across>& q;
  reduce_op op;
  call_options options;

  /// rows x n values from `from` (a row every from_stride values) to `to` (every to_stride).
  template <class T>
  void copy_rows(T* to, std::size_t to_stride, const T* from, std::size_t from_stride,
                 std::size_t rows, std::size_t n) const {
    for (std::size_t r = 0; r < rows && n; ++r)
      std::memcpy(static_cast<void*>(to + r * to_stride), from + r * from_stride, n * sizeof(T));
  }
  template <class T>
  void copy(T* to, const T* from, std::size_t n) const {
    copy_rows(to, 0, from, 0, 1, n);
  }
  template <class T>
  void zero(T* to, std::size_t n) const {  // all-zero bits: +0 in every element type
    if (n) std::memset(static_cast<void*>(to), 0, n * sizeof(T));
  }
  template <class T>
  void run(level at, collective_kind kind, const T* a, T* b, std::size_t count,
           std::uint32_t stream_base) const {
    const reduce_op level_op = kind == collective_kind::all_gather ? reduce_op::sum : op;
    if (at == level::inside)
      run_host_collective(comm.node(), q.inside, kind, level_op, a, b, count, options,
                          level_where(kind, at, false), stream_base);
    else
      run_host_collective(comm.cross(), q.across, kind, level_op, a, b, count, options,
                          level_where(kind, at, false), stream_base);
  }
};

/// The reduce_scatter of `count` values per rank, through `permuted` (world x count values) and
/// `partial` (nodes x count).
template <class Ops, class T>
void two_level_scatter(const Ops& ops, const grid& g, const T* send, T* recv, std::size_t count,
                       T* permuted, T* partial) {
  // Chunk n x node_size + l of the world goes to block l (for place l), position n.
  for (std::size_t l = 0; l < g.node_size; ++l)
    ops.copy_rows(permuted + l * g.nodes * count, count, send + l * count, g.node_size * count,
                  g.nodes, count);
  ops.run(level::inside, collective_kind::reduce_scatter, static_cast<const T*>(permuted), partial,
          count * g.nodes, level_stream_bases(g).inside);
  ops.run(level::across, collective_kind::reduce_scatter, static_cast<const T*>(partial), recv,
          count, level_stream_bases(g).across);
}

/// The all_gather of `count` values per rank, through `mine` (nodes x count: my place's shards) and
/// `gathered` (world x count, by place then node).
template <class Ops, class T>
void two_level_gather(const Ops& ops, const grid& g, const T* send, T* recv, std::size_t count,
                      T* mine, T* gathered) {
  ops.run(level::across, collective_kind::all_gather, send, mine, count,
          level_stream_bases(g).across);
  ops.run(level::inside, collective_kind::all_gather, static_cast<const T*>(mine), gathered,
          count * g.nodes, 0u);
  for (std::size_t l = 0; l < g.node_size; ++l)
    ops.copy_rows(recv + l * count, g.node_size * count, gathered + l * g.nodes * count, count,
                  g.nodes, count);
}

/// Runs a two-level collective's schedule (the file comment) with `ops`, in scratch that
/// `scratch(bytes)` provides (64-byte aligned sections of values of T, carved here).
template <class Ops, class T, class Scratch>
void run_two_level(const Ops& ops, const grid& g, collective_kind kind, const T* a, T* b,
                   std::size_t count, Scratch&& scratch) {
  auto carve = [&](std::initializer_list<std::size_t> sizes, T** out) {
    std::size_t total = 0;
    for (std::size_t size : sizes) total += align64(size * sizeof(T));
    std::byte* base = scratch(total);
    for (std::size_t size : sizes) {
      *out++ = reinterpret_cast<T*>(base);
      base += align64(size * sizeof(T));
    }
  };
  switch (kind) {
    case collective_kind::reduce_scatter: {
      T* parts[2];  // permuted, node sums
      carve({g.world * count, g.nodes * count}, parts);
      two_level_scatter(ops, g, a, b, count, parts[0], parts[1]);
      return;
    }
    case collective_kind::all_gather: {
      T* parts[2];  // my place's shards, gathered
      carve({g.nodes * count, g.world * count}, parts);
      two_level_gather(ops, g, a, b, count, parts[0], parts[1]);
      return;
    }
    case collective_kind::all_reduce: {
      // Reduce-scatter of world shards (the last padded with zeros), all-gather of the reduced
      // ones.
      const std::size_t shard = (count + g.world - 1) / g.world;
      T* parts[5];  // padded data, permuted, node sums / my place's shards, my shard, gathered
      carve({g.world * shard, g.world * shard, g.nodes * shard, shard, g.world * shard}, parts);
      ops.copy(parts[0], a, count);
      ops.zero(parts[0] + count, g.world * shard - count);
      two_level_scatter(ops, g, static_cast<const T*>(parts[0]), parts[3], shard, parts[1],
                        parts[2]);
      two_level_gather(ops, g, static_cast<const T*>(parts[3]), parts[0], shard, parts[2],
                       parts[4]);
      ops.copy(b, static_cast<const T*>(parts[0]), count);
      return;
    }
  }
}

}  // namespace qsdp::detail

namespace qsdp {

template <communicator Node, communicator Cross, class Inside, class Across, class T>
void reduce_scatter(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                    const T* send, T* recv, std::size_t count, reduce_op op, call_options options) {
  constexpr const char* where = "qsdp::reduce_scatter (two-level)";
  constexpr auto kind = detail::collective_kind::reduce_scatter;
  const detail::grid g =
      detail::begin_two_level(comm, q, kind, op, send, recv, count, options, where);
  detail::run_two_level(detail::host_level_ops<Node, Cross, Inside, Across>{comm, q, op, options},
                        g, kind, send, recv, count,
                        [&](std::size_t bytes) { return comm.workspace().get(bytes); });
}

template <communicator Node, communicator Cross, class Inside, class Across, class T>
void all_gather(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                const T* send, T* recv, std::size_t count, call_options options) {
  constexpr const char* where = "qsdp::all_gather (two-level)";
  constexpr auto kind = detail::collective_kind::all_gather;
  const detail::grid g =
      detail::begin_two_level(comm, q, kind, reduce_op::sum, send, recv, count, options, where);
  detail::run_two_level(
      detail::host_level_ops<Node, Cross, Inside, Across>{comm, q, reduce_op::sum, options}, g,
      kind, send, recv, count, [&](std::size_t bytes) { return comm.workspace().get(bytes); });
}

template <communicator Node, communicator Cross, class Inside, class Across, class T>
void all_reduce(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q, T* data,
                std::size_t count, reduce_op op, call_options options) {
  constexpr const char* where = "qsdp::all_reduce (two-level)";
  constexpr auto kind = detail::collective_kind::all_reduce;
  const detail::grid g = detail::begin_two_level(comm, q, kind, op, static_cast<const T*>(data),
                                                 data, count, options, where);
  detail::run_two_level(detail::host_level_ops<Node, Cross, Inside, Across>{comm, q, op, options},
                        g, kind, static_cast<const T*>(data), data, count,
                        [&](std::size_t bytes) { return comm.workspace().get(bytes); });
}

}  // namespace qsdp
