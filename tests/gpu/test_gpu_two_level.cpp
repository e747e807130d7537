// SPDX-License-Identifier: Apache-2.0
// The two-level device collectives against the host ones on the same data: run_local_cuda_nodes
// (one GPU, in-process ranks in nodes) against run_local_nodes, and a pair of one-rank NCCL
// communicators against the host pair of one rank. Same schedules, random streams and packets, so
// the outputs are bit-identical; a rank that calls differently makes every rank throw.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <qsdp/collectives.hpp>

#include "gpu_support.hpp"
#include "support.hpp"

namespace {

using gpu_test::collective;
using local_pair = qsdp::two_level<qsdp::local_communicator, qsdp::local_communicator>;

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class Inside, class Across, class T>
std::vector<std::vector<T>> host_two_level(collective kind,
                                           const qsdp::level_policies<Inside, Across>& q, int world,
                                           int node_size, std::size_t count,
                                           const std::vector<std::vector<T>>& inputs,
                                           qsdp::reduce_op op, int calls,
                                           qsdp::call_options options) {
  std::vector<std::vector<T>> outputs(static_cast<std::size_t>(world));
  qsdp::run_local_nodes(world, node_size, [&](local_pair& pair) {
    const auto r = static_cast<std::size_t>(pair.rank());
    std::vector<T> out(kind == collective::all_gather ? count * outputs.size() : count);
    for (int c = 0; c < calls; ++c) switch (kind) {
        case collective::all_gather:
          qsdp::all_gather(pair, q, inputs[r].data(), out.data(), count, options);
          break;
        case collective::reduce_scatter:
          qsdp::reduce_scatter(pair, q, inputs[r].data(), out.data(), count, op, options);
          break;
        case collective::all_reduce:
          out = inputs[r];
          qsdp::all_reduce(pair, q, out.data(), count, op, options);
          break;
      }
    outputs[r] = out;
  });
  return outputs;
}

template <class T>
std::vector<std::vector<T>> inputs_for(collective kind, int world, std::size_t count) {
  const auto w = static_cast<std::size_t>(world);
  std::vector<std::vector<T>> inputs(w);
  for (std::size_t r = 0; r < w; ++r)
    inputs[r] = qsdp_test::convert<T>(
        qsdp_test::make_data(qsdp_test::distribution::gradient_with_outliers,
                             kind == collective::reduce_scatter ? count * w : count,
                             70 + static_cast<std::uint32_t>(r)));
  return inputs;
}

template <class Inside, class Across, class T>
void compare(collective kind, const qsdp::level_policies<Inside, Across>& q, int world,
             int node_size, std::size_t count, qsdp::reduce_op op, int calls) {
  const auto inputs = inputs_for<T>(kind, world, count);
  for (const qsdp::call_options options :
       {qsdp::call_options{},
        qsdp::call_options{.min_compressed_bytes = qsdp::recommended_min_compressed_bytes}}) {
    const auto expected =
        host_two_level(kind, q, world, node_size, count, inputs, op, calls, options);
    const auto got =
        gpu_test::device_two_level(kind, q, world, node_size, count, inputs, op, calls, options);
    for (std::size_t r = 0; r < expected.size(); ++r) {
      INFO("collective " << static_cast<int>(kind) << " world " << world << " nodes of "
                         << node_size << " count " << count << " rank " << r << " gate "
                         << options.min_compressed_bytes);
      CHECK(same_bits(expected[r], got[r]));
    }
  }
}

using rotated_across =
    qsdp::level_policies<qsdp::stochastic<4>, qsdp::hadamard<qsdp::stochastic<4>>>;
using eight_bits = qsdp::level_policies<qsdp::random_shift<8>, qsdp::stochastic<8>>;

}  // namespace

