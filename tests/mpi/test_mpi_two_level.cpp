// SPDX-License-Identifier: Apache-2.0
//
// The two-level collectives under mpirun over qsdp::mpi_two_level: nodes from MPI_Comm_split_type
// (one machine: one node) and emulated nodes of every node size that divides the world (a node of
// one, odd sizes), identity at both levels exact against MPI's own collectives, quantized levels
// bit-identical on every rank, a rank that calls differently making every rank throw, and a node
// size that does not divide the world refused on every rank. Prints "N passed, M failed" on rank 0;
// exits nonzero if any rank failed.
#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include <qsdp/collectives.hpp>
#include <qsdp/mpi.hpp>

#include "mpi_check.hpp"
#include "support.hpp"

namespace {

using qsdp_mpi_test::check;
using qsdp_mpi_test::check_throws;
using qsdp_mpi_test::g_rank;
using qsdp_test::exact_sum_values;
int g_world = 1;

constexpr qsdp::call_options compress_all{.min_compressed_bytes = 0};

/// Whether every rank holds the same n floats in `v`.
bool same_everywhere(const std::vector<float>& v) {
  std::vector<float> all(v.size() * static_cast<std::size_t>(g_world));
  MPI_Allgather(v.data(), static_cast<int>(v.size()), MPI_FLOAT, all.data(),
                static_cast<int>(v.size()), MPI_FLOAT, MPI_COMM_WORLD);
  for (int r = 1; r < g_world; ++r)
    if (std::memcmp(all.data(), all.data() + static_cast<std::size_t>(r) * v.size(),
                    v.size() * sizeof(float)) != 0)
      return false;
  return true;
}

void check_node_size(int node_size) {
  const std::string tag = "world " + std::to_string(g_world) + " node size " +
                          std::to_string(node_size) + (node_size == 0 ? " (shared memory)" : "");
  qsdp::mpi_two_level levels(MPI_COMM_WORLD, node_size);
  auto& comm = levels.pair();
  check(comm.rank() == g_rank, "rank order is the world's, " + tag);
  const auto w = static_cast<std::size_t>(g_world);
  const std::size_t count = 2000;

  // Identity at both levels against MPI's own collectives: exact.
  const qsdp::level_policies exact{qsdp::identity{}, qsdp::identity{}};
  const auto full = exact_sum_values(g_rank, count * w);
  std::vector<float> ours(count), theirs(count);
  qsdp::reduce_scatter(comm, exact, full.data(), ours.data(), count, qsdp::reduce_op::sum,
                       compress_all);
  MPI_Reduce_scatter_block(full.data(), theirs.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD);
  check(ours == theirs, "identity reduce_scatter equals MPI_Reduce_scatter_block, " + tag);
  const auto shard = exact_sum_values(g_rank, count);
  std::vector<float> gathered(count * w), expected(count * w);
  qsdp::all_gather(comm, exact, shard.data(), gathered.data(), count, compress_all);
  MPI_Allgather(shard.data(), static_cast<int>(count), MPI_FLOAT, expected.data(),
                static_cast<int>(count), MPI_FLOAT, MPI_COMM_WORLD);
  check(gathered == expected, "identity all_gather equals MPI_Allgather, " + tag);

  // Quantized levels: the gathers and reductions end bit-identical on every rank.
  const qsdp::level_policies q{qsdp::stochastic<8>{.bucket_size = 256, .seed = 1},
                               qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 256}}};
  qsdp::all_gather(comm, q, shard.data(), gathered.data(), count, compress_all);
  check(same_everywhere(gathered), "quantized all_gather bit-identical on every rank, " + tag);
  auto data = exact_sum_values(g_rank, 3 * count + 1);
  qsdp::all_reduce(comm, q, data.data(), data.size(), qsdp::reduce_op::avg, compress_all);
  check(same_everywhere(data), "quantized all_reduce bit-identical on every rank, " + tag);
  // The recommended size gate: 100 values per peer move exact at both levels.
  std::vector<float> small(100 * w);
  qsdp::all_gather(comm, q, shard.data(), small.data(), 100,
                   {.min_compressed_bytes = qsdp::recommended_min_compressed_bytes});
  bool exact_small = true;
  for (int r = 0; r < g_world; ++r)
    exact_small = exact_small && std::memcmp(small.data() + static_cast<std::size_t>(r) * 100,
                                             exact_sum_values(r, 100).data(), 400) == 0;
  check(exact_small, "gated two-level all_gather exact, " + tag);

  // The last rank calls with another across policy: every rank throws.
  std::string message;
  try {
    if (g_rank == g_world - 1)
      qsdp::reduce_scatter(comm, qsdp::level_policies{qsdp::identity{}, qsdp::uniform<4>{}},
                           full.data(), ours.data(), count, qsdp::reduce_op::sum);
    else
      qsdp::reduce_scatter(comm, exact, full.data(), ours.data(), count, qsdp::reduce_op::sum);
  } catch (const qsdp::error& e) {
    message = e.what();
  }
  check(g_world == 1 || message.find("ranks disagree") != std::string::npos,
        "a mismatch throws on every rank (got: '" + message + "'), " + tag);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check_node_size(0);
  for (int node_size = 1; node_size <= g_world; ++node_size)
    if (g_world % node_size == 0) check_node_size(node_size);
  if (g_world > 1)
    check_throws([] { qsdp::mpi_two_level bad(MPI_COMM_WORLD, g_world + 1); },
                 "expected 0 (the shared-memory nodes) or a divisor of the world size",
                 "a node size that does not divide the world is refused on every rank");
  const int status = qsdp_mpi_test::report(MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
