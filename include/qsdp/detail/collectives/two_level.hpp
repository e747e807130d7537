// SPDX-License-Identifier: Apache-2.0
//
// The two-level collectives on host buffers (declared and documented in qsdp/collectives.hpp):
// compositions of the flat host collectives of host.hpp on the pair's two communicators, with the
// reorderings between the world's rank order (node index x node size + place) and the levels'.
//
//   reduce_scatter: reorder the world chunks by place, then by node; reduce_scatter within the node
//                   (N chunks per place: the node's sums), then across nodes (a chunk per node)
//   all_gather:     all_gather across nodes (the shards of my place), then within the node (the
//                   world's shards, by place then node); reorder to rank order
//   all_reduce:     two-level reduce_scatter of world shards (the last padded with zeros), then
//                   two-level all_gather of the reduced shards
//
// Before any of it, the ranks agree on the whole call at both levels (two_level_agreement), so a
// rank that called differently makes every rank throw, not only the ranks of its node or place.
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
#include <string>
#include <vector>

#include "../../collectives.hpp"
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
template <class Node, class Cross>
void two_level_agreement(two_level<Node, Cross>& comm, const call_descriptor (&mine)[2],
                         const char* where) {
  struct said {
    call_descriptor levels[2];
    std::uint64_t mismatch_in_node;  // 0, or 1 + the first node rank that called differently
  };
  const grid g = grid_of(comm);
  // Received into the levels' workspaces, not the heap: an MPI exchange that timed out stays
  // pending and may still write there (mpi_communicator).
  auto* const node_calls =
      reinterpret_cast<said*>(comm.node().workspace().get(g.node_size * sizeof(said)));
  said me{{mine[0], mine[1]}, 0};
  comm.node().all_gather_bytes(reinterpret_cast<const std::byte*>(&me),
                               reinterpret_cast<std::byte*>(node_calls), sizeof me);
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
  auto* const cross_calls =
      reinterpret_cast<said*>(comm.cross().workspace().get(g.nodes * sizeof(said)));
  comm.cross().all_gather_bytes(reinterpret_cast<const std::byte*>(&me),
                                reinterpret_cast<std::byte*>(cross_calls), sizeof me);
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

/// What every two-level collective checks first, then the agreement; returns the grid.
template <class Node, class Cross, class Inside, class Across, class T>
grid begin_two_level(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                     collective_kind kind, reduce_op op, const T* a, const T* b, std::size_t count,
                     call_options options, const char* where) {
  check_collective_arguments<Node, Inside, T>(comm.node(), q.inside, where);
  check_collective_arguments<Cross, Across, T>(comm.cross(), q.across, where);
  check_world(comm.size(), where);
  const bool in_place = kind == collective_kind::all_reduce;
  check_buffers(a, in_place ? "data" : "send", b, in_place ? "data" : "recv", count, where);
  check_count(count, where);
  if (kind != collective_kind::all_gather) check_op(op, where);
  check_max_pieces(options.max_pieces, where);
  const call_descriptor mine[2] = {
      describe_call<Inside, T>(q.inside, kind, op, count, comm.size(), options),
      describe_call<Across, T>(q.across, kind, op, count, comm.size(), options)};
  const grid g = grid_of(comm);
  check_level_streams(g, where);
  two_level_agreement(comm, mine, where);
  return g;
}

/// The reduce_scatter of `count` values per rank in `scratch`: `permuted` (world x count values)
/// and `partial` (nodes x count).
template <class Node, class Cross, class Inside, class Across, class T>
void two_level_scatter(two_level<Node, Cross>& comm, const grid& g,
                       const level_policies<Inside, Across>& q, const T* send, T* recv,
                       std::size_t count, reduce_op op, call_options options, T* permuted,
                       T* partial) {
  // Chunk n x node_size + l of the world goes to block l (for place l), position n.
  for (std::size_t l = 0; l < g.node_size; ++l)
    for (std::size_t n = 0; n < g.nodes; ++n)
      if (count)
        std::memcpy(static_cast<void*>(permuted + (l * g.nodes + n) * count),
                    send + (n * g.node_size + l) * count, count * sizeof(T));
  run_host_collective(comm.node(), q.inside, collective_kind::reduce_scatter, op, permuted, partial,
                      count * g.nodes, options, "qsdp::reduce_scatter (two-level, within the node)",
                      level_stream_bases(g).inside);
  run_host_collective(comm.cross(), q.across, collective_kind::reduce_scatter, op, partial, recv,
                      count, options, "qsdp::reduce_scatter (two-level, across nodes)",
                      level_stream_bases(g).across);
}

/// The all_gather of `count` values per rank in `scratch`: `mine` (nodes x count: my place's
/// shards) and `gathered` (world x count, by place then node).
template <class Node, class Cross, class Inside, class Across, class T>
void two_level_gather(two_level<Node, Cross>& comm, const grid& g,
                      const level_policies<Inside, Across>& q, const T* send, T* recv,
                      std::size_t count, call_options options, T* mine, T* gathered) {
  run_host_collective(comm.cross(), q.across, collective_kind::all_gather, reduce_op::sum, send,
                      mine, count, options, "qsdp::all_gather (two-level, across nodes)",
                      level_stream_bases(g).across);
  run_host_collective(comm.node(), q.inside, collective_kind::all_gather, reduce_op::sum,
                      static_cast<const T*>(mine), gathered, count * g.nodes, options,
                      "qsdp::all_gather (two-level, within the node)", 0u);
  for (std::size_t l = 0; l < g.node_size; ++l)
    for (std::size_t n = 0; n < g.nodes; ++n)
      if (count)
        std::memcpy(static_cast<void*>(recv + (n * g.node_size + l) * count),
                    gathered + (l * g.nodes + n) * count, count * sizeof(T));
}

/// Carves the pair's workspace into sections of `sizes` values of T, each 64-byte aligned.
template <class T, std::size_t N>
void carve(host_workspace& workspace, const std::size_t (&sizes)[N], T* (&out)[N]) {
  std::size_t total = 0;
  for (std::size_t size : sizes) total += align64(size * sizeof(T));
  std::byte* base = workspace.get(total);
  for (std::size_t i = 0; i < N; ++i) {
    out[i] = reinterpret_cast<T*>(base);
    base += align64(sizes[i] * sizeof(T));
  }
}

}  // namespace qsdp::detail