TEST_CASE("device two-level collectives equal the host's, bit for bit, every grid shape") {
  const rotated_across q{{.bucket_size = 256}, {{.bucket_size = 512, .seed = 5}}};
  struct shape {
    int world, node_size;
  };
  for (const shape s : {shape{4, 2}, shape{6, 3}, shape{3, 1}, shape{2, 2}, shape{1, 1}}) {
    // Two calls each: the levels' device counters must move as the host's.
    compare<qsdp::stochastic<4>, qsdp::hadamard<qsdp::stochastic<4>>, float>(
        collective::reduce_scatter, q, s.world, s.node_size, 4099, qsdp::reduce_op::avg, 2);
    compare<qsdp::stochastic<4>, qsdp::hadamard<qsdp::stochastic<4>>, float>(
        collective::all_gather, q, s.world, s.node_size, 3001, qsdp::reduce_op::sum, 2);
    compare<qsdp::stochastic<4>, qsdp::hadamard<qsdp::stochastic<4>>, float>(
        collective::all_reduce, q, s.world, s.node_size, 10007, qsdp::reduce_op::sum, 2);
  }
  const eight_bits q8{{}, {.seed = 9}};
  compare<qsdp::random_shift<8>, qsdp::stochastic<8>, __nv_bfloat16>(
      collective::all_reduce, q8, 4, 2, 65536, qsdp::reduce_op::avg, 2);
  // In pipeline pieces (call_options::max_pieces): above two min_piece_bytes per peer.
  constexpr std::size_t per_piece = qsdp::min_piece_bytes / sizeof(__nv_bfloat16);
  compare<qsdp::random_shift<8>, qsdp::stochastic<8>, __nv_bfloat16>(
      collective::reduce_scatter, q8, 4, 2, 2 * 2 * per_piece + 3, qsdp::reduce_op::sum, 2);
  compare<qsdp::random_shift<8>, qsdp::stochastic<8>, __nv_bfloat16>(
      collective::all_gather, q8, 4, 2, 2 * 2 * per_piece + 3, qsdp::reduce_op::sum, 2);
}

TEST_CASE("a rank that calls a device two-level collective differently makes every rank throw") {
  const auto inputs = inputs_for<float>(collective::reduce_scatter, 4, 501);
  std::vector<std::string> errors;
  gpu_test::device_two_level(collective::reduce_scatter, rotated_across{}, 4, 2, 500, inputs,
                             qsdp::reduce_op::sum, 1, {}, &errors, 3);
  REQUIRE(errors.size() == 4);
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].find("qsdp::reduce_scatter (device, two-level): ranks disagree") !=
          std::string::npos);
    // Rank 3's node names the count; node 0 names node 1.
    CHECK(errors[r].find(r >= 2 ? "count" : "on node 1, rank 1 of the node") != std::string::npos);
  }
}

TEST_CASE("a pair of NCCL communicators runs the two-level collectives, in CUDA graphs too") {
  if (!gpu_test::nccl_built()) {
    MESSAGE("NCCL was not found when the tests were built");
    return;
  }
  const rotated_across q{{.bucket_size = 256}, {{.bucket_size = 512, .seed = 5}}};
  const auto x = qsdp_test::make_data(qsdp_test::distribution::gradient_with_outliers, 20001, 3);
  // The host pair of one rank, each collective once (or twice in a row: a graph replay draws the
  // numbers of the next call, as the host's second call does); the outputs of the last of each.
  auto host = [&](int times) {
    std::vector<std::vector<float>> outputs;
    qsdp::run_local_nodes(1, 1, [&](local_pair& pair) {
      std::vector<float> out(x.size());
      for (int t = 0; t < times; ++t) qsdp::all_gather(pair, q, x.data(), out.data(), x.size());
      outputs.push_back(out);
      for (int t = 0; t < times; ++t)
        qsdp::reduce_scatter(pair, q, x.data(), out.data(), x.size(), qsdp::reduce_op::sum);
      outputs.push_back(out);
      for (int t = 0; t < times; ++t) {
        out = x;
        qsdp::all_reduce(pair, q, out.data(), out.size(), qsdp::reduce_op::sum);
      }
      outputs.push_back(out);
    });
    return outputs;
  };
  for (const bool graph_replay : {false, true}) {
    const auto expected = host(graph_replay ? 2 : 1);
    const auto got = gpu_test::nccl_two_level_one_rank(q, x, graph_replay);
    REQUIRE(got.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      INFO("collective " << i << " graph replay " << graph_replay);
      CHECK(same_bits(expected[i], got[i]));
    }
  }
}
