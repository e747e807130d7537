// SPDX-License-Identifier: Apache-2.0
/// @file
/// The collectives' vocabulary, shared by their declarations (collectives.hpp) and definitions
/// (detail/collectives/, detail/cuda/): the reduce op, and the pair of policies of a two-level
/// collective.
#pragma once

#include <cstdint>

namespace qsdp {

/// How reduce_scatter and all_reduce combine the ranks' values.
enum class reduce_op : std::uint32_t {
  sum = 1,  ///< the sum over the ranks (in fp32)
  avg = 2   ///< the sum divided by the number of ranks
};

/// The policies of a two-level collective: `inside` for the exchanges within a node, `across` for
/// those between nodes (e.g. stochastic<8> inside, hadamard<stochastic<4>> across; identity inside
/// sends the node's links exact values).
/// @tparam Inside the policy within a node
/// @tparam Across the policy between nodes
template <class Inside, class Across>
struct level_policies {
  Inside inside;  ///< the policy of the exchanges within a node
  Across across;  ///< the policy of the exchanges between nodes
};
/// Deduces the policies' types: `qsdp::level_policies{qsdp::identity{}, qsdp::stochastic<4>{}}`.
template <class Inside, class Across>
level_policies(Inside, Across) -> level_policies<Inside, Across>;

}  // namespace qsdp