namespace qsdp {

template <communicator Node, communicator Cross, class Inside, class Across, class T>
void reduce_scatter(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                    const T* send, T* recv, std::size_t count, reduce_op op, call_options options) {
  constexpr const char* where = "qsdp::reduce_scatter (two-level)";
  const detail::grid g = detail::begin_two_level(comm, q, detail::collective_kind::reduce_scatter,
                                                 op, send, recv, count, options, where);
  T* parts[2];
  detail::carve<T>(comm.workspace(), {g.world * count, g.nodes * count}, parts);
  detail::two_level_scatter(comm, g, q, send, recv, count, op, options, parts[0], parts[1]);
}

template <communicator Node, communicator Cross, class Inside, class Across, class T>
void all_gather(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                const T* send, T* recv, std::size_t count, call_options options) {
  constexpr const char* where = "qsdp::all_gather (two-level)";
  const detail::grid g = detail::begin_two_level(comm, q, detail::collective_kind::all_gather,
                                                 reduce_op::sum, send, recv, count, options, where);
  T* parts[2];
  detail::carve<T>(comm.workspace(), {g.nodes * count, g.world * count}, parts);
  detail::two_level_gather(comm, g, q, send, recv, count, options, parts[0], parts[1]);
}

template <communicator Node, communicator Cross, class Inside, class Across, class T>
void all_reduce(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q, T* data,
                std::size_t count, reduce_op op, call_options options) {
  constexpr const char* where = "qsdp::all_reduce (two-level)";
  const detail::grid g =
      detail::begin_two_level(comm, q, detail::collective_kind::all_reduce, op,
                              static_cast<const T*>(data), data, count, options, where);
  const std::size_t shard = (count + g.world - 1) / g.world;
  T* parts[5];  // padded data, permuted, node sums / my place's shards, my shard, gathered
  detail::carve<T>(comm.workspace(),
                   {g.world * shard, g.world * shard, g.nodes * shard, shard, g.world * shard},
                   parts);
  if (count) std::memcpy(static_cast<void*>(parts[0]), data, count * sizeof(T));
  if (g.world * shard > count)  // all-zero bits: +0 in every element type
    std::memset(static_cast<void*>(parts[0] + count), 0, (g.world * shard - count) * sizeof(T));
  detail::two_level_scatter(comm, g, q, parts[0], parts[3], shard, op, options, parts[1], parts[2]);
  detail::two_level_gather(comm, g, q, parts[3], parts[0], shard, options, parts[2], parts[4]);
  if (count) std::memcpy(static_cast<void*>(data), parts[0], count * sizeof(T));
}

}  // namespace qsdp
